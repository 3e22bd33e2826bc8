#!/usr/bin/env bash
# The LeRobot integration suite (tests/integration): roboreel inside a venv holding the real LeRobot 0.6.1.
#
#   bash .ci/ci_lerobot.sh VENV_DIR        (e.g. .venv-lerobot)
#
# 1. LeRobot into VENV_DIR with ../shared/lerobot/install.sh (idempotent; $LEROBOT_SHARED overrides the folder).
#    Without that folder this fails: the suite needs the Python 3.11 patches kept there, and a CI that cannot run
#    the comparison with LeRobot must not pass as if it had.
# 2. roboreel into it, editable and without dependencies: LeRobot's venv already has torch, torchcodec 0.11,
#    PyAV 15 (roboreel's compile works with it), pyarrow, fsspec, aiohttp, huggingface_hub, tqdm, psutil, OpenCV
#    and Pillow. Only what it lacks is added, pinned against LeRobot's constraints: pytest, pytest-timeout, and
#    diffusers (LeRobot's own pin for its diffusion policy, which the suite builds).
# 3. pytest tests/integration (~3-4 minutes on 2 cores), then the check that the comparison really ran: some
#    tests passed, none failed, nothing skipped (the two-rank lerobot-train launches fail, not skip, when
#    accelerate starts fewer than two ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:?usage: .ci/ci_lerobot.sh VENV_DIR}
SHARED=${LEROBOT_SHARED:-../shared/lerobot}
if [ ! -f "$SHARED/install.sh" ]; then
  echo "ci_lerobot: $SHARED/install.sh not found: the LeRobot comparison suite cannot run" >&2
  exit 1
fi
bash "$SHARED/install.sh" "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --no-deps -e .
"$PIP" install -q -c "$SHARED/constraints.txt" 'pytest>=8' 'pytest-timeout>=2.3' 'pytest-xdist>=3.5' \
  'diffusers>=0.38.0,<0.40.0'

REPORT=$(mktemp -d)
trap 'rm -rf "$REPORT"' EXIT
rc=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -rs -n "${LEROBOT_JOBS:-2}" --dist loadfile --durations=15 \
  --junitxml="$REPORT/lerobot.xml" tests/integration || rc=$?
checked=0
"$VENV/bin/python" .ci/junit_check.py "$REPORT/lerobot.xml" || checked=$?
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$checked"
