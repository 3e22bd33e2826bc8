"""Peak RSS of a whole process tree (DataLoader workers included), sampled on a background thread.

ru_maxrss only covers one process (or the largest waited-for child), and DataLoader workers live as long as the
loader: sampling psutil's tree is the honest way to see what a training job's data path costs in memory.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

import psutil


def _tree_sum(pid: int | None, measure: Callable[[psutil.Process], float]) -> float:
    """``measure`` summed over a process and its live descendants (processes that vanish meanwhile count 0)."""
    try:
        root = psutil.Process(pid or os.getpid())
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += measure(p)
    return total


def tree_rss(pid: int | None = None) -> int:
    """Current RSS in bytes of a process and all its descendants."""
    return int(_tree_sum(pid, lambda p: p.memory_info().rss))


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process and its live descendants so far."""
    return _tree_sum(pid, lambda p: sum(p.cpu_times()[:2]))


class PeakRSS:
    """Context manager: ``with PeakRSS() as m: ...; m.peak`` is the largest tree RSS seen (bytes)."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self.peak = tree_rss()
        self._thread = threading.Thread(target=self._run, name="roboreel-peak-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, tree_rss())
