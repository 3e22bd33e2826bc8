"""``roboreel`` command line: one module per verb under roboreel/cli/, each with ``register(subparsers)``.

Verb modules import their heavy dependencies inside ``run`` so ``roboreel --help`` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import sys

_VERBS = ("synth", "compile", "validate", "inspect", "bench", "doctor", "demo", "lerobot_train")
# Verbs whose arguments belong to another program: everything after the verb is passed on untouched
# (argparse would otherwise claim --help, -v, or refuse options it does not know) as ``args.passthrough``.
_PASSTHROUGH = ("lerobot-train",)

# What ``roboreel --help`` tells a user (the module docstring above is for developers).
_DESCRIPTION = """\
Compile a LeRobot v3 robot-learning dataset (local or hf://, s3://, http(s)://) once into stream-ready shards:
one HEVC clip per episode and camera, parquet with one row group per episode, per-episode tar shards. Then train
from them with exactly LeRobotDataset's samples, faster: roboreel.CompiledDataset / roboreel.loader in your own
loop, or LeRobot's own trainer through `roboreel lerobot-train`."""

_EPILOG = """\
usual order:
  roboreel compile SRC OUT              LeRobot v3 dataset -> compiled shards (resumable; --part K/N on SLURM)
  roboreel validate OUT                 check it (exit 0 clean, 1 violations, 2 unreadable; works on SRC too)
  roboreel lerobot-train --dataset.root=OUT ...    train with LeRobot's lerobot-train on the compiled shards
                                        (or roboreel.loader(roboreel.CompiledDataset(OUT), ...) in your own loop)

also: `roboreel inspect OUT` (what is in it), `roboreel doctor OUT` (can this machine decode it, on the GPU?),
`roboreel bench read OUT` (samples/s against LeRobotDataset; other modes: `roboreel bench --help`),
`roboreel synth` / `roboreel demo` (try it on generated data).
`roboreel VERB --help` for a verb's options; docs: README.md and docs/ in the repository."""


def build_parser() -> argparse.ArgumentParser:
    from roboreel._version import __version__

    parser = argparse.ArgumentParser(prog="roboreel", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"roboreel {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    from roboreel.cli._help import ArgumentParser, describe_verbs

    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=ArgumentParser)
    sub.required = True
    for verb in _VERBS:
        importlib.import_module(f"roboreel.cli.{verb}").register(sub)
    describe_verbs(sub)
    return parser


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(roboreel's part, the passed-on part or None): split after a passthrough verb that follows global flags."""
    for i, token in enumerate(argv):
        if token in _PASSTHROUGH:
            return argv[: i + 1], argv[i + 1 :]
        if not token.startswith("-"):
            break
    return argv, None


# OS errors that are the machine's setup, not a fault of roboreel: a read-only or full file system, no permission,
# a file where a directory should be. They are one line naming the file, like a missing file.
_SETUP_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR,
                           errno.EISDIR})


def _offline(e: BaseException) -> BaseException | None:
    """huggingface_hub's OfflineModeIsEnabled (hf:// with HF_HUB_OFFLINE=1) in ``e``'s chain of causes: a
    setting, not a fault, so it is one line like a missing file (never retried: formats/transient_errors.py)."""
    offline = getattr(sys.modules.get("huggingface_hub.errors"), "OfflineModeIsEnabled", None)
    if not isinstance(offline, type):
        return None
    from roboreel.formats.transient_errors import causes

    return next((c for c in causes(e) if isinstance(c, offline)), None)


def main(argv: list[str] | None = None) -> int:
    """The ``roboreel`` command; its exit status (0 done, 1 violations where a verb has them, 2 errors, 130
    interrupted: also while the verbs' modules still load)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    own, passthrough = _split_passthrough(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(own)
    if passthrough is not None:
        args.passthrough = passthrough
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # every verb's deliberate errors become one clear line and exit 2
        from roboreel.formats.errors import RoboreelError

        if isinstance(e, RoboreelError | FileExistsError | FileNotFoundError | ValueError) and not args.verbose:
            print(f"roboreel {args.verb}: error: {e}", file=sys.stderr)
            return 2
        if isinstance(e, OSError) and e.errno in _SETUP_ERRNOS and not args.verbose:  # str(e) names the file
            print(f"roboreel {args.verb}: error: {e}", file=sys.stderr)
            return 2
        offline = _offline(e)
        if offline is not None and not args.verbose:
            print(f"roboreel {args.verb}: error: {str(offline).splitlines()[0]}", file=sys.stderr)
            return 2
        raise
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
