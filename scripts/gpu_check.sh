#!/usr/bin/env bash
# roboreel's one-command check of a GPU node (docs/gpu.md, "The node check").
#
#   scripts/gpu_check.sh --prepare DIR [--aloha PATH] [--no-wheels] [--small]
#       here: the wheels the GPU machine lacks and compiled test data into DIR (git-ignored, < 64 MiB)
#   scripts/gpu_check.sh [--data DIR] [--budget S] [--parts a,b]
#       there: install DIR/wheels into /tmp, point torchcodec at PyAV's FFmpeg, run every part;
#       results in $OUT/gpu_check.json (merged as measured), output in $OUT/gpu_check.log
#   scripts/gpu_check.sh --cpu-only [--data DIR]
#       here: every part that needs no GPU, quickly, with the current interpreter's packages
#
# PYTHON picks the interpreter (default python3); OUT the results folder (default ./gpu_check_out).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ "${1:-}" == "--prepare" ]]; then
  shift
  exec "$PY" scripts/gpu_check/prepare.py "$@"
fi
DIR=.gpu_check CPU_ONLY=0 ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DIR=$2; shift 2 ;;
    --cpu-only) CPU_ONLY=1; ARGS+=(--cpu-only); shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
if [[ $CPU_ONLY == 0 && -d "$DIR/wheels" ]]; then
  SITE=/tmp/gpu_check_site
  echo "== installing $(ls "$DIR"/wheels/*.whl | wc -l) wheels into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$DIR"/wheels/*.whl
  # torchcodec loads FFmpeg by its standard sonames (libavcodec.so.62, ...); PyAV's wheel holds FFmpeg 8.1 under
  # hashed names (libavcodec-<hash>.so.62.x.y) that find each other through their RPATH: link the sonames to them.
  for f in "$SITE"/av.libs/lib{avcodec,avformat,avutil,avdevice,avfilter,swscale,swresample}-*.so.*; do
    b=$(basename "$f"); v=${b#*.so.}; ln -sf "$f" "$SITE/av.libs/${b%%-*}.so.${v%%.*}"
  done
  TORCH_SP=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  NV_LIBS=$(ls -d "$TORCH_SP"/nvidia/*/lib "$TORCH_SP"/nvidia/cu13/lib 2>/dev/null | tr '\n' ':' || true)
  export LD_LIBRARY_PATH="$SITE/av.libs:${NV_LIBS}/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
  export PYTHONPATH="$SITE:$PWD:${PYTHONPATH:-}"
  echo "== driver video libraries"; ldconfig -p | grep -E 'nvcuvid|nvidia-encode' || echo "(ldconfig lists no libnvcuvid)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
else
  export PYTHONPATH="$PWD:${PYTHONPATH:-}"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SVT_LOG=1
exec "$PY" scripts/gpu_check/run.py --data "$DIR/data" --out "$OUT" "${ARGS[@]}"
