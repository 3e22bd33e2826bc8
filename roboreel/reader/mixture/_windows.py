"""A mixture's windows on each member's own frame grid.

``delta_indices`` (frames) mean the same steps on every robot: member ``i`` reads offsets ``d`` at its own fps
(``d / fps_i`` seconds). ``delta_timestamps`` (seconds) keep LeRobot's meaning: each offset must fall on every
member's frame grid (a multiple of ``1 / fps_i`` within ``tolerance_s``), and the error names the member whose
grid cannot hold it (0.05 s is one frame at 20 fps, but no frame at 15 fps). Keys are canonical
(_canonical.py); a camera a member lacks has no window there (its zeros carry the window's length).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from roboreel.formats.merge import MixtureMismatch
from roboreel.reader.mixture._canonical import Canonical
from roboreel.reader.plan import delta_offsets, frame_offsets


def member_windows(canon: Canonical, fps: Sequence[int], *, delta_timestamps: Mapping[str, Sequence[float]] | None,
                   delta_indices: Mapping[str, Sequence[int]] | None, tolerance_s: float
                   ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, list[float]] | None], dict[str, int]]:
    """(per member ``{own key: int64 offsets}``, per member its windows in seconds, ``{canonical key: length}``)."""
    if delta_timestamps is not None and delta_indices is not None:
        raise ValueError("give delta_timestamps (seconds) or delta_indices (frames), not both")
    given: Mapping[str, Sequence[Any]] = delta_indices if delta_indices is not None else delta_timestamps or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"{'delta_indices' if delta_indices is not None else 'delta_timestamps'} must be a dict "
                         f"{{key: [offsets]}}, got {type(given).__name__}")
    unknown = [k for k in given if k not in canon.features]
    if unknown:
        raise MixtureMismatch(f"window keys {unknown} are not features of every dataset of the mixture "
                              f"{[m.url for m in canon.members]}; its features: {list(canon.features)}")
    windows, seconds = [], []
    for m, f in zip(canon.members, fps, strict=True):
        own = m.own
        mine = {own[k]: v for k, v in given.items() if k in own}
        try:
            if delta_indices is not None:
                w = frame_offsets(mine, keys=list(m.rename))
            else:
                w = delta_offsets(mine, fps=f, tolerance_s=tolerance_s, keys=list(m.rename))
        except ValueError as e:
            raise ValueError(f"{m.url} ({f} fps): {e}") from None
        windows.append(w)
        seconds.append({k: list(map(float, v)) for k, v in mine.items()} if delta_timestamps is not None else None)
    lengths = {k: len(list(v)) for k, v in given.items()}
    return windows, seconds, lengths
