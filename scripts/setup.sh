#!/usr/bin/env bash
# One-shot set-up for a fresh machine: FFmpeg shared libraries for torchcodec, a .venv with a pinned torch installed
# first by pip (so nothing pulls a CUDA build), then roboreel with its dev extra under constraints.txt.
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
# torch first, pinned, as a CPU build: TORCH_INDEX_URL when set, else the PyTorch CPU wheel index, else pip's
# own configuration (PyPI, where torch for Linux is a CUDA build) for machines that reach only PyPI.
TORCH_PIN=$(grep -E '^torch==' constraints.txt | cut -d= -f3)
torch_ok() { .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_PIN')" \
  2>/dev/null; }
pip_torch() { .venv/bin/pip install -q "$@" -c constraints.txt torch 2>&1 | grep -v 'is ignored' >&2; torch_ok; }
if torch_ok; then
  echo "[setup] torch $TORCH_PIN already installed"
elif [ -n "${TORCH_INDEX_URL:-}" ]; then
  echo "[setup] installing torch $TORCH_PIN from $TORCH_INDEX_URL"
  pip_torch --index-url "$TORCH_INDEX_URL" || { echo "[setup] torch not installed from $TORCH_INDEX_URL" >&2; exit 1; }
else
  CPU_INDEX=https://download.pytorch.org/whl/cpu
  echo "[setup] installing torch $TORCH_PIN (CPU build) from $CPU_INDEX"
  if ! pip_torch --index-url "$CPU_INDEX" --retries 0 --timeout 15; then
    echo "[setup] no torch $TORCH_PIN from $CPU_INDEX: installing it with pip's own index (on PyPI a CUDA build, several GB)"
    pip_torch || { echo "[setup] torch $TORCH_PIN could not be installed" >&2; exit 1; }
  fi
fi
# The rest with uv (itself installed by pip; it reads its own index settings, UV_INDEX_URL, default PyPI): it
# resolves and installs the ~120 packages in ~10 s where pip takes ~45 s. The torch above satisfies the pin, so uv
# keeps it (checked below). Both byte-compile what they install: a process started with PYTHONDONTWRITEBYTECODE
# set would otherwise compile every module it imports, every time. pip does it all when uv cannot.
echo "[setup] installing roboreel[dev]"
pip_q() { .venv/bin/pip install -q "$@" 2>&1 | grep -v 'is ignored' || true; }
[ -x .venv/bin/uv ] || pip_q uv
uv_dev() { .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -c constraints.txt -e '.[dev]'; }
if ! { [ -x .venv/bin/uv ] && uv_dev; }; then
  echo "[setup] uv could not install roboreel[dev]: installing it with pip"
  pip_q -c constraints.txt -e '.[dev]'
fi
torch_ok || { echo "[setup] torch is no longer $TORCH_PIN after installing roboreel[dev]" >&2; exit 1; }
.venv/bin/python -c "import torch, torchcodec, av; from torchcodec.decoders import VideoDecoder; \
print(f'[setup] ok: torch {torch.__version__}, torchcodec {torchcodec.__version__}, av {av.__version__}')"
touch .venv/.installed
