"""Write docs/api.md, the API reference, from the code: ``python scripts/gen_api_doc.py``.

Generated rather than written so the page cannot drift from the code: every public class, function, option and
command comes with its signature (``inspect``, the dataclass fields, the argparse parsers) and one line from its
docstring or help. ``--check`` exits 1 when docs/api.md is not what the code gives (tests/test_api_doc.py runs it,
so ``make test`` and CI catch a stale page).

The page names no measured figure (those live, dated, on their own pages, which the guides link): a summary is
cut before one. Output is deterministic: no memory addresses, no paths of this machine, and no value that depends
on it (``%(default)s here``, compile's core count, is left out).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"
COMMAND = "python scripts/gen_api_doc.py"

HEADER = f"""# API reference

Every public class, function, option and command of roboreel, with its signature and what it does in one line.
Generated from the code by `{COMMAND}` (`make test` fails when this page is not current); the
guides say how to use them: [reader.md](reader.md), [mixtures.md](mixtures.md), [gpu.md](gpu.md),
[lerobot.md](lerobot.md).
"""

# A measured figure: "~0.84 KB", "25%", "4.9x", "281 MiB", "0.6 dB", "20 ms".
_FIGURE = re.compile(r"~\s?[+-]?\d|\b\d+(?:\.\d+)?\s?(?:%|x\b|KB\b|MB\b|MiB\b|GB\b|GiB\b|ms\b|dB\b)")
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\.\.)\.(?:\s+|$)")
_PAREN = re.compile(r"\s*\([^()]*\)")


# -- text --------------------------------------------------------------------------------------------------------
def _flat(text: str) -> str:
    """One line, RST literals (````x````) as markdown code."""
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))


def summary(text: str | None) -> str:
    """The first sentence of ``text`` as one line, without measured figures (see the module doc)."""
    text = _flat(text or "")
    text = _PAREN.sub(lambda m: "" if _FIGURE.search(m.group()) else m.group(), text)
    text = _SENTENCE_END.split(text, maxsplit=1)[0]
    hit = _FIGURE.search(text)
    if hit:
        head = text[: hit.start()]
        cut = max(head.rfind(": "), head.rfind("; "), head.rfind(", "))
        text = head[:cut] if cut > 0 else head
    return text.strip().rstrip(":;,.").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(head: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def first_doc(obj: Any) -> str:
    """The first sentence of ``obj``'s docstring (its first paragraph, as one line)."""
    doc = inspect.getdoc(obj) or ""
    return summary(doc.split("\n\n", 1)[0])


def arg_docs(obj: Any) -> dict[str, str]:
    """``{name: one line}`` from a Google-style ``Args:`` section; ``a, b: text`` gives both names the text."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    if "Args:" not in lines:
        return {}
    entries: list[tuple[str, str]] = []
    for line in lines[lines.index("Args:") + 1:]:
        if line and not line.startswith(" "):
            break
        entry = re.match(r"^ {4}(\*{0,2}\w+(?:, \*{0,2}\w+)*): ?(.*)$", line)
        if entry:
            entries.append((entry.group(1), entry.group(2)))
        elif entries and line.strip():
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
    return {n.strip().lstrip("*"): summary(text) for names, text in entries for n in names.split(",")}


# -- Python signatures -------------------------------------------------------------------------------------------
def _value(value: Any) -> str:
    text = repr(value)
    if re.search(r"0x[0-9a-f]{4,}", text) or " object at " in text:
        raise ValueError(f"a default with no stable text: {text}")
    return text


def signature(fn: Callable[..., Any], name: str, *, skip: int = 0, extra: Iterable[str] = ()) -> str:
    """``name(a, *, b=1, **kw)``: parameters and defaults, no annotations (the tables give types); ``skip``
    leading parameters (``self``); ``extra`` keyword-only ones the callable takes through ``**kwargs``."""
    parts: list[str] = []
    varkw: list[str] = []
    star = False
    for p in list(inspect.signature(fn).parameters.values())[skip:]:
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            varkw.append(f"**{p.name}")
        else:
            parts.append(p.name if p.default is p.empty else f"{p.name}={_value(p.default)}")
    extra = list(extra)
    if extra and not star:
        parts.append("*")
    return f"{name}({', '.join([*parts, *extra, *varkw])})"


def _code(*lines: str) -> list[str]:
    return ["```python", *lines, "```", ""]


def params_table(fn: Callable[..., Any], docs: dict[str, str], *, skip: int = 0,
                 extra: dict[str, str] | None = None) -> list[str]:
    rows = []
    for p in list(inspect.signature(fn).parameters.values())[skip:]:
        if p.kind is p.VAR_POSITIONAL:
            continue
        name = f"**{p.name}" if p.kind is p.VAR_KEYWORD else p.name
        default = "required" if p.default is p.empty and p.kind is not p.VAR_KEYWORD else (
            "" if p.default is p.empty else _value(p.default))
        rows.append((f"`{name}`", f"`{default}`" if default and default != "required" else default,
                     docs.get(p.name, "")))
    rows += [(f"`{n}`", "`None`", text) for n, text in (extra or {}).items()]
    return _table(("argument", "default", "what it does"), rows)


def members_table(cls: type, var: str) -> list[str]:
    """Public methods and properties of ``cls`` defined in roboreel (not torch's), sorted, with ``len(x)``,
    ``x[i]`` and ``iter(x)``; those without a docstring are named after the table."""
    rows, bare = [], []
    spelled = {"__len__": f"len({var})", "__getitem__": f"{var}[i]", "__iter__": f"iter({var})"}
    for name in sorted(set(dir(cls))):
        if name.startswith("_") and name not in spelled:
            continue
        owner = next((c for c in cls.__mro__ if name in vars(c)), None)
        if owner is None or not owner.__module__.startswith("roboreel"):
            continue
        attr = vars(owner)[name]
        if isinstance(attr, property):
            label, doc = f"{var}.{name}", first_doc(attr.fget)
        elif callable(attr):
            label, doc = spelled.get(name) or signature(attr, f"{var}.{name}", skip=1), first_doc(attr)
        else:
            continue
        (rows.append((f"`{label}`", doc)) if doc else bare.append(f"`{label}`"))
    out = _table(("member", "what it does"), rows)
    return out + ([f"Also: {', '.join(bare)}.", ""] if bare else [])


def _type(hint: Any, text: str) -> str:
    """A field's type as written, an alias of a ``Literal`` spelled out (``"error" | "cpu"``)."""
    if typing.get_origin(hint) is typing.Literal:
        return " | ".join(f'"{a}"' for a in typing.get_args(hint))
    return text


def options_section(cls: type, title: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    docs = arg_docs(cls)
    fields = dataclasses.fields(cls)
    sig = f"{title}({', '.join(f'{f.name}={_value(f.default)}' for f in fields)})"
    rows = [(f"`{f.name}`", f"`{_type(hints[f.name], str(f.type))}`", f"`{_value(f.default)}`",
             docs.get(f.name, "")) for f in fields]
    return [f"### `{title}`", "", first_doc(cls) + ".", "", *_code(sig),
            *_table(("field", "type", "default", "what it does"), rows)]


def python_sections() -> list[str]:
    import roboreel
    from roboreel.reader import DatasetMeta, DeviceLoader, MixtureDataset
    from roboreel.reader.mixture import MIXTURE_ONLY, build_mixture

    cd = roboreel.CompiledDataset
    mixture_docs = arg_docs(cd)
    out = ["## Python: `import roboreel`", "",
           *_table(("name", "what it is"), [(f"`roboreel.{n}`", first_doc(getattr(roboreel, n)) if n != "__version__"
                                            else "the installed version, a string") for n in sorted(roboreel.__all__)])]
    out += ["### `roboreel.CompiledDataset`", "", first_doc(cd) + ".", "",
            *_code(signature(cd.__init__, "roboreel.CompiledDataset", skip=1,
                             extra=[f"{n}=None" for n in MIXTURE_ONLY])),
            *params_table(cd.__init__, mixture_docs, skip=1,
                          extra={n: f"a list of paths only: {mixture_docs.get(n, '')}" for n in MIXTURE_ONLY}),
            *members_table(cd, "ds")]
    out += ["`ds.meta` is a `roboreel.reader.DatasetMeta`: " + first_doc(DatasetMeta) + ".", "",
            *members_table(DatasetMeta, "ds.meta")]
    out += options_section(roboreel.StreamOptions, "roboreel.StreamOptions")
    out += options_section(roboreel.DecodeOptions, "roboreel.DecodeOptions")
    own = inspect.signature(roboreel.loader).parameters
    passed_on = [f"{p.name}={_value(p.default)}" for p in inspect.signature(DeviceLoader.__init__).parameters.values()
                 if p.name not in own and p.kind is p.KEYWORD_ONLY]  # loader() passes them on in **dataloader_kwargs
    out += ["### `roboreel.loader`", "", first_doc(roboreel.loader) + ".", "",
            *_code(signature(roboreel.loader, "roboreel.loader", extra=passed_on)),
            *params_table(DeviceLoader.__init__, arg_docs(DeviceLoader), skip=1),
            "It returns a `roboreel.reader.DeviceLoader`: " + first_doc(DeviceLoader) + ".", "",
            *members_table(DeviceLoader, "dl")]
    out += ["### Mixtures: `roboreel.CompiledDataset([a, b, ...])`", "",
            "A list of paths gives a `roboreel.reader.MixtureDataset`: " + first_doc(MixtureDataset) + ". "
            + first_doc(build_mixture) + ".", "",
            *members_table(MixtureDataset, "mix")]
    return out


def integration_sections() -> list[str]:
    import roboreel.integrations.lerobot as lerobot

    rows = []
    for name in sorted(lerobot.__all__):
        obj = getattr(lerobot, name)
        if callable(obj):
            rows.append((f"`{signature(obj, f'roboreel.integrations.lerobot.{name}')}`", first_doc(obj)))
        else:
            rows.append((f"`roboreel.integrations.lerobot.{name}`", f"`{type(obj).__name__}`: {summary(str(obj))}"))
    return ["## `roboreel.integrations.lerobot`", "", first_doc(lerobot) + ".", "",
            *_table(("name", "what it does"), rows)]


# -- command line ------------------------------------------------------------------------------------------------
_DEFAULT_PHRASE = re.compile(r"\s*\(default:?\s+([^()]*?)\)|[;,]\s*default:?\s+([^;()]*?)(?=\))")


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def option_row(action: argparse.Action) -> tuple[str, str, str]:
    """(spelling, default, one line) of an argparse option or positional."""
    from roboreel.cli._help import says_default

    help_text = re.sub(r",?\s*%\(default\)s here", "", action.help or "")  # this machine's value
    metavar = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else None)
    takes_value = action.nargs != 0
    spelling = " / ".join(action.option_strings) or (metavar or action.dest)
    if action.option_strings and takes_value:
        spelling += f" {metavar or action.dest.upper()}"
    phrase = _DEFAULT_PHRASE.search(help_text)
    if action.required:
        default = "required"
    elif isinstance(action, argparse._VersionAction):
        default = ""
    elif isinstance(action, argparse.BooleanOptionalAction):
        default = "on" if action.default else "off"
    elif not takes_value:
        default = "on" if action.default is True and isinstance(action, argparse._StoreFalseAction) else "off"
    elif phrase and says_default(action):
        default = re.split(r": |; ", _flat(phrase.group(1) or phrase.group(2)))[0]
    else:
        default = _shown(action.default)
    text = _DEFAULT_PHRASE.sub("", help_text)
    return f"`{spelling}`", default, summary(text % {"default": default, "prog": "roboreel"})


def command_section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    rows = [option_row(a) for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction)]
    out = [f"### `roboreel {name}`", "", summary(parser.description) + ".", ""]
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is not None:
        out += _table(("subcommand", "what it does"),
                      [(f"`roboreel {name} {c.dest}`", summary(c.help)) for c in sub._choices_actions])
    if rows:
        out += _table(("argument", "default", "what it does"), rows)
    return out


def cli_sections() -> list[str]:
    from roboreel.cli import build_parser
    from roboreel.cli.lerobot_train import roboreel_flags

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = ["## Command line: `roboreel`", "", summary(parser.description) + ".", "",
           *_table(("verb", "what it does"), [(f"`roboreel {c.dest}`", summary(c.help))
                                              for c in verbs._choices_actions]),
           *_table(("option", "default", "what it does"), [option_row(a) for a in parser._actions
                                                           if a.option_strings and a.dest != "help"])]
    for name, verb in verbs.choices.items():
        if name == "lerobot-train":
            out += [f"### `roboreel {name}`", "", summary(verb.description) + ".", "",
                    *_table(("roboreel's own flag", "what it does"),
                            [(f"`{flag}`", summary(text)) for flag, text in roboreel_flags()])]
            continue
        out += command_section(name, verb)
        sub = next((a for a in verb._actions if isinstance(a, argparse._SubParsersAction)), None)
        for mode, child in (sub.choices.items() if sub else ()):
            out += command_section(f"{name} {mode}", child)
    return out


def render() -> str:
    """The whole page."""
    lines = [HEADER, *python_sections(), *integration_sections(), *cli_sections()]
    text = "\n".join(lines).rstrip() + "\n"
    for bad in (str(ROOT), str(Path.home())):
        if bad and bad != "/" and bad in text:
            raise ValueError(f"the page would name a path of this machine: {bad}")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write docs/api.md from the code (or --check that it is current).")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/api.md differs from what the code gives")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"docs/api.md is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
