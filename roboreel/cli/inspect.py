"""``roboreel inspect PATH``: a human summary of a dataset (episodes, frames, cameras, codec, GOP, shards, sizes)."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="summarise a LeRobot v3 dataset or compiled output")
    p.add_argument("path", help="dataset root: local path or fsspec URL")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.validate.summary import format_summary, summarize

    s = summarize(args.path)
    print(json.dumps(s, indent=1) if args.json else format_summary(s), end="" if not args.json else "\n")
    return 0
