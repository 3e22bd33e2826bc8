"""The package's shape holds: reader/'s rooms import one way, no module imports itself back (not even for types),
and ``roboreel --help`` speaks to users. Read from the source with ``ast``, so a new import that breaks the
layout fails here, not in review."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import roboreel

PKG = Path(roboreel.__file__).parent
# room -> the rooms it may import (docs/architecture.md): the face wires fetch, plan and decode; fetch and decode
# read plan's types (slices, requests); plan is pure and imports only itself
READER_ALLOWED = {"face": {"face", "fetch", "plan", "decode"}, "fetch": {"fetch", "plan"},
                  "plan": {"plan"}, "decode": {"decode", "plan"}}


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every roboreel module ``path`` imports, at any depth (function bodies and TYPE_CHECKING blocks too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("roboreel"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("roboreel"))
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in ("plan", "fetch", "decode") else "face"


def test_reader_rooms_import_one_way():
    wrong = [(m, i) for m, deps in _graph().items() if m.startswith("roboreel.reader.")
             for i in deps if i.startswith("roboreel.reader.") and _room(i) not in READER_ALLOWED[_room(m)]]
    assert wrong == []


def test_plan_imports_no_decode():
    """plan/ decides which sample comes next and what it needs; it hands decode its requests (plan/requests.py)
    and never imports decode/ (nor fetch/, nor the face): a sample crosses from plan to decode one way."""
    wrong = [(m, i) for m, deps in _graph().items() if m.startswith("roboreel.reader.plan")
             for i in deps if i.startswith("roboreel.reader.") and not i.startswith("roboreel.reader.plan")]
    assert wrong == []


def test_compile_and_reader_never_import_each_other():
    g = _graph()
    wrong = [(m, i) for m, deps in g.items() for i in deps
             if (m.startswith("roboreel.compile") and i.startswith("roboreel.reader"))
             or (m.startswith("roboreel.reader") and i.startswith("roboreel.compile"))]
    assert wrong == []


def test_no_module_cycles_within_a_room():
    """No two modules of one subpackage import each other, directly or around a loop (type-only imports count:
    a cycle hidden under TYPE_CHECKING still ties two files together). Package faces (``__init__``) excluded:
    they re-export their own room by design."""
    g = {m: {i for i in deps if not _is_package(i)} for m, deps in _graph().items() if not _is_package(m)}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def _is_package(module: str) -> bool:
    return (PKG.parent / module.replace(".", "/") / "__init__.py").exists()


def test_help_tells_a_user_what_the_tool_does_and_the_usual_order():
    out = subprocess.run([sys.executable, "-m", "roboreel.cli", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "one module per verb" not in out  # the developers' docstring stays in the source
    assert "LeRobot v3" in out
    usual = out[out.index("usual order"):]
    order = [usual.index(v) for v in ("roboreel compile SRC OUT", "roboreel validate OUT", "roboreel lerobot-train")]
    assert order == sorted(order)
