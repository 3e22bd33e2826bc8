"""Reader counters shared across DataLoader workers through one small shared-memory tensor.

Each process (the main one, or DataLoader worker ``w``) owns one row and *adds* its increments there, so
counts survive non-persistent workers being replaced every epoch, and ``stats()`` in the main process sums the
rows. The tensor is created with the dataset, before workers exist, and travels to them with the dataset
(shared memory under fork and spawn alike).
"""

from __future__ import annotations

import time

import torch

FIELDS = (
    "samples",
    "decode_seconds",
    "fetch_seconds",
    "fetch_wait_seconds",
    "bytes_read",
    "requests",
    "retries",
    "episodes_read",
    "episodes_kept",  # episodes an epoch took from memory instead of reading them (reader/plan/_episode_cache.py)
    "decoder_opens",
    "decoder_reuses",
    "decode_calls",
    "frames_decoded",
    "fallback_clips",  # clips decoded on the CPU although a GPU was asked for (reader/decode/_routing.py says why)
    "decode_cpu_seconds",  # CPU time of roboreel.loader's decode threads (time.thread_time around each task)
)
_INT_FIELDS = {"samples", "bytes_read", "requests", "retries", "episodes_read", "episodes_kept", "decoder_opens",
               "decoder_reuses", "decode_calls", "frames_decoded", "fallback_clips"}
ROWS = 257  # row 0: the main process; row 1 + w: DataLoader worker w (rows wrap beyond 256 workers)
# While samples flow, a process's counters reach the table at most this often (and always when it ends): a flush
# sums its counters, makes a tensor and adds it into shared memory; after every 8 samples that was ~7% of a
# DataLoader worker's CPU at 224x224, and summing every live clip's counters once per batch ~2% of the decode
# stage's process.
FLUSH_EVERY_S = 0.2


class SharedCounters:
    """A [ROWS, len(FIELDS)] float64 shared tensor plus this process's unflushed view."""

    def __init__(self) -> None:
        self.table = torch.zeros((ROWS, len(FIELDS)), dtype=torch.float64).share_memory_()
        self.flags = torch.zeros(8, dtype=torch.int32).share_memory_()  # one-time events (warnings) across workers

    def first_time(self, flag: int) -> bool:
        """True the first time any process of this dataset asks for ``flag`` (racy by design: at worst twice)."""
        if int(self.flags[flag]):
            return False
        self.flags[flag] = 1
        return True

    def add(self, row: int, values: dict[str, float]) -> None:
        """Add increments (only the named fields) to ``row``."""
        delta = torch.tensor([float(values.get(f, 0.0)) for f in FIELDS], dtype=torch.float64)
        self.table[row % ROWS] += delta

    def totals(self) -> dict[str, float | int]:
        sums = self.table.sum(0).tolist()
        return {f: int(v) if f in _INT_FIELDS else float(v) for f, v in zip(FIELDS, sums, strict=True)}

    def reset(self) -> None:
        self.table.zero_()


class Flusher:
    """Turns a consumer's cumulative counters into increments for its row, so repeated flushes never double count."""

    def __init__(self, counters: SharedCounters, row: int) -> None:
        self.counters, self.row = counters, row
        self._last: dict[str, float] = {}
        self._due_at = 0.0

    def due(self, every_s: float = FLUSH_EVERY_S) -> bool:
        """Whether ``every_s`` seconds passed since the last time this said so (the first call: yes); callers
        then build the counters and ``flush`` them, so a call that is not due costs one clock read."""
        now = time.perf_counter()
        if now < self._due_at:
            return False
        self._due_at = now + every_s
        return True

    def flush(self, current: dict[str, float]) -> None:
        delta = {k: v - self._last.get(k, 0.0) for k, v in current.items()}
        if any(delta.values()):
            self.counters.add(self.row, delta)
            self._last = dict(current)
