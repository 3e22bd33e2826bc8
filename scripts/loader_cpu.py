"""Where a reader's CPU goes: CPU time per sample of the training process and of its DataLoader workers.

A profiling aid next to ``roboreel bench`` (which times readers against each other): it iterates one reader for a
few epochs and splits the process tree's user + system CPU time between the training process (where
``roboreel.loader`` decodes) and the workers. CPU time per sample depends far less on what else the machine runs
than samples/s does, so it can compare code versions on a shared machine (``--repo`` imports roboreel from another
checkout, e.g. a ``git worktree`` of an older commit); run it under ``perf record`` for the native breakdown.

    python scripts/loader_cpu.py ~/.cache/roboreel/aloha-compiled --batch-size 16 --num-workers 2
    python scripts/loader_cpu.py DIR --reader dataloader          # DataLoader(CompiledDataset) instead
    python scripts/loader_cpu.py DIR --channels-last --repo /path/to/other/checkout
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


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
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
    p.add_argument("--repo", default=None, help="import roboreel from this checkout")
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
        dl = roboreel.loader(ds, **kw, **({"channels_last": True} if args.channels_last else {}))
    else:
        dl = torch.utils.data.DataLoader(ds, **kw)
    me = os.getpid()
    peak = {"tree": 0, "main": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            rss = {q: _rss(q) for q in _tree(me)}
            peak["tree"] = max(peak["tree"], sum(rss.values()))
            peak["main"] = max(peak["main"], rss.get(me, 0))

    threading.Thread(target=watch, daemon=True).start()
    n, t0, c0 = 0, 0.0, {}
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        if epoch == 1:
            t0, c0, n = time.perf_counter(), {q: _cpu(q) for q in _tree(me)}, 0
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
