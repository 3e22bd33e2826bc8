"""Delta windows, exactly as ``LeRobotDataset.__getitem__`` (LeRobot's map-style reader) computes them.

``delta_timestamps = {key: [dt, ...]}`` (seconds) becomes integer frame offsets ``d = round(dt * fps)``; a sample
at frame ``i`` of an episode ``[start, end)`` then reads frames ``clamp(i + d, start, end - 1)``, and
``<key>_is_pad`` is True where ``i + d`` fell outside the episode. Padded slots therefore hold the clamped edge
frame's values (not zeros). Pure functions: the compiled reader and the reference reader share them, so the two
cannot disagree on a window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

_MAX_OFFSET = 2.0**53  # frames: beyond this a float offset is no longer exact (and int64 frame numbers overflow)


def delta_offsets(
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    *,
    fps: int,
    tolerance_s: float,
    keys: Iterable[str],
) -> dict[str, np.ndarray]:
    """Check ``delta_timestamps`` and turn it into ``{key: int64 offsets}`` (empty dict for None).

    Each ``dt`` must be a multiple of ``1/fps`` within ``tolerance_s`` (LeRobot's ``check_delta_timestamps``),
    and each key must be a feature of the dataset (``keys``): a typo would otherwise silently drop the window.
    """
    if delta_timestamps is None:
        return {}
    if not isinstance(delta_timestamps, Mapping):
        raise ValueError(f"delta_timestamps must be a dict {{key: [seconds, ...]}}, got {type(delta_timestamps).__name__}")
    allowed = list(keys)
    out: dict[str, np.ndarray] = {}
    for key, deltas in delta_timestamps.items():
        if key not in allowed:
            raise ValueError(f"delta_timestamps key {key!r} is not a feature of the dataset; features: {sorted(allowed)}")
        try:
            values = [float(dt) for dt in deltas]
        except (TypeError, ValueError) as e:
            raise ValueError(f"delta_timestamps[{key!r}] must be a list of offsets in seconds, got {deltas!r}") from e
        bad = [dt for dt in values if not math.isfinite(dt) or abs(dt * fps) >= _MAX_OFFSET]
        if bad:
            raise ValueError(f"delta_timestamps[{key!r}] has {bad}: offsets must be finite seconds within "
                             f"+-{_MAX_OFFSET:.0e} frames")
        if not values:
            raise ValueError(f"delta_timestamps[{key!r}] is empty; give at least one offset in seconds")
        off = [dt for dt in values if abs(dt * fps - round(dt * fps)) / fps > tolerance_s]
        if off:
            raise ValueError(
                f"delta_timestamps[{key!r}] has {off}, not multiples of 1/fps = 1/{fps} s within "
                f"tolerance_s={tolerance_s}"
            )
        out[key] = np.array([round(dt * fps) for dt in values], dtype=np.int64)
    return out


def window(i: int, start: int, end: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frames read and padding mask for the sample at frame ``i`` of the episode ``[start, end)``.

    Returns ``(query, is_pad)``: int64 frame numbers clamped into ``[start, end - 1]`` (same numbering as ``i``,
    global or episode-relative) and a bool mask, True where ``i + offset`` left the episode.
    """
    raw = i + offsets
    return np.clip(raw, start, end - 1), (raw < start) | (raw >= end)
