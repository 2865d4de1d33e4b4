#!/usr/bin/env bash
# The convergence study: model `small` (sequence length 128 for CPU time), equal total tokens
# (4 x 200 x 4 x 128 = 409,600), validation loss of the (outer) parameters every 50 inner steps.
#   (1) one worker, 4x the batch (16), 200 steps      -- what data-parallel training would do
#   (2) DiLoCo, 4 nodes, batch 4 each, H = 50, 4 outer steps, fp32 ring
#   (3) the same with the int8 (PRIME) codec
#   (4) int8 under churn: node 2 fails after outer step 1, a joiner takes its shard after step 2
# usage: results/convergence/run.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=$(cd "$(dirname "$0")" && pwd)
M="$BUILD/bin/meridian"
export OMP_NUM_THREADS=1
common=(--model small --seq-len 128 --lr 1e-3 --warmup 50 --seed 0 --val-sequences 32
        --cache "$BUILD/trainer_cache")
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
log "1: single worker, batch 16"
"$M" train "${common[@]}" --batch 16 --steps 200 --eval-every 50 --csv "$OUT/1_single_batch16.csv"
log "2: DiLoCo fp32"
"$M" train-diloco "${common[@]}" --batch 4 --nodes 4 --inner-steps 50 --outer-steps 4 \
  --codec fp32 --csv "$OUT/2_diloco_fp32.csv" --events "$OUT/2_diloco_fp32.events.jsonl"
log "3: DiLoCo int8"
"$M" train-diloco "${common[@]}" --batch 4 --nodes 4 --inner-steps 50 --outer-steps 4 \
  --codec int8 --csv "$OUT/3_diloco_int8.csv" --events "$OUT/3_diloco_int8.events.jsonl"
log "4: DiLoCo int8 under churn"
"$M" train-diloco "${common[@]}" --batch 4 --nodes 4 --inner-steps 50 --outer-steps 4 \
  --codec int8 --fail 2@1 --join 2 --csv "$OUT/4_diloco_int8_churn.csv" \
  --events "$OUT/4_diloco_int8_churn.events.jsonl"
log "done"
