"""What the GPU check's parts share: their command line, the prepared data, clips, CPU time and the GIL probe.

Each part is a script run in its own process by run.py (``python3 scripts/gpu_check/part_<name>.py --data DIR
--results FILE [--cpu-only] [--seconds S]``); it merges into the results file as it measures (results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # results.py beside this file
sys.path.insert(1, str(HERE.parent.parent))  # the repository root: roboreel

import results  # noqa: E402, F401  (the parts take it from here)

# the data --prepare makes (prepare.py): compiled HEVC at a real camera size (480x640) and at 224x224 (sizes in
# prepared.json), and the AV1 LeRobot v3 source of the first for LeRobotDataset
REAL, SMALL, SOURCE = "main", "small", "main-source"


@dataclass(frozen=True)
class PartArgs:
    data: Path
    results: Path
    cpu_only: bool
    seconds: float  # each measurement's window; the part sizes itself from it

    @property
    def prepared(self) -> dict[str, Any]:
        f = self.data / "prepared.json"
        return json.loads(f.read_text()) if f.exists() else {}


def part_args(doc: str | None = None) -> PartArgs:
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    p.add_argument("--data", type=Path, required=True, help="the prepared data folder (DIR/data of --prepare)")
    p.add_argument("--results", type=Path, required=True, help="the results file to merge into")
    p.add_argument("--cpu-only", action="store_true", help="measure only what needs no GPU")
    p.add_argument("--seconds", type=float, default=5.0, help="window of each measurement")
    a = p.parse_args()
    return PartArgs(a.data, a.results, a.cpu_only, a.seconds)


def cores() -> int:
    return len(os.sched_getaffinity(0))


def clips(compiled: Path) -> list[tuple[str, bytes]]:
    """(member name, mp4 bytes) of every clip in a compiled dataset's shards, in shard order."""
    out = []
    for shard in sorted(compiled.rglob("*.tar")):
        with tarfile.open(shard) as t:
            out += [(f"{shard.name}:{m.name}", t.extractfile(m).read()) for m in t if m.name.endswith(".mp4")]
    if not out:
        raise FileNotFoundError(f"no .mp4 clips in the shards under {compiled}")
    return out


def cuda_usable() -> tuple[bool, str]:
    import torch

    if not torch.cuda.is_available():
        return False, f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)"
    return True, torch.cuda.get_device_name(0)


# -- CPU time ------------------------------------------------------------------------------------------------
def process_cpu_seconds() -> float:
    """user + system seconds of this process alone (all its threads; not the workers)."""
    t = os.times()
    return t.user + t.system


def _thread_cpu(native_id: int) -> float | None:
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class ThreadCpu:
    """CPU seconds of this process's Python threads over a window, summed by name family ("MainThread",
    "roboreel-decode-pool", "roboreel-decode", ...), from /proc/self/task/TID/stat. The loader's threads come and
    go with each epoch, so a watcher reads them every 0.25 s and keeps each thread's last reading (the last 0.25 s
    of a thread that ended are missed: the decode threads' own total is the loader's ``decode_cpu_seconds``, which
    loaderrun.py records beside this). Not faster: reading /proc/PID/task entries while the process's threads
    exit livelocked a 6.18 kernel in CI (``shrink_dcache_parent``), and each read widens that window."""

    def __init__(self) -> None:
        self._start: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-cpu-watch", daemon=True)

    def _read(self) -> None:
        for t in threading.enumerate():
            c = _thread_cpu(t.native_id)
            if c is not None:
                self._start.setdefault(t.native_id, c if t.native_id in self._seen0 else 0.0)
                self._last[t.native_id] = (t.name.split("_")[0], c)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self._read()

    def __enter__(self) -> ThreadCpu:
        self._seen0 = {t.native_id for t in threading.enumerate()}  # threads alive now count from now on
        for t in threading.enumerate():
            c = _thread_cpu(t.native_id)
            if c is not None:
                self._start[t.native_id] = c
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._read()
        self._stop.set()
        self._thread.join()

    def by_name(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for tid, (name, c) in self._last.items():
            out[name] = out.get(name, 0.0) + c - self._start.get(tid, 0.0)
        return out


class GilProbe:
    """How often, and how long, a thread that needs the GIL finds it held by another thread of this process.

    A probe thread samples: every ~0.5 ms it calls ``time.sleep(0)``, which releases the GIL and takes it back
    (CPython's sleep drops the GIL around the system call). Taking it back is immediate (a few microseconds) when
    no other thread holds the GIL; when one is running Python, the probe waits until that thread lets go, at the
    latest after ``sys.getswitchinterval()`` (5 ms), when CPython forces a switch. So:

    - ``held_share``: the share of samples that waited over ``held_us`` = the probability that the GIL was held
      when a thread wanted it, i.e. the GIL's load (samples at random moments). ``held_us`` is 50 us, or twice
      the 99th percentile of the probe on the idle process where the machine is slower than that (part_scaling);
    - ``mean_wait_us``: what each acquisition of the GIL costs a thread under that load.

    Decode threads that run native code without the GIL keep both low; a held_share near 1 means some thread holds
    the GIL all the time, and more decode threads cannot help whatever the cores. The probe takes the GIL for about
    a microsecond per sample, so it barely perturbs what it measures. With more runnable threads than cores the
    OS may also delay the probe; that shows as waits too, so read held_share with the process's CPU use.
    (py-spy ``record --gil`` samples the same from outside; it is not on the GPU machine, this needs nothing.)
    """

    HELD_US = 50.0
    GAP_S = 0.0005

    def __init__(self, held_us: float = HELD_US) -> None:
        self.held_us = held_us
        self._stop = threading.Event()
        self.waits: list[float] = []
        self._thread = threading.Thread(target=self._run, name="gil-probe", daemon=True)

    def _run(self) -> None:
        clock, sleep, waits = time.perf_counter, time.sleep, self.waits
        while not self._stop.is_set():
            t = clock()
            sleep(0)
            waits.append(clock() - t)
            sleep(self.GAP_S)  # leave the GIL alone between samples: sample, do not compete

    def __enter__(self) -> GilProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        w = sorted(self.waits) or [0.0]
        held = sum(x > self.held_us * 1e-6 for x in w)
        return {"held_share": round(held / len(w), 3), "held_over_us": round(self.held_us, 1),
                "mean_wait_us": round(1e6 * sum(w) / len(w), 1), "median_wait_us": round(1e6 * w[len(w) // 2], 1),
                "p99_wait_ms": round(1e3 * w[min(len(w) - 1, int(0.99 * len(w)))], 3), "samples": len(w)}


def psnr(a: Any, b: Any) -> float:
    """RGB PSNR in dB of two uint8 tensors of one shape (inf when equal)."""
    import math

    import torch

    d = a.to(torch.float64) - b.to(torch.float64)
    mse = float((d * d).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def finite(x: float) -> float | str:
    """JSON has no inf: equal frames are written as the string "inf"."""
    return round(x, 2) if x != float("inf") else "inf"
