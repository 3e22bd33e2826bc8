"""Help formatting shared by every verb: each option's help ends with its default; a verb without a description
shows its one-line help as one.

Set once in ``build_parser`` (as the subparsers' parser class), so a verb module cannot forget it; an option whose
help already says its default (``default`` in the text, e.g. "default: the available cores") is left as written.
"""

from __future__ import annotations

import argparse
from typing import Any

# Actions that take no value (their default, off or a count of 0, goes without saying) and subcommand entries.
_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._CountAction, argparse._HelpAction,
          argparse._VersionAction, argparse._SubParsersAction,
          argparse._SubParsersAction._ChoicesPseudoAction)


def says_default(action: argparse.Action) -> bool:
    """Whether ``action``'s help needs no default appended: a flag, required, or help that already names it."""
    return action.required or isinstance(action, _FLAGS) or "default" in (action.help or "").lower()


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``ArgumentDefaultsHelpFormatter`` that does not repeat a default the help text already gives, shows an
    unset (None) default as "none", and leaves flags alone."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if says_default(action) or action.default is argparse.SUPPRESS:
            return help_text
        shown = "none" if action.default is None else "%(default)s"
        return f"{help_text} (default: {shown})"


class ArgumentParser(argparse.ArgumentParser):
    """Every verb's parser (and a verb's own subcommands'): ``HelpFormatter`` unless one is given, and no
    abbreviated options (a removed spelling such as ``--g`` must not be taken for ``--gop``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def describe_verbs(sub: argparse._SubParsersAction) -> None:
    """A verb parser without a description gets its one-line help (what ``roboreel --help`` lists) as one."""
    summaries = {a.dest: a.help for a in sub._choices_actions}
    for name, parser in sub.choices.items():
        if not parser.description and summaries.get(name):
            text = summaries[name]
            parser.description = text[0].upper() + text[1:] + "."
