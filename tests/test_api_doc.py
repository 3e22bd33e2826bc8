"""docs/api.md is what scripts/gen_api_doc.py makes of the code now, so the reference a user reads cannot drift
from the code: a change to a public signature, option, docstring or CLI help fails here until the page is
regenerated."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_doc", ROOT / "scripts" / "gen_api_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_api_doc", module)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def test_api_doc_is_current():
    assert GEN.main(["--check"]) == 0, (
        "docs/api.md is stale (a public signature, option, docstring or CLI help changed): regenerate it with "
        f"`{GEN.COMMAND}` and commit the result")


def test_check_mode_names_a_stale_page_in_one_line(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n")
    monkeypatch.setattr(GEN, "OUT", stale)
    assert GEN.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and GEN.COMMAND in err, err
    assert stale.read_text() == "# API reference\n"  # --check writes nothing


def test_the_page_does_not_depend_on_the_machine(monkeypatch):
    """The cores this process may use (compile's --workers default) and the terminal width change nothing."""
    first = GEN.render()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(7)))
    monkeypatch.setenv("COLUMNS", "53")
    assert GEN.render() == first
    assert "0x" not in first and str(ROOT) not in first
