#!/usr/bin/env bash
# The LeRobot integration suite (tests/integration): roboreel inside a venv holding the real LeRobot 0.6.1.
#
#   bash scripts/ci_lerobot.sh VENV_DIR        (e.g. .venv-lerobot)
#
# 1. LeRobot into VENV_DIR with ../shared/lerobot/install.sh (idempotent; $LEROBOT_SHARED overrides the folder).
#    Without that folder the suite is skipped (exit 0): it needs the Python 3.11 patches kept there.
# 2. roboreel into it, editable and without dependencies: LeRobot's venv already has torch, torchcodec 0.11,
#    PyAV 15 (roboreel's compile works with it), pyarrow, fsspec, aiohttp, huggingface_hub, tqdm, psutil. Only the
#    pure-Python packages it lacks are added, pinned against LeRobot's constraints: roboreel's webdataset and
#    zstandard, pytest, and diffusers (LeRobot's own pin for its diffusion policy, which the suite builds).
# 3. pytest tests/integration (~3-4 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:?usage: scripts/ci_lerobot.sh VENV_DIR}
SHARED=${LEROBOT_SHARED:-../shared/lerobot}
if [ ! -f "$SHARED/install.sh" ]; then
  echo "ci_lerobot: $SHARED/install.sh not found: LeRobot integration suite skipped"
  exit 0
fi
bash "$SHARED/install.sh" "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --no-deps -e .
"$PIP" install -q -c "$SHARED/constraints.txt" 'webdataset>=0.2.100' 'zstandard>=0.22' 'pytest>=8' \
  'diffusers>=0.38.0,<0.40.0'
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/integration
