#!/usr/bin/env bash
# What a user installs is what CI tested: build roboreel's wheel from this checkout, install it into a fresh venv
# (torch first, pinned by constraints.txt as scripts/setup.sh does, so nothing pulls a CUDA build; pip finds the
# same torch wheel it used for .venv) and run `roboreel demo` from it, outside the source tree.
#
#   bash .ci/wheel_check.sh          (PYTHON=python3.x picks the interpreter; TORCH_INDEX_URL as for setup.sh)
#
# Catches what the editable install of `make test` hides: a subpackage or data file missing from the wheel, a
# dependency imported but not declared, an entry point that does not start.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
quiet() { "$@" 2>&1 | { grep -v "is ignored" || true; }; }  # pipefail: the command's status

echo "[wheel] building"
quiet "$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$REPO"
WHEEL=$(ls "$WORK"/dist/roboreel-*.whl)
echo "[wheel] $(basename "$WHEEL")"

# every module of the source tree is in the wheel (setuptools' find skips a folder without __init__.py)
"$PY" - "$WHEEL" <<'EOF'
import pathlib, sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
source = {p.as_posix() for p in pathlib.Path("roboreel").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
missing = sorted(source - names)
if missing:
    sys.exit(f"[wheel] missing from the wheel: {missing}")
stray = sorted(n for n in names if not n.startswith(("roboreel/", "roboreel-")))
if stray:
    sys.exit(f"[wheel] files outside the package: {stray}")
print(f"[wheel] {len(source)} package files, all present")
EOF

"$PY" -m venv "$WORK/venv"
PIP="$WORK/venv/bin/pip"
TORCH_ARGS=()
[ -n "${TORCH_INDEX_URL:-}" ] && TORCH_ARGS=(--index-url "$TORCH_INDEX_URL")
echo "[wheel] installing torch (pinned) and the wheel into a fresh venv"
quiet "$PIP" install -q "${TORCH_ARGS[@]}" -c constraints.txt torch
quiet "$PIP" install -q -c constraints.txt "$WHEEL"

cd "$WORK"  # away from the checkout: roboreel must come from the venv
"$WORK/venv/bin/python" - <<EOF
import roboreel
assert roboreel.__file__.startswith("$WORK/venv/"), f"roboreel imported from {roboreel.__file__}"
print(f"[wheel] roboreel {roboreel.__version__} from {roboreel.__file__}")
EOF
"$WORK/venv/bin/roboreel" demo "$WORK/demo"
echo "[wheel] ok: roboreel demo ran from the installed wheel"
