#!/usr/bin/env bash
# One-shot set-up for a fresh machine: FFmpeg shared libraries for torchcodec, a .venv with a pinned torch
# installed first (so nothing pulls a CUDA build), then roboreel with its dev extra under constraints.txt.
# Idempotent: make calls it only when pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! ldconfig -p 2>/dev/null | grep -q 'libavcodec\.so\.'; then
  echo "[setup] FFmpeg shared libraries not found: installing Debian's ffmpeg (torchcodec loads them)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ffmpeg >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
# TORCH_INDEX_URL lets a machine without a local CPU wheel name a CPU index; by default pip's own config is used.
TORCH_ARGS=()
[ -n "${TORCH_INDEX_URL:-}" ] && TORCH_ARGS=(--index-url "$TORCH_INDEX_URL")
echo "[setup] installing torch (pinned, CPU)"
.venv/bin/pip install -q "${TORCH_ARGS[@]}" -c constraints.txt torch 2>&1 | grep -v 'is ignored' || true
echo "[setup] installing roboreel[dev]"
.venv/bin/pip install -q -c constraints.txt -e '.[dev]' 2>&1 | grep -v 'is ignored' || true
.venv/bin/python -c "import torch, torchcodec, av; from torchcodec.decoders import VideoDecoder; \
print(f'[setup] ok: torch {torch.__version__}, torchcodec {torchcodec.__version__}, av {av.__version__}')"
touch .venv/.installed
