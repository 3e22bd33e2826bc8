"""The package's shape holds: reader/'s and compile/'s rooms import one way, no module imports itself back (not
even for types), and ``roboreel --help`` speaks to users. Read from the source with ``ast``, so a new import that
breaks the layout fails here, not in review."""

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
    return parts[2] if len(parts) > 2 and parts[1] == "reader" and parts[2] in ("plan", "fetch", "decode") else "face"


def test_reader_rooms_import_one_way():
    wrong = [(m, i) for m, deps in _graph().items() if m.startswith("roboreel.reader.")
             for i in deps if i.startswith("roboreel.reader.") and _room(i) not in READER_ALLOWED[_room(m)]]
    assert wrong == []


def test_reader_rooms_are_reached_through_their_faces():
    """Outside its own room, plan/, fetch/ and decode/ are reached only through their faces (their ``__init__``);
    their modules are private (``_name.py``)."""
    wrong = [(m, i) for m, deps in _graph().items() for i in deps
             if _room(i) != "face" and len(i.split(".")) > 3 and _room(i) != _room(m)]
    assert wrong == []
    public = sorted(_module(p) for room in ("plan", "fetch", "decode") for p in (PKG / "reader" / room).glob("*.py")
                    if not p.name.startswith("_"))
    assert public == []


def test_plan_imports_no_decode():
    """plan/ decides which sample comes next and what it needs; it hands decode its requests (plan/_requests.py)
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


# compile/'s rooms, each importing only the rooms before it (docs/architecture.md); the top-level modules (the
# phases: plan, pipeline, finalize, report) may import any room, a room only settings of them
COMPILE_ROOMS = ("source", "out", "tables", "video", "jobs")


def _compile_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in COMPILE_ROOMS else "top"


def test_compile_rooms_import_one_way_through_their_faces():
    """A room reaches another only through its face (its ``__init__`` or a public module such as out/paths.py),
    and only a room before it; a room's own modules are private (``_name.py``) unless they are part of its face."""
    wrong = []
    for m, deps in _graph().items():
        if not m.startswith("roboreel.compile."):
            continue
        mine = _compile_room(m)
        for i in deps:
            theirs = _compile_room(i)
            if not i.startswith("roboreel.compile.") or theirs == mine:
                continue
            if theirs == "top":
                ok = mine == "top" or i == "roboreel.compile.settings"
            else:
                ok = (mine == "top" or COMPILE_ROOMS.index(theirs) < COMPILE_ROOMS.index(mine)) and not any(
                    p.startswith("_") for p in i.split(".")[3:])
            if not ok:
                wrong.append((m, i))
    assert wrong == []
    public = sorted(_module(p) for room in COMPILE_ROOMS for p in (PKG / "compile" / room).glob("*.py")
                    if not p.name.startswith("_"))
    assert public == ["roboreel.compile.out.paths"]


def test_faces_list_their_names_sorted():
    for room in ("compile", *(f"compile/{r}" for r in COMPILE_ROOMS), "reader/plan", "reader/fetch", "reader/decode"):
        tree = ast.parse((PKG / room / "__init__.py").read_text())
        names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and any(getattr(t, "id", None) == "__all__" for t in n.targets))
        assert names == sorted(names), room


# option objects: one value however many knobs they hold (a keyword dict of fsspec options counts as one too)
OPTION_TYPES = {"CompileSettings", "Retry", "EncodeTarget", "StreamOptions", "DecodeOptions", "RunConfig",
                "SuiteOptions"}
MAX_PARAMETERS = 8
# (module, function) -> why it takes more: the public constructors take LeRobotDataset's and DataLoader's keywords
# one by one, as their users write them (docs/api.md), and pass them on as option objects inside
LONG_SIGNATURES = {
    ("roboreel.reader.dataset", "__init__"): "CompiledDataset(...): LeRobotDataset's keywords",
    ("roboreel.reader.mixture._dataset", "build_mixture"): "CompiledDataset([a, b], ...): the same keywords",
    ("roboreel.reader.loader._loader", "loader"): "roboreel.loader(...): DataLoader's keywords",
    ("roboreel.reader.loader._loader", "__init__"): "DeviceLoader(...), what roboreel.loader returns",
    ("roboreel.formats.manifest", "__init__"): "Manifest(...): the roboreel.json record, built by keyword field by "
                                               "field as a dataclass is (its fields are the format)",
}


def _counted(args: ast.arguments) -> list[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return [a.arg for i, a in enumerate(every) if not (i == 0 and a.arg in ("self", "cls"))
            and not (a.annotation is not None and OPTION_TYPES & {n.id for n in ast.walk(a.annotation)
                                                                 if isinstance(n, ast.Name)})
            and not a.arg.endswith("_options")]


def _long_signatures(room: str) -> list[tuple[str, str, int]]:
    return [(_module(p), n.name, len(_counted(n.args)))
            for p in (PKG / room).rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and len(_counted(n.args)) > MAX_PARAMETERS]


def test_functions_take_at_most_eight_parameters():
    """Every function, method and ``__init__`` of every room takes at most 8 parameters besides ``self`` and
    option objects: a longer list is a value waiting to be named (as EncodeTarget, SuiteOptions and ClipToCheck
    were); related values travel as one frozen value (ScheduleKey, EpisodeSpec, BatchLayout), option objects as
    themselves. Dataclass fields are not parameters here: a record (CompileSettings, Clip, CompileReport, the jobs)
    is built by keyword, field by field, and is itself the value that keeps other signatures short. Only the
    public constructors in LONG_SIGNATURES take more."""
    long = _long_signatures(".")
    assert [w for w in long if w[:2] not in LONG_SIGNATURES] == []
    assert {w[:2] for w in long} == set(LONG_SIGNATURES)  # no entry outlives its reason


# the names of what only a compile writes inside OUT, and formats/' names for what readers find there (meta/ and
# data/ are LeRobot's layout, a source's as much as OUT's, and the prefix of LeRobot's column names: not checked)
OUT_SPELLINGS = (".roboreel-parts", ".roboreel-compile", "roboreel.json", "update.json", ".lock", "shard-",
                 "shards/", "index/")
OUT_NAMES_IN_FORMATS = {"MANIFEST_NAME", "COMPILE_RECORD_NAME", "SHARD_DIR", "INDEX_DIR", "shard_path",
                        "DEFAULT_DATA_PATH", "DEFAULT_VIDEO_PATH", "EPISODES_PATH"}


def _code_strings(tree: ast.AST) -> list[str]:
    """String constants that are not docstrings (which may describe OUT's layout freely)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_only_out_paths_spells_where_things_go_in_out():
    """OUT's layout is written down once, in compile/out/paths.py: no other compile module spells a path inside
    OUT or imports formats/' names for one (messages name OUT's files through paths.py's names too)."""
    wrong = []
    for p in (PKG / "compile").rglob("*.py"):
        if p == PKG / "compile" / "out" / "paths.py":
            continue
        tree = ast.parse(p.read_text())
        wrong += [(_module(p), s) for s in _code_strings(tree) if any(w in s for w in OUT_SPELLINGS)]
        wrong += [(_module(p), a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and (n.module or "").startswith("roboreel.formats") for a in n.names if a.name in OUT_NAMES_IN_FORMATS]
    assert wrong == []


MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 400
# (module, function) -> why it stays one long function; its docstring says so too (STYLE: no function over ~80
# lines without a reason)
LONG_FUNCTIONS = {
    ("roboreel.compile.jobs._schedule", "run_pool"): "queues, running tasks and the first error are one state",
    ("roboreel.compile.video._transcode", "encode_clip"): "the frame loop, flush and errors share one container",
}


def _long_functions() -> list[tuple[str, str, int]]:
    return [(_module(p), n.name, n.end_lineno - n.lineno + 1)
            for p in PKG.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]


def test_functions_are_at_most_eighty_lines():
    """A longer function is steps waiting to be named. The few that stay long say why in their docstrings
    (LONG_FUNCTIONS); an entry is dropped when its function shrinks."""
    long = _long_functions()
    assert [w for w in long if w[:2] not in LONG_FUNCTIONS] == []
    assert {w[:2] for w in long} == set(LONG_FUNCTIONS)


def test_modules_are_at_most_four_hundred_lines():
    """A module holds one idea: past ~400 lines it holds two (STYLE). The tests' modules too."""
    tests = Path(__file__).parent
    assert [(str(p), n) for p in sorted([*PKG.rglob("*.py"), *tests.rglob("*.py")])
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES] == []


def test_module_names_in_docstrings_and_comments_exist():
    """A comment's "(heap.py)" is how a reader finds the why; after a move or rename it must still lead
    somewhere. Every ``name.py`` the package's text names (other than a path into another project, ``a/b.py``)
    is a file of this repository."""
    import re

    root = PKG.parent
    files = {p.name for d in ("roboreel", "scripts", "benchmarks", "tests", ".ci") for p in (root / d).rglob("*.py")}
    stale = sorted({(_module(p), m) for p in PKG.rglob("*.py")
                    for m in re.findall(r"(?<![\w/.])([a-z_][a-z0-9_]*\.py)\b", p.read_text()) if m not in files})
    assert stale == []
