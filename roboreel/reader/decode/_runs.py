"""The run cache's pieces: decoded GOP runs waiting for their samples, and the byte budget they share.

Frames leave the pool in GOP runs, one run of a clip front to back (_pool.py, ``frame_order="segments"``), or
several runs of a clip at once, each on a decoder lane of its own, their frames drawn one at a time (the default
order, _shuffled.py). Either way the first frame of a run names the frames the lane's next samples will ask.
``ClipDecoders`` decodes them with it, back to back on one decoder (one call, or a few when calls are size-capped),
and keeps them here until asked (one run per clip and lane): a decoder then works through a whole run at once
instead of a frame or a few per batch between other clips' work.

``RunBudget`` bounds what every decoded run holds together. The ``CompiledDataset`` path has one per iteration
(one ``ClipDecoders``); the decode stage of ``roboreel.loader`` has one ``ClipDecoders`` per live clip, used by
several threads, and shares one budget between all of them, so its memory is bounded by ``DecodeOptions.cache_mb``
whatever the number of clips. A run that does not fit is decoded shorter (down to the asked frames alone), never
evicting another run (its frames would cost a seek back).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

DEFAULT_RUN_CACHE_BYTES = 96 << 20
DEFAULT_GPU_RUN_CACHE_BYTES = 1 << 30  # in GPU memory, for roboreel.loader's GPU decoders (DecodeOptions.gpu_cache_mb)


def auto_run_cache_bytes(frame_bytes: Sequence[int], *, open_runs: int, gop: int, call_bytes: int) -> int:
    """The run cache bound of ``DecodeOptions(cache_mb=None)`` for a decode stage: room for what one decode call
    returns (``call_bytes``; the whole GOP where smaller) of each of ``open_runs`` runs, for every camera
    (``frame_bytes``: one decoded frame of each), and at least ``DEFAULT_RUN_CACHE_BYTES``. Each run the order
    keeps open then decodes a call's frames at once instead of one frame per call (docs/reader.md, "Decode and
    memory")."""
    per_run = sum(min(call_bytes, gop * b) if call_bytes else gop * b for b in frame_bytes)
    return max(DEFAULT_RUN_CACHE_BYTES, int(open_runs) * per_run)


class RunBudget:
    """Bytes that decoded runs may hold, shared by decoders on several threads (reservations under a lock)."""

    def __init__(self, max_bytes: int = DEFAULT_RUN_CACHE_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"run_cache_bytes must be an integer >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.used = 0
        self._lock = threading.Lock()

    def reserve(self, frames: int, frame_bytes: int, *, at_least: int = 0) -> int:
        """Reserve room for up to ``frames`` frames of ``frame_bytes``; returns how many were granted (0, or
        between ``at_least`` and ``frames``: fewer than ``at_least`` is not worth a run)."""
        with self._lock:
            n = min(frames, (self.max_bytes - self.used) // frame_bytes) if frame_bytes > 0 else 0
            if n <= 0 or n < at_least:
                return 0
            self.used += n * frame_bytes
            return n

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


@dataclass
class DecodedRun:
    """Decoded frames of a clip's current run, waiting for their samples (views of the decoded batches)."""

    frames: dict[int, tuple[torch.Tensor, float]]
    nbytes: int  # reserved in the budget: every frame of the calls, since a view keeps its whole batch alive


def run_ahead(misses: list[int], runs: Mapping[int, int]) -> list[int]:
    """The frames after ``misses`` up to their runs' ends (``runs``: asked frame -> run end, exclusive), in order,
    without the asked frames themselves."""
    asked = set(misses)
    ahead: list[int] = []
    for f in misses:
        for g in range(f + 1, runs.get(f, f + 1)):
            if g not in asked:
                asked.add(g)
                ahead.append(g)
    return ahead
