"""The CPU decode ceiling: how many frames/s the machine decodes when nothing but sequential decode runs.

Every reader result is reported as a fraction of this, because on CPU it bounds everything: a sample of C cameras
costs C decoded frames at best. Sequential decode (no seeks, no keyframe re-decode) in one process per core is
the cheapest way to turn these exact clips into pixels.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tarfile
import time
from pathlib import Path

from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import CLIP_SUFFIX


def compiled_clips(root: str | Path, *, limit_bytes: int = 256 << 20) -> list[bytes]:
    """Clip bytes from a local compiled dataset's shards, in file order, up to ``limit_bytes`` in total."""
    manifest = load_manifest(str(root))
    clips: list[bytes] = []
    total = 0
    for shard in manifest.shards:
        with tarfile.open(Path(root) / shard.path) as tar:
            for member in tar:
                if member.name.endswith(CLIP_SUFFIX):
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    clips.append(data)
                    total += len(data)
                    if total >= limit_bytes:
                        return clips
    return clips


def _decode_all(clips: list[bytes]) -> int:
    import torch

    torch.set_num_threads(1)
    from torchcodec.decoders import VideoDecoder

    frames = 0
    for data in clips:
        dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
        for _ in dec:
            frames += 1
    return frames


def decode_ceiling(clips: list[bytes], *, processes: int | None = None, repeats: int = 1) -> float:
    """Frames/s decoding ``clips`` sequentially, split over ``processes`` (default: one per core)."""
    if not clips:
        raise ValueError("no clips to measure the decode ceiling on")
    n = processes or os.cpu_count() or 1
    parts = [clips[i::n] for i in range(n)]
    best = 0.0
    ctx = mp.get_context("fork")
    with ctx.Pool(n) as pool:
        pool.map(_decode_all, [p[:1] for p in parts])  # warm up imports in every process
        for _ in range(repeats):
            t = time.perf_counter()
            frames = sum(pool.map(_decode_all, parts))
            best = max(best, frames / (time.perf_counter() - t))
    return best
