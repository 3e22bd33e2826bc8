"""``roboreel inspect PATH``: a human summary of a dataset (episodes, frames, cameras, codec, GOP, shards, sizes).
``PATH`` may be a mixture of compiled datasets, ``a,b,...`` (with ``--weights``, and ``--remap FILE`` / ``--pad``
for robots with other keys): each member's summary, then what the mixture reads (reader/mixture/_dataset.py): its
canonical features, what each member maps onto them (renamed, padded, missing cameras, left out), the tasks
merged, each member's draws per epoch."""

from __future__ import annotations

import argparse
import json
from typing import Any

from roboreel.cli import _args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="summarise a LeRobot v3 dataset or compiled output (or a mixture a,b,...)")
    p.add_argument("path", help="dataset root: local path or fsspec URL; a,b,... for a mixture of compiled datasets")
    p.add_argument("--weights", default=None, type=_args.weights_or_frames, metavar="W1,W2,...|frames",
                   help="a mixture's draw probabilities")
    p.add_argument("--remap", default=None, metavar="FILE",
                   help="a mixture's canonical keys: JSON/YAML, one {old: new or null} per dataset (docs/mixtures.md)")
    p.add_argument("--pad", default=None, choices=["max"], help="zero-pad 1-D features to the largest member's size")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.validate.summary import format_summary, summarize

    paths = [p for p in args.path.split(",") if p]
    if len(paths) < 2:  # one dataset, also written "a," (a mixture's list cut short)
        s = summarize(paths[0] if paths else args.path)
        print(json.dumps(s, indent=1) if args.json else format_summary(s), end="" if not args.json else "\n")
        return 0
    members = [summarize(p) for p in paths]
    spec: dict[str, Any] = {}
    if args.remap:
        from roboreel.integrations.lerobot.options import read_mixture_file

        spec = read_mixture_file(args.remap)
    if args.pad:
        spec["pad"] = args.pad
    if args.weights:
        spec["weights"] = args.weights if args.weights == "frames" else list(args.weights)
    mix = mixture_summary(paths, **spec)
    if args.json:
        print(json.dumps({"members": members, "mixture": mix}, indent=1))
        return 0
    for p, s in zip(paths, members, strict=True):
        print(f"== {p}\n{format_summary(s)}", end="")
    print(format_mixture(paths, mix), end="")
    return 0


def format_mixture(paths: list[str], mix: dict[str, Any]) -> str:
    lines = [f"== mixture of {len(paths)} datasets",
             f"  draws per epoch: {mix['samples_per_epoch']} "
             f"({', '.join(f'{n} from #{i}' for i, n in enumerate(mix['member_samples']))})",
             "  canonical features:"]
    lines += [f"    {k}  {f['dtype']} {f['shape']}" for k, f in mix["canonical"].items()]
    for i, m in enumerate(mix["maps"]):
        lines.append(f"  #{i} {m['url']} ({m['fps']} fps):")
        lines += [f"    {old} -> {new}" for old, new in m["renamed"].items()]
        lines += [f"    {k}: {own} -> {size} (zero-padded, {k}_dim_is_pad)" for k, (own, size) in m["padded"].items()]
        lines += [f"    {c}: missing (zeros, {c}_is_missing)" for c in m["missing"]]
        if m["left_out"]:
            lines.append(f"    left out: {', '.join(m['left_out'])}")
    lines.append(f"  tasks: {len(mix['tasks'])} merged")
    return "\n".join(lines) + "\n"


def mixture_summary(paths: list[str], weights: list[float] | str | None = None, **canonical: Any) -> dict[str, Any]:
    """What ``CompiledDataset(paths, weights=weights, **canonical)`` reads (remap, pad, normalize); its errors
    (features that cannot be made alike) propagate."""
    from roboreel.reader import CompiledDataset

    ds = CompiledDataset(paths, weights=weights, **canonical)
    maps = []
    for m, cm in zip(ds.members, ds.canon.members, strict=True):
        maps.append({"url": m.url, "fps": m.fps,
                     "renamed": {k: v for k, v in cm.rename.items() if k != v},
                     "padded": {k: [n, ds.canon.sizes[k]] for k, n in cm.pad.items()},
                     "missing": list(cm.missing),
                     "left_out": [k for k in m.manifest.features if k not in cm.rename]})
    return {"samples_per_epoch": ds.samples_per_epoch, "member_samples": ds.member_samples(),
            "features": ds.features, "tasks": ds.task_names,
            "canonical": {k: {"dtype": f.get("dtype"), "shape": list(f.get("shape") or [])}
                          for k, f in ds.canon.features.items()},
            "maps": maps,
            "left_out": {mp["url"]: mp["left_out"] for mp in maps if mp["left_out"]}}
