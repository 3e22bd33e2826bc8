"""Windows given in frames (``delta_indices``, as LeRobot policies declare them: ``action_delta_indices`` ...).

A window in seconds (``delta_timestamps``) is tied to one fps; the same window in frames means "the next 16
steps" on any robot's own frame grid, which is what a policy trained on a mixture of robots recorded at 15-50 fps
asks for (openpi's, GR00T's and Octo's loaders window in steps). Pure function, no fps involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def frame_offsets(delta_indices: Mapping[str, Sequence[int]] | None, *, keys: Iterable[str]) -> dict[str, np.ndarray]:
    """Check ``delta_indices`` (``{key: [frame offsets]}``) and return ``{key: int64 offsets}`` (empty for None)."""
    if delta_indices is None:
        return {}
    if not isinstance(delta_indices, Mapping):
        raise ValueError(f"delta_indices must be a dict {{key: [frame offsets]}}, got {type(delta_indices).__name__}")
    allowed = list(keys)
    out: dict[str, np.ndarray] = {}
    for key, offsets in delta_indices.items():
        if key not in allowed:
            raise ValueError(f"delta_indices key {key!r} is not a feature of the dataset; features: {sorted(allowed)}")
        values = list(offsets) if isinstance(offsets, Iterable) and not isinstance(offsets, str) else None
        if not values or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
            raise ValueError(f"delta_indices[{key!r}] must be a non-empty list of integer frame offsets, got "
                             f"{offsets!r:.200}")
        out[key] = np.array([int(v) for v in values], dtype=np.int64)
    return out
