"""The CPU decode ceiling: how many frames/s the machine decodes when nothing but sequential decode runs.

Every reader result is reported as a fraction of this, because on CPU it bounds everything: a sample of C cameras
costs C decoded frames at best. Sequential decode (no seeks, no keyframe re-decode) in one process per core is
the cheapest way to turn these exact clips into pixels.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import tarfile
import time
from pathlib import Path

from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import CLIP_SUFFIX

CEILING_SECONDS = 2.0  # a measurement's least length (see CeilingMeter.measure)


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


def _decode_all(clips: list[bytes], loops: int = 1) -> int:
    import torch

    torch.set_num_threads(1)
    from torchcodec.decoders import VideoDecoder

    frames = 0
    for _ in range(loops):
        for data in clips:
            dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1)
            for _ in dec:
                frames += 1
    return frames


class CeilingMeter:
    """Decode processes (one per core by default) kept for several ceiling measurements, so that measuring before
    and after every run costs the passes alone, not a pool's start and imports each time."""

    def __init__(self, clips: list[bytes], *, processes: int | None = None) -> None:
        if not clips:
            raise ValueError("no clips to measure the decode ceiling on")
        n = processes or os.cpu_count() or 1
        self.parts = [clips[i::n] for i in range(n)]
        self._pool = mp.get_context("fork").Pool(n)
        self._loops: dict[float, int] = {}  # min_seconds -> times over the clips a pass decodes them
        self._pool.map(_decode_all, [p[:1] for p in self.parts])  # warm up imports in every process

    def measure(self, *, min_seconds: float = 0.0) -> float:
        """Frames/s of one pass, decoding the clips as many times over as it takes to last ``min_seconds``.

        Why a least length: on a shared host a pass of a fraction of a second measures a moment, not the machine.
        Measured on the 2-core host of docs/benchmarks.md (2026-11-29, ALOHA 224x224, 600 frames): passes of
        0.15 s, best of 3, gave 3,849-6,204 frames/s in 20 measurements a few seconds apart; passes of ~1.7 s
        gave 3,981-4,637 in 8. A reader timed over seconds against a short burst's peak reads as a smaller share
        than it is."""
        loops = self._loops.get(min_seconds)
        if loops is None:
            loops = 1
            if min_seconds > 0:  # one pass of the clips, timed, sets how many times over a pass decodes them
                t = time.perf_counter()
                self._pool.map(_decode_all, self.parts)
                loops = max(1, math.ceil(min_seconds / max(time.perf_counter() - t, 1e-3)))
            self._loops[min_seconds] = loops
        t = time.perf_counter()
        frames = sum(self._pool.starmap(_decode_all, [(p, loops) for p in self.parts]))
        return frames / (time.perf_counter() - t)

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()

    def __enter__(self) -> CeilingMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
