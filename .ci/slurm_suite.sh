#!/usr/bin/env bash
# The SLURM test (tests/test_slurm.py) on a real single-node SLURM that .ci/ci_slurm.sh starts here; when it cannot
# be started (no root, no apt, daemons that do not come up) the test is not run and this says why (exit 0):
# whether SLURM runs depends on the machine, not on roboreel.
set -uo pipefail
cd "$(dirname "$0")/.."
if bash .ci/ci_slurm.sh; then
  ROBOREEL_SLURM=1 .venv/bin/python -m pytest -q -p no:cacheprovider -m slurm tests/test_slurm.py
else
  echo "SLURM could not be started on this machine: tests/test_slurm.py not run"
fi
