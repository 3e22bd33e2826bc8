"""``roboreel bench MODE``: one subcommand per benchmark, each with only the options it uses (shared groups:
options.py). Every module imports the benchmark code inside ``run`` so ``--help`` stays fast."""

from __future__ import annotations

import argparse
import importlib

_MODES = ("read", "compiling", "variants", "soak", "scale")  # modules; variants registers resize and images

DESCRIPTION = """Benchmarks of roboreel against the tools it replaces, alternated A B A B on the same data, each
writing its reports (JSON, CSV, charts) to --out. Numbers depend on the host: run on a quiet machine.
`roboreel bench MODE --help` for a mode's options."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: dataloading vs LeRobotDataset, compile vs ffmpeg, resize, images, "
                                     "memory soak, index scale", description=DESCRIPTION)
    modes = p.add_subparsers(dest="mode", metavar="MODE")
    modes.required = True
    for name in _MODES:
        importlib.import_module(f"roboreel.cli.bench.{name}").register(modes)
