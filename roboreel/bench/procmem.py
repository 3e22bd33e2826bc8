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


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid``, read from ``/proc/PID/task/TID/children`` (Linux): a few small reads, where
    psutil's ``children()`` scans every process of the machine; the sampler runs inside the measured process, so
    it must cost next to nothing. psutil where those files do not exist."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):  # not Linux, or a kernel without the files
        with contextlib.suppress(psutil.NoSuchProcess):
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        return []
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:  # exited meanwhile: its siblings' trees are still walked
            continue
        for tid in tids:
            with contextlib.suppress(OSError), open(f"/proc/{p}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
                out += kids
                stack += kids
    return out


def _tree_sum(pid: int | None, measure: Callable[[psutil.Process], float]) -> float:
    """``measure`` summed over a process and its live descendants (processes that vanish meanwhile count 0)."""
    pid = pid or os.getpid()
    procs = []
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(p))
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

    def __init__(self, interval_s: float = 0.2) -> None:
        # not faster: walking /proc/PID/task of processes whose threads exit livelocked a 6.18 kernel
        # (shrink_dcache_parent in the reaper); fewer walks, fewer chances
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
