"""Where a reader's CPU goes: CPU time per sample of the training process and of its DataLoader workers.

A profiling aid next to ``roboreel bench`` (which times readers against each other): it iterates one reader for a
few epochs and splits the process tree's user + system CPU time between the training process (where
``roboreel.loader`` decodes) and the workers. CPU time per sample depends far less on what else the machine runs
than samples/s does, so it can compare code versions on a shared machine (``--repo`` imports roboreel from another
checkout, e.g. a ``git worktree`` of an older commit); run it under ``perf record`` for the native breakdown.

    python benchmarks/loader_cpu_split.py data/aloha-rr --batch-size 16 --num-workers 2
    python benchmarks/loader_cpu_split.py DIR --reader dataloader          # DataLoader(CompiledDataset) instead
    python benchmarks/loader_cpu_split.py DIR --channels-last --repo /path/to/other/checkout
    python benchmarks/loader_cpu_split.py DIR --by-thread                  # decode pool vs stage vs main thread
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def _tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc/PID/task/TID/children (cheap enough to sample inside the process). Not
    roboreel.bench.procmem's: ``--repo`` may import an older roboreel that lacks it."""
    out, stack = [pid], [pid]
    while stack:
        p = stack.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            stack += kids
    return out


def _cpu(pid: int, *, thread: bool = False) -> float | None:
    """utime + stime of a process (or, with ``thread``, of a thread of this process) in seconds."""
    try:
        with open(f"/proc/self/task/{pid}/stat" if thread else f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None if thread else 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compiled")
    p.add_argument("--reader", choices=["loader", "dataloader"], default="loader")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=5, help="epoch 0 is warm-up (not counted)")
    p.add_argument("--float32", action="store_true", help="float32 frames (default: uint8, as lerobot-train)")
    p.add_argument("--channels-last", action="store_true", help="roboreel.loader(channels_last=True)")
    p.add_argument("--action-window", type=int, default=0,
                   help="delta_timestamps: this many action steps from the current frame (ACT's chunk: 100)")
    p.add_argument("--decode-threads", type=int, default=None, help="roboreel.loader(decode_threads=...)")
    p.add_argument("--inflight-batches", type=int, default=None, help="roboreel.loader(inflight_batches=...)")
    p.add_argument("--repo", default=None, help="import roboreel from this checkout")
    p.add_argument("--by-thread", action="store_true",
                   help="also split the training process's CPU by thread (decode pool, decode stage, main, ...)")
    args = p.parse_args()
    if args.repo:
        sys.path.insert(0, args.repo)
    import torch

    import roboreel
    from roboreel.reader import CompiledDataset

    dts = None
    if args.action_window:
        fps = CompiledDataset(args.compiled).meta.fps
        dts = {"action": [k / fps for k in range(args.action_window)]}
    ds = CompiledDataset(args.compiled, return_uint8=not args.float32, seed=0, delta_timestamps=dts)
    kw = {"batch_size": args.batch_size, "num_workers": args.num_workers,
          "persistent_workers": args.num_workers > 0}
    if args.reader == "loader":
        extra = {k: v for k, v in (("decode_threads", args.decode_threads), ("inflight_batches", args.inflight_batches),
                                   ("channels_last", args.channels_last or None)) if v is not None}
        dl = roboreel.loader(ds, **kw, **extra)
    else:
        dl = torch.utils.data.DataLoader(ds, **kw)
    me = os.getpid()
    peak = {"tree": 0, "main": 0}
    stop = threading.Event()

    by_thread: dict[int, tuple[str, float]] = {}  # native thread id -> (name, CPU seconds last seen)
    counting = threading.Event()

    def watch() -> None:  # every 0.02 s with --by-thread: decode threads end with each epoch, unsampled after
        while not stop.wait(0.02 if args.by_thread else 0.1):
            if args.by_thread and counting.is_set():  # threads come and go per epoch: keep each one's last reading
                for t in threading.enumerate():
                    c = _cpu(t.native_id, thread=True)
                    if c is not None:
                        by_thread[t.native_id] = (t.name.split("_")[0].split(" ")[0], c)
            rss = {q: _rss(q) for q in _tree(me)}
            peak["tree"] = max(peak["tree"], sum(rss.values()))
            peak["main"] = max(peak["main"], rss.get(me, 0))

    threading.Thread(target=watch, daemon=True).start()
    n, t0, c0 = 0, 0.0, {}
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        if epoch == 1:
            t0, c0, n = time.perf_counter(), {q: _cpu(q) for q in _tree(me)}, 0
            start = {t.native_id: _cpu(t.native_id, thread=True) or 0.0 for t in threading.enumerate()}
            counting.set()
        for batch in dl:
            n += int(batch[ds.camera_keys[0]].shape[0])
        if epoch == args.epochs - 1:
            c1 = {q: _cpu(q) for q in _tree(me)}  # before persistent workers exit
    dt = time.perf_counter() - t0
    stop.set()
    main_ms = (c1[me] - c0[me]) / n * 1e3
    workers_ms = sum(c1[q] - c0.get(q, 0.0) for q in c1 if q != me) / n * 1e3
    print(f"{args.reader}{' channels_last' if args.channels_last else ''} batch {args.batch_size}, "
          f"{args.num_workers} workers: {n / dt:.0f} samples/s; CPU ms/sample {main_ms + workers_ms:.2f} "
          f"(training process {main_ms:.2f}, workers {workers_ms:.2f}); peak RSS tree {peak['tree'] / 2**20:.0f} MB, "
          f"training process {peak['main'] / 2**20:.0f} MB")
    if args.by_thread:  # sampled every 0.02 s: a thread's last 0.02 s before it ended is missed
        names: dict[str, float] = {}
        for tid, (name, c) in by_thread.items():
            names[name] = names.get(name, 0.0) + c - start.get(tid, 0.0)
        print("training process by thread, CPU ms/sample: " + ", ".join(
            f"{k} {v / n * 1e3:.3f}" for k, v in sorted(names.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
