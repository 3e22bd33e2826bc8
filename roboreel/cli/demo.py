"""``roboreel demo [DIR]``: synthesise a dataset, compile it, validate it, read a few batches, print a summary.

The whole product in one command, on a fresh machine, in about a minute: what `make demo` runs.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="synth -> compile -> validate -> read, with a summary",
                       description="The whole product in one command, in about a minute: synthesise a small LeRobot "
                                   "v3 dataset (AV1), validate it, compile it, validate and inspect the compiled "
                                   "dataset, then read a few batches through a DataLoader and check every frame and "
                                   "value against the source.")
    p.add_argument("dir", nargs="?", default="demo-out", metavar="DIR",
                   help="working directory, deleted and recreated: DIR/source and DIR/compiled")
    p.add_argument("--episodes", type=int, default=12, metavar="N", help="episodes of the synthetic dataset")
    p.add_argument("--cameras", type=int, default=3, metavar="N", help="cameras")
    p.add_argument("--height", type=int, default=96, metavar="N", help="frame height")
    p.add_argument("--width", type=int, default=128, metavar="N", help="frame width")
    p.add_argument("--workers", type=int, default=2, metavar="N", help="compile workers")
    p.set_defaults(func=run)


def _step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def run(args: argparse.Namespace) -> int:
    from roboreel.cli import main as cli

    root = Path(args.dir)
    if root.exists():
        shutil.rmtree(root)
    src, out = root / "source", root / "compiled"

    t = _step(f"synth: a LeRobot v3.0 dataset (AV1, {args.cameras} cameras, {args.height}x{args.width}) -> {src}")
    rc = cli(["synth", str(src), "--episodes", str(args.episodes), "--cameras", str(args.cameras),
              "--height", str(args.height), "--width", str(args.width), "--min-length", "30", "--max-length", "60",
              "--video-files-size-in-mb", "0.05", "--row-groups", "file"])
    if rc:
        return rc
    print(f"   {time.perf_counter() - t:.1f}s")

    t = _step("validate the source (older LeRobot writers put several episodes in one row group: expect findings)")
    cli(["validate", str(src)])
    print(f"   {time.perf_counter() - t:.1f}s")

    t = _step(f"compile -> {out} (HEVC clips, one row group per episode, per-episode tar shards)")
    rc = cli(["compile", str(src), str(out), "--workers", str(args.workers), "--episodes-per-shard", "3"])
    if rc:
        return rc
    print(f"   {time.perf_counter() - t:.1f}s")

    t = _step("validate the compiled dataset for 2 ranks x 2 workers")
    rc = cli(["validate", str(out), "--world-size", "2", "--num-workers", "2"])
    print(f"   {time.perf_counter() - t:.1f}s")
    if rc:
        return rc

    _step("inspect")
    rc = cli(["inspect", str(out)])
    if rc:
        return rc

    t = _step("read: CompiledDataset through a DataLoader (2 workers, batch 16, action window of 8 steps)")
    from roboreel.cli._demo_read import read_some

    read_some(str(out), str(src))
    print(f"   {time.perf_counter() - t:.1f}s")
    print(f"\nDone. Source: {src}  Compiled: {out}")
    return 0
