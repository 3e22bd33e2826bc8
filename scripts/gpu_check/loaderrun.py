"""Timing one loader the same way for every part: warm up, then count samples over a fixed window.

Samples/s counts batches the training loop received inside the window (after ``warmup_batches``; epochs roll
over with ``set_epoch``). CPU ms per sample is the CPU time of the whole process tree (the training process with
its decode threads, plus the DataLoader workers) over the window divided by the samples; the training process's
own share and its threads' (from /proc, by thread name) come beside it. On a GPU the window ends after a
``torch.cuda.synchronize()``, so queued GPU work is not counted as done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from common import GilProbe, ThreadCpu, process_cpu_seconds

from roboreel.bench.procmem import tree_cpu_seconds

# what a roboreel.loader's stats() says about the window's run (part_loader.py, part_scaling.py record it)
LOADER_STATS = ("fallback_clips", "clips_by_device", "fallbacks", "decode_parallelism", "decoder_opens",
                "decode_calls", "frames_decoded")


def measure(loader: Any, *, seconds: float, warmup_batches: int = 4, cuda: bool = False,
            set_epoch: Callable[[int], None] | None = None, gil: float | None = None,
            count: Callable[[dict[str, Any]], int] | None = None) -> dict[str, Any]:
    """Iterate ``loader`` (epoch after epoch) and time it; see the module docstring."""
    import torch

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    count = count or (lambda b: int(next(v for v in b.values() if hasattr(v, "shape")).shape[0]))

    stats = getattr(loader, "stats", None)  # a roboreel.loader's counters; a plain DataLoader has none

    def decode_cpu() -> float | None:  # the loader's decode threads, on their own clocks (published every 0.2 s)
        return stats().get("decode_cpu_seconds") if stats is not None else None

    t_start = time.perf_counter()
    batches, samples, epoch = 0, 0, 0
    first_batch_s = None
    t0 = c0 = p0 = d0 = None
    threads = ThreadCpu()
    probe = GilProbe(gil) if gil is not None else None  # gil: its held_us
    done = False
    while not done:
        if set_epoch is not None:
            set_epoch(epoch)
        it: Iterable = loader
        for batch in it:
            if first_batch_s is None:
                first_batch_s = time.perf_counter() - t_start
            batches += 1
            if t0 is None:
                if batches >= warmup_batches:
                    sync()
                    t0, c0, p0 = time.perf_counter(), tree_cpu_seconds(), process_cpu_seconds()
                    d0 = decode_cpu()
                    threads.__enter__()
                    if probe is not None:
                        probe.__enter__()
                continue
            samples += count(batch)
            if time.perf_counter() - t0 >= seconds:
                done = True
                break
        epoch += 1
        if epoch > 1000:
            break
    sync()
    if t0 is None:
        raise RuntimeError(f"the loader gave only {batches} batches: fewer than the {warmup_batches} of warm-up")
    wall = time.perf_counter() - t0
    tree, proc = tree_cpu_seconds() - c0, process_cpu_seconds() - p0
    threads.__exit__(None, None, None)
    if probe is not None:
        probe.__exit__(None, None, None)
    by_thread = {k: round(1e3 * v / max(samples, 1), 3) for k, v in threads.by_name().items() if v > 0}
    out = {"samples_per_s": round(samples / wall, 1), "samples": samples, "seconds": round(wall, 2),
           "first_batch_s": round(first_batch_s or 0.0, 2), "epochs": epoch,
           "cpu_ms_per_sample": round(1e3 * tree / max(samples, 1), 3),
           "main_process_cpu_ms_per_sample": round(1e3 * proc / max(samples, 1), 3),
           "main_process_cores_used": round(proc / wall, 2), "tree_cores_used": round(tree / wall, 2),
           "threads_cpu_ms_per_sample": by_thread}
    if stats is not None:
        st = stats()
        out.update({k: st.get(k) for k in LOADER_STATS}, inflight_batches=loader.inflight_batches,
                   wait_seconds=round(float(st.get("wait_seconds") or 0.0), 2))
        d1 = st.get("decode_cpu_seconds")
        if d0 is not None and d1 is not None:
            out["decode_threads_cpu_ms_per_sample"] = round(1e3 * (d1 - d0) / max(samples, 1), 3)
    if probe is not None:
        out["gil"] = probe.summary()
    return out
