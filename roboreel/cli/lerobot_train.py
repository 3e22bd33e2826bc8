"""``roboreel lerobot-train ARGS...``: LeRobot's ``lerobot-train`` with exactly its arguments, reading the compiled
dataset at ``--dataset.root`` (local path or URL) through roboreel (docs/lerobot.md)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lerobot-train", add_help=False,
        help="train with LeRobot's lerobot-train on a compiled dataset (--dataset.root=COMPILED; needs roboreel[lerobot])",
        description="Every argument is lerobot-train's (see `roboreel lerobot-train --help`); --dataset.root is a "
                    "compiled roboreel dataset, local or a URL. roboreel's own: --roboreel.loader=stage|dataloader "
                    "(default stage: decode threads in the training process) and --roboreel.decode_threads=N "
                    "(docs/lerobot.md).",
    )
    p.set_defaults(func=run, passthrough=[])  # cli.main hands over everything after the verb untouched


def run(args: argparse.Namespace) -> int:
    from roboreel.integrations.lerobot import main

    return main(args.passthrough)
