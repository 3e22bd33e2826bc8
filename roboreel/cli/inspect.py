"""``roboreel inspect PATH``: a human summary of a dataset (episodes, frames, cameras, codec, GOP, shards, sizes).
``PATH`` may be a mixture of compiled datasets, ``a,b,...`` (with ``--weights``): each member's summary, then what
the mixture reads (reader/mixture.py): the features it keeps, the tasks merged, each member's draws per epoch."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="summarise a LeRobot v3 dataset or compiled output (or a mixture a,b,...)")
    p.add_argument("path", help="dataset root: local path or fsspec URL; a,b,... for a mixture of compiled datasets")
    p.add_argument("--weights", default=None, metavar="W1,W2,...", help="a mixture's draw probabilities")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.validate.summary import format_summary, summarize

    paths = [p for p in args.path.split(",") if p]
    if len(paths) < 2:
        s = summarize(args.path)
        print(json.dumps(s, indent=1) if args.json else format_summary(s), end="" if not args.json else "\n")
        return 0
    members = [summarize(p) for p in paths]
    mix = mixture_summary(paths, [float(w) for w in args.weights.split(",")] if args.weights else None)
    if args.json:
        print(json.dumps({"members": members, "mixture": mix}, indent=1))
        return 0
    for p, s in zip(paths, members, strict=True):
        print(f"== {p}\n{format_summary(s)}", end="")
    print(f"== mixture of {len(paths)} datasets\n"
          f"  draws per epoch: {mix['samples_per_epoch']} "
          f"({', '.join(f'{n} from #{i}' for i, n in enumerate(mix['member_samples']))})\n"
          f"  features kept: {', '.join(mix['features'])}\n"
          + "".join(f"  left out of {p}: {', '.join(k)}\n" for p, k in mix["left_out"].items())
          + f"  tasks: {len(mix['tasks'])} merged\n")
    return 0


def mixture_summary(paths: list[str], weights: list[float] | None) -> dict[str, Any]:
    """What ``CompiledDataset(paths, weights=weights)`` reads; its errors (features that differ) propagate."""
    from roboreel.reader import CompiledDataset

    ds = CompiledDataset(paths, weights=weights)
    return {"samples_per_epoch": ds.samples_per_epoch, "member_samples": ds.member_samples(),
            "features": ds.features, "tasks": ds.task_names,
            "left_out": {m.url: [k for k in m.manifest.features if k not in ds.features] for m in ds.members
                         if any(k not in ds.features for k in m.manifest.features)}}
