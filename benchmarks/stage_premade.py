"""What making batches costs the decode stage: ``roboreel.loader``'s decode pool fed live or from batches made ahead.

With ``num_workers=0`` the training process both makes the pending batches (records read, samples picked, their
rows gathered, collated: reader/plan, reader/decode/_deferred.py) and decodes them on its decode threads. This
script runs the decode stage's loop (decode/_stage.py's pool, batches in flight as the stage keeps them) two ways,
alternated in one run:

- ``live``: each epoch's pending batches are made while it decodes (a ``DataLoader`` over the dataset's pending
  stream with ``num_workers=0``), as ``roboreel.loader(num_workers=0)`` does;
- ``premade``: the same epochs' batches, made before the clock starts.

The difference is what making batches costs on the same cores: its own CPU, and the decode threads waiting while
the Python that makes them holds the GIL. Samples/s, CPU ms a sample and cores busy (CPU time / wall time) per run.
``--make-only`` times making the batches alone (no decode), CPU ms a sample, e.g. against another checkout.

    python benchmarks/stage_premade.py data/aloha-224 --rounds 3
    python benchmarks/stage_premade.py DIR --float32 --repo /path/to/other/checkout
    python benchmarks/stage_premade.py DIR --make-only --action-window 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compiled")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=12, help="epochs per run (after one warm-up epoch)")
    p.add_argument("--rounds", type=int, default=3, help="live and premade runs, alternated")
    p.add_argument("--decode-threads", type=int, default=None, help="default: the loader's (the cores)")
    p.add_argument("--inflight-batches", type=int, default=None, help="default: the loader's")
    p.add_argument("--float32", action="store_true", help="float32 frames (default: uint8, as lerobot-train)")
    p.add_argument("--action-window", type=int, default=0,
                   help="delta_timestamps: this many action steps from the current frame (ACT's chunk: 100)")
    p.add_argument("--make-only", action="store_true", help="time making the batches alone, no decode")
    p.add_argument("--keep-episodes-mb", type=float, default=None,
                   help="StreamOptions.keep_episodes_mb (default: the dataset's own, automatic; 0: episodes read "
                        "every epoch)")
    p.add_argument("--repo", default=None, help="import roboreel from this checkout")
    args = p.parse_args()
    if args.repo:
        sys.path.insert(0, args.repo)
    import torch
    from torch.utils.data import DataLoader

    from roboreel.reader import CompiledDataset
    from roboreel.reader.decode._buffers import BufferPool
    from roboreel.reader.decode._deferred import collate_pending
    from roboreel.reader.decode._gpu import DeviceDecoders
    from roboreel.reader.decode._heap import (
        DECODE_CALL_BYTES,
        DECODE_MMAP_THRESHOLD_BYTES,
        DECODE_TRIM_THRESHOLD_BYTES,
        pin_mmap_threshold,
    )
    from roboreel.reader.decode._layout import BatchLayout
    from roboreel.reader.decode._routing import Router
    from roboreel.reader.decode._runs import RunBudget
    from roboreel.reader.decode._stage import DecodePool, default_decode_threads, default_inflight_batches
    from roboreel.reader.loader._loader import _PendingStream

    pin_mmap_threshold(DECODE_MMAP_THRESHOLD_BYTES, DECODE_TRIM_THRESHOLD_BYTES)  # as roboreel.loader's process
    dts = None
    if args.action_window:
        fps = CompiledDataset(args.compiled).meta.fps
        dts = {"action": [k / fps for k in range(args.action_window)]}
    kw: dict[str, Any] = {}
    if args.keep_episodes_mb is not None:
        from roboreel.reader.options import StreamOptions

        kw["stream"] = StreamOptions(keep_episodes_mb=args.keep_episodes_mb)
    ds = CompiledDataset(args.compiled, return_uint8=not args.float32, seed=0, delta_timestamps=dts, **kw)
    threads = args.decode_threads or default_decode_threads()
    inflight = args.inflight_batches or default_inflight_batches(threads)
    cameras = {c.key: c for c in ds.manifest.cameras}
    try:  # the loader's bound (automatic by default); older checkouts (--repo) had a number only
        from roboreel.reader.loader._stage import run_cache_bound

        cache_bytes = run_cache_bound(ds.decode_options.run_cache_bytes, ds, 1)
    except ImportError:
        cache_bytes = ds.decode_options.run_cache_bytes
    buffers, budget, idle = BufferPool(), RunBudget(cache_bytes), ds.idle_policy.begin()
    dtype = torch.uint8 if ds.return_uint8 else torch.float32

    def batches() -> DataLoader:
        return DataLoader(_PendingStream(ds), batch_size=args.batch_size, collate_fn=collate_pending, num_workers=0)

    firsts: list[float] = []  # per epoch: seconds until its first pending batch was there

    def epoch(source: Any) -> int:
        """One epoch through a fresh pool, as the loader's stage runs one (decode/_stage.py, reader/loader/_stage.py)."""
        start = time.perf_counter()
        source = iter(source)
        router = Router("cpu", cameras=cameras, capability=None)

        def make() -> DeviceDecoders:
            return DeviceDecoders(router, keep=ds.keep_frames, max_call_bytes=DECODE_CALL_BYTES, run_budget=budget,
                                  gpu_run_budget=None, idle=idle, depth=ds.depth)

        pool = DecodePool(threads=threads, make_decoders=make,
                          layout=BatchLayout(cameras, {c: torch.device("cpu") for c in cameras}, dtype=dtype),
                          tolerance_s=ds.decode_options.tolerance_s, buffers=buffers)
        jobs: deque = deque()
        n = 0
        try:
            for pending in source:
                if not n:  # the epoch's first pending batch: its records read, its samples picked
                    firsts.append(time.perf_counter() - start)
                while jobs and jobs[0].done():
                    jobs.popleft().wait()
                jobs.append(pool.submit(pending))
                n += pending.size
                while len(jobs) > inflight:
                    jobs.popleft().wait()
            while jobs:
                jobs.popleft().wait()
        finally:
            pool.close()
        return n

    if args.make_only:
        list(batches())
        cpus = []
        for _ in range(args.rounds):
            c0 = time.process_time()
            n = sum(b.size for _ in range(args.epochs) for b in batches())
            cpus.append((time.process_time() - c0) / n * 1e3)
            print(f"make     {cpus[-1]:.4f} CPU ms/sample  ({n} samples)", flush=True)
        print(f"making batches alone, batch {args.batch_size}: median {statistics.median(cpus):.4f}, "
              f"best {min(cpus):.4f} CPU ms/sample")
        return 0
    epoch(batches())  # warm-up: imports, decoders parked for the next epochs
    results: dict[str, list[tuple[float, float, float, float]]] = {"live": [], "premade": []}
    for _ in range(args.rounds):
        for mode in results:
            made = [list(batches()) for _ in range(args.epochs)] if mode == "premade" else None
            firsts.clear()
            t0, c0, n = time.perf_counter(), time.process_time(), 0
            for e in range(args.epochs):
                n += epoch(made[e] if made is not None else batches())
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            first = statistics.median(firsts) * 1e3
            results[mode].append((n / wall, cpu / n * 1e3, cpu / wall, first))
            print(f"{mode:8s} {n / wall:7.0f} samples/s  {cpu / n * 1e3:.3f} CPU ms/sample  {cpu / wall:.2f} cores  "
                  f"first batch {first:.1f} ms  ({n} samples)", flush=True)
    print(f"{threads} decode threads, {inflight} batches in flight, batch {args.batch_size}, "
          f"{'float32' if args.float32 else 'uint8'}; medians (first batch: an epoch's first pending batch, ms):")
    for mode, rows in results.items():
        print(f"  {mode:8s} {statistics.median(r[0] for r in rows):7.0f} samples/s  "
              f"{statistics.median(r[1] for r in rows):.3f} CPU ms/sample  {statistics.median(r[2] for r in rows):.2f} cores"
              f"  first batch {statistics.median(r[3] for r in rows):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
