"""``roboreel lerobot-train ARGS...``: LeRobot's ``lerobot-train`` with exactly its arguments, reading the compiled
dataset at ``--dataset.root`` (local path or URL) through roboreel (docs/lerobot.md).

``--help`` lists roboreel's own ``--roboreel.*`` flags, built from ``LoaderOptions`` (its fields, and its
docstring's Args section for their help) so a flag added there shows up here, then lerobot-train's help, or,
without LeRobot, how to install it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import textwrap
import typing

USAGE = "usage: roboreel lerobot-train [--roboreel.NAME=VALUE ...] [LEROBOT-TRAIN ARGUMENTS ...]"
DESCRIPTION = ("LeRobot's own lerobot-train, with exactly its arguments, reading the compiled roboreel dataset at "
               "--dataset.root (a local path or URL; a,b,... for a mixture) through roboreel. Every argument is "
               "lerobot-train's except roboreel's own --roboreel.* flags below, which are taken out first.")
INSTALL = ("LeRobot is not installed here ({why}).\nInstall it (LeRobot 0.6 with its training extras):\n"
           "  pip install 'roboreel[lerobot]'\n"
           "then `roboreel lerobot-train --help` also lists lerobot-train's own options; docs/lerobot.md: setup and "
           "examples.")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lerobot-train", add_help=False,
        help="train with LeRobot's lerobot-train on a compiled dataset (--dataset.root=COMPILED; needs "
             "roboreel[lerobot])",
        description=DESCRIPTION,
    )
    p.set_defaults(func=run, passthrough=[])  # cli.main hands over everything after the verb untouched


def _arg_docs(doc: str) -> dict[str, str]:
    """``{name: text}`` of a Google-style docstring's Args section, each entry's lines joined, RST quotes dropped."""
    lines = inspect.cleandoc(doc).splitlines()
    out: dict[str, str] = {}
    try:
        start = lines.index("Args:") + 1
    except ValueError:
        return out
    name = None
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break  # the next section
        entry = re.match(r"^ {4}(\w+): ?(.*)$", line)
        if entry:
            name, text = entry.groups()
            out[name] = text
        elif name and line.strip():
            out[name] += " " + line.strip()
    return {k: v.replace("``", "").strip() for k, v in out.items()}


# Flags spelled unlike their ``LoaderOptions`` field (``LoaderOptions.from_argv`` reads ``--roboreel.remap`` into
# ``mixture``), and values the field's type alone would show as VALUE.
FLAG_NAMES = {"mixture": "remap"}
METAVARS = {"weights": "W1,W2,...|frames", "mixture": "FILE", "pad": "max", "mix_workers": "true|false"}


def _metavar(hint: object) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return "|".join(str(a) for a in args)
    if len(args) == 1 and typing.get_origin(hint) is not tuple:  # X | None
        return _metavar(args[0])
    if hint is int:
        return "N"
    if typing.get_origin(hint) is tuple:
        return "A,B,..."
    return "VALUE"


def roboreel_flags() -> list[tuple[str, str]]:
    """(``--roboreel.NAME=METAVAR``, help ending with its default) for every ``LoaderOptions`` field."""
    from roboreel.integrations.lerobot.options import PREFIX, LoaderOptions

    docs = _arg_docs(LoaderOptions.__doc__ or "")
    hints = typing.get_type_hints(LoaderOptions)
    flags = []
    for f in dataclasses.fields(LoaderOptions):
        text = docs.get(f.name, "")
        if text and "default" not in text.lower():
            default = f.default
            shown = ("none" if default is None else ",".join(map(str, default)) if isinstance(default, tuple)
                     else str(default))
            text += f" (default: {shown})"
        metavar = METAVARS.get(f.name) or _metavar(hints[f.name])
        flags.append((f"{PREFIX}{FLAG_NAMES.get(f.name, f.name)}={metavar}", text))
    return flags


def help_text(lerobot_missing: str | None) -> str:
    """roboreel's part of ``roboreel lerobot-train --help``; ``lerobot_missing``: why LeRobot does not import."""
    width = 100
    out = [USAGE, "", textwrap.fill(DESCRIPTION, width), "", "roboreel's options:"]
    for flag, text in roboreel_flags():
        out.append(f"  {flag}")
        out.append(textwrap.fill(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6))
    out.append("")
    if lerobot_missing is not None:
        out.append(INSTALL.format(why=lerobot_missing))
    else:
        out.append("lerobot-train's own options follow.")
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    from roboreel.integrations.lerobot import lerobot_available, main

    if "-h" in args.passthrough or "--help" in args.passthrough:
        ok, why = lerobot_available()
        sys.stdout.write(help_text(None if ok else why))
        sys.stdout.flush()
        if not ok:
            return 0
    return main(args.passthrough)
