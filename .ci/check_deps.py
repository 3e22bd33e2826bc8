"""Every required dependency in pyproject.toml earns its place: roboreel imports it, or fsspec loads it as the
backend of a URL scheme roboreel reads (hf://). A dependency nothing imports is a download for every user and a
version constraint for every resolver, so it fails CI here instead of lingering.

    python .ci/check_deps.py        (run from the repository root, in a venv where roboreel[dev] is installed)
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# URL schemes roboreel documents; fsspec imports their backends by name (fsspec.registry.known_implementations)
SCHEMES = ("http", "https", "hf")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(package: Path) -> set[str]:
    """Top-level module names imported anywhere in ``package`` (lazy imports inside functions included)."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def backend_modules() -> set[str]:
    from fsspec.registry import known_implementations

    return {known_implementations[s]["class"].split(".")[0] for s in SCHEMES if s in known_implementations}


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_canon(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]): d for d in project["dependencies"]}
    dists = packages_distributions()  # module -> [distribution, ...] of this environment
    used: dict[str, str] = {}
    for how, modules in (("imported by roboreel", imported_modules(ROOT / "roboreel")),
                         ("an fsspec backend", backend_modules())):
        for module in sorted(modules):
            for dist in dists.get(module, []):
                used.setdefault(_canon(dist), f"{how} as {module}")
    unused = sorted(spec for name, spec in required.items() if name not in used)
    for name, spec in sorted(required.items()):
        print(f"  {spec:32} {used.get(name, 'NOT USED')}")
    if unused:
        print(f"check_deps: required but never imported: {', '.join(unused)} (drop them or make them an extra)")
        return 1
    print(f"check_deps: all {len(required)} required dependencies are used")
    return 0


if __name__ == "__main__":
    sys.exit(main())
