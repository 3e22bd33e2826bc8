"""``--fps N``: the output frame grid. Each episode keeps source frames 0, k, 2k, ... (k = source fps / N).

A kept frame j is source frame j * k, so an episode of L source frames keeps ceil(L / k). Rows are taken at
the same frames and renumbered on the new grid: ``frame_index`` j, ``timestamp`` j / N (float32, as LeRobot's
writer stores it: for a source whose timestamps are frame_index / fps this is the source row's own value), and
``index`` counted anew from 0 over the kept frames of all episodes in order. Everything here is a pure function
of the source's metadata and the settings, so every ``--part`` job and resume agrees without talking.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pyarrow as pa

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.lerobot_v3 import EpisodeMeta


def frame_step(source_fps: int, fps: int | None) -> int:
    """k, the source frames per output frame; ValueError when ``fps`` does not divide the source's."""
    if fps is None or fps == source_fps:
        return 1
    if fps > source_fps or source_fps % fps:
        raise ValueError(f"--fps {fps} does not divide the source's {source_fps} fps ({v3.INFO_PATH}): each output "
                         f"frame must be a whole number k of source frames; fps that divide it: "
                         f"{', '.join(map(str, divisors(source_fps)))}")
    return source_fps // fps


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def kept_frames(length: int, step: int) -> np.ndarray:
    """Source frame indices an episode of ``length`` frames keeps: 0, step, 2 * step, ..."""
    return np.arange(0, length, step, dtype=np.int64)


def kept_length(length: int, step: int) -> int:
    return math.ceil(length / step)


def resample_episodes(episodes: list[EpisodeMeta], step: int) -> list[EpisodeMeta]:
    """The episodes on the new grid: lengths ceil(L / k), from/to indices counted again over the kept frames.
    Video spans stay the source's (they say where to decode)."""
    if step == 1:
        return episodes
    out, at = [], 0
    for e in episodes:
        n = kept_length(e.length, step)
        out.append(replace(e, length=n, from_index=at, to_index=at + n))
        at += n
    return out


def resample_rows(rows: pa.Table, *, step: int, from_index: int, fps: int) -> pa.Table:
    """An episode's rows at its kept frames, ``index`` / ``frame_index`` / ``timestamp`` renumbered (module doc)."""
    if step == 1:
        return rows
    kept = rows.take(pa.array(kept_frames(rows.num_rows, step)))
    n = kept.num_rows
    j = np.arange(n, dtype=np.int64)
    new = {"index": from_index + j, "frame_index": j, "timestamp": (j / fps).astype(np.float32)}
    for name, values in new.items():
        if name in kept.column_names:
            i = kept.column_names.index(name)
            kept = kept.set_column(i, kept.schema.field(i), pa.array(values).cast(kept.schema.field(i).type))
    return kept


def check_transform(features: dict, fps: int, settings: object) -> None:
    """Refuse (ValueError, before anything is written) what a resizing / resampling compile cannot carry
    exactly: ``--fps`` must divide the source's, and image features stored in the data parquet would be neither
    resized nor given recomputed stats (their normalisation stats would be lost), so they are refused loudly."""
    frame_step(fps, getattr(settings, "fps", None))
    images = sorted(k for k, f in features.items() if f.get("dtype") == "image")
    if images and getattr(settings, "transforms", False):
        raise ValueError(f"--resize / --fps cannot carry the image features {images} stored in the data parquet "
                         f"({v3.INFO_PATH}): they would be neither resized nor given stats; compile without "
                         "--resize / --fps")
