"""``roboreel validate PATH``: check a LeRobot v3 dataset or compiled output; exit 0 clean, 1 violations, 2 unreadable."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a LeRobot v3 dataset or compiled output (exit 0 clean, 1 violations, 2 unreadable)",
        description="Check a LeRobot v3 dataset or a compiled roboreel dataset and report every violation with its "
        "file, row group and episode. Exit status: 0 clean (warnings allowed), 1 violations, 2 unreadable input.",
    )
    p.add_argument("path", metavar="PATH", help="dataset root: local path or fsspec URL")
    p.add_argument("--world-size", type=int, default=1, metavar="N", help="training ranks the shards must split over")
    p.add_argument("--num-workers", type=int, default=1, metavar="W", help="DataLoader workers per rank")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--fast", action="store_true",
                       help="skip sha256 hashing; count source mp4 frames from container headers")
    speed.add_argument("--deep", action="store_true", help="also decode every frame of every video and clip")
    p.add_argument("--strict", action="store_true", help="warnings count as violations (exit 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.validate import validate

    report = validate(args.path, world_size=args.world_size, num_workers=args.num_workers, fast=args.fast,
                      deep=args.deep, strict=args.strict, progress=not args.json and sys.stderr.isatty())
    sys.stdout.write(report.to_json() if args.json else report.to_text())
    return report.exit_code
