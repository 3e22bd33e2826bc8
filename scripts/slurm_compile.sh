#!/usr/bin/env bash
# Compile one LeRobot v3 dataset with a SLURM array: N jobs each compile a deterministic 1/N of the shards
# (`--part K/N`), then one dependent job writes meta/ and roboreel.json (`--finalize`). The last array task to
# finish usually finalizes by itself; the dependent job makes it explicit and reports missing shards if any
# task failed. Rerunning a failed task resumes it (finished shards and clips are kept). Each task encodes its
# shards' (episode, camera) clips on CPUS cores (--workers), so PARTS x CPUS cores work at once; PARTS may exceed
# the shard count (the extra tasks only check the source). Tested on a real single-node SLURM 22.05:
# tests/test_slurm.py (ROBOREEL_SLURM=1 after .ci/ci_slurm.sh).
#
#   SRC=hf://datasets/org/name OUT=/scratch/compiled/name PARTS=64 bash scripts/slurm_compile.sh
#
# OUT must be on a filesystem every node sees. Every task must use the same SRC and compile settings (the
# compile record refuses mixing). Extra compile options go in COMPILE_ARGS, e.g. COMPILE_ARGS="--crf 24 --gop 10".
set -euo pipefail

: "${SRC:?set SRC to the source dataset (path or fsspec URL)}"
: "${OUT:?set OUT to the output directory (shared filesystem)}"
PARTS="${PARTS:-16}"
CPUS="${CPUS:-8}"
ROBOREEL="${ROBOREEL:-roboreel}"
COMPILE_ARGS="${COMPILE_ARGS:-}"

array_job=$(sbatch --parsable \
  --job-name=roboreel-compile \
  --array="0-$((PARTS - 1))" \
  --cpus-per-task="${CPUS}" \
  --mem-per-cpu=2G \
  --time=24:00:00 \
  --output="roboreel-compile-%A_%a.log" \
  --wrap="${ROBOREEL} compile '${SRC}' '${OUT}' --part \${SLURM_ARRAY_TASK_ID}/${PARTS} \
          --workers \${SLURM_CPUS_PER_TASK} --no-progress ${COMPILE_ARGS}")

sbatch --parsable \
  --job-name=roboreel-finalize \
  --dependency="afterok:${array_job}" \
  --cpus-per-task=1 \
  --time=1:00:00 \
  --output="roboreel-finalize-%j.log" \
  --wrap="${ROBOREEL} compile --finalize '${OUT}'"

echo "submitted array job ${array_job} (${PARTS} parts) and its finalize job"
