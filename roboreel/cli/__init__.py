"""``roboreel`` command line: one module per verb under roboreel/cli/, each with ``register(subparsers)``.

Verb modules import their heavy dependencies inside ``run`` so ``roboreel --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

_VERBS = ("synth", "compile", "validate", "inspect", "bench", "doctor", "demo")


def build_parser() -> argparse.ArgumentParser:
    from roboreel._version import __version__

    parser = argparse.ArgumentParser(prog="roboreel", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"roboreel {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb in _VERBS:
        importlib.import_module(f"roboreel.cli.{verb}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
        raise
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
