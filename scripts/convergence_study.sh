#!/usr/bin/env bash
# The convergence study of results/convergence/README.md (issue 22): DiLoCo H x N x codec (and
# int8 under churn) against a data-parallel baseline with the same total batch, >= 3 seeds per
# point, the `micro` model on the debian-docs corpus, emulated over the intellect1-usa network;
# then every setting re-timed on intellect1-usa and intellect1-global by timing-only
# simulations. Every run trains 6,000 inner steps per node (30 outer steps at H = 200).
#
#   scripts/convergence_study.sh [BUILD_DIR] [OUT_DIR] [GROUPS]
#
# GROUPS (default "n2 n2-int8"): which blocks of the grid to emulate, in order:
#   n2       N = 2: DP; fp32 at H = 10, 50, 200; int8 and int8 under churn at H = 50 (seeds 0-2)
#   n2-int8  N = 2: int8 at H = 10 and 200 (seeds 0-2)
#   n4, n4-int8, n8, n8-int8: the same for N = 4 and 8
# Runs go to OUT_DIR (default runs/convergence; one folder per run, kept if already complete,
# so a second call resumes), two at a time under `nice -n 10`; the wall time is printed and
# written to OUT_DIR/wall_time.txt. Then scripts/convergence_aggregate.py writes the table,
# the figures' data and the figures into results/convergence/.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-runs/convergence}
GROUPS_=${3:-n2 n2-int8}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MERIDIAN=$(cd "$BUILD" && pwd)/bin/meridian
STEPS=6000        # inner steps per node in every run
JOBS=${JOBS:-2}
export OMP_NUM_THREADS=1
mkdir -p "$OUT/scenarios"
cd "$ROOT"
start=$(date +%s)

# The corpus (tokenized once into the cache; about a minute).
nice -n 10 "$MERIDIAN" corpus --corpus=debian-docs --vocab=1024 >&2

# Scenario variants of scenarios/convergence-usa.yaml (N = 4): N nodes, and the DP baseline.
S="$OUT/scenarios"
cp scenarios/intellect1-sites.yaml "$S/"
nodes_for() {  # N -> the nodes list lines (intellect1-usa's sites)
  case $1 in
    1) printf '    - {site: us-east, count: 1}\n' ;;
    2) printf '    - {site: us-east, count: 1}\n    - {site: us-west, count: 1}\n' ;;
    4) printf '    - {site: us-east, count: 2}\n    - {site: us-west, count: 1}\n    - {site: us-nw,   count: 1}\n' ;;
    8) printf '    - {site: us-east, count: 3}\n    - {site: us-west, count: 3}\n    - {site: us-nw,   count: 2}\n' ;;
  esac
}
variant() {  # NAME NODES [dp] -> $S/NAME.yaml
  local name=$1 n=$2 dp=${3:-}
  awk -v nodes="$(nodes_for "$n")" '
    /^  nodes:/ {print; print nodes; skip=1; next}
    skip && /^    - / {next}
    {skip=0; print}' scenarios/convergence-usa.yaml > "$S/$name.yaml"
  if [[ $dp == dp ]]; then
    # One worker with the N nodes' total batch; outer lr 1 without momentum makes the outer
    # step the identity (theta <- theta - (theta - theta_H)): plain large-batch AdamW.
    local batch=$((4 * dp_n))
    sed -i -e "s/^  batch: 4\$/  batch: $batch/" -e 's/^  outer_lr: 0.7$/  outer_lr: 1.0/' \
      -e 's/^  outer_momentum: 0.9$/  outer_momentum: 0.0/' "$S/$name.yaml"
  fi
}
for n in 2 4 8; do
  variant "n$n" "$n"
  dp_n=$n variant "dp$n" 1 dp
  # Churn: the last host slot crashes at inner step 2,000 and its host rejoins at 3,000 (a new
  # node that recovers the state live from a survivor).
  variant "n$n-churn" "$n"
  last=$(nodes_for "$n" | tail -1 | sed -E 's/.*site: ([a-z-]+), *count: ([0-9]+).*/\1-\2/')
  host=${last%-*}-$(( ${last##*-} - 1 ))
  printf 'step,node,event\n2000,%s,fail\n3000,%s,join\n' "$host" "$host" > "$S/n$n-churn.csv"
  printf '\nchurn:\n  trace: n%s-churn.csv\n' "$n" >> "$S/n$n-churn.yaml"
done

# The runs of a group: "NAME SCENARIO H CODEC SEED", seed by seed (a cut-short study has every
# setting at the first seeds). nN: DP, fp32 at H = 50, 10, 200, int8 and int8 under churn at
# H = 50; nN-int8: int8 at H = 10 and 200.
points() {
  local n=${1#n} group=$1
  for seed in 0 1 2; do
    if [[ $group == *-int8 ]]; then
      n=${n%-int8}
      echo "n$n-int8-H200-s$seed n$n 200 int8 $seed"
      echo "n$n-int8-H10-s$seed n$n 10 int8 $seed"
      continue
    fi
    echo "n$n-fp32-H50-s$seed n$n 50 fp32 $seed"
    echo "n$n-fp32-H10-s$seed n$n 10 fp32 $seed"
    echo "dp$n-s$seed dp$n 200 fp32 $seed"
    echo "n$n-int8-H50-s$seed n$n 50 int8 $seed"
    echo "n$n-int8churn-H50-s$seed n$n-churn 50 int8 $seed"
    echo "n$n-fp32-H200-s$seed n$n 200 fp32 $seed"
  done
}
run_point() {  # NAME SCENARIO H CODEC SEED
  local name=$1 sc=$2 h=$3 codec=$4 seed=$5
  local dir="$OUT/$name"
  if [[ -f $dir/summary.json ]] && grep -q '"complete": true' "$dir/summary.json"; then return; fi
  local t0=$(date +%s)
  nice -n 10 "$MERIDIAN" sim "$S/$sc.yaml" --out "$dir" --set "diloco.H=$h" \
    --set "diloco.codec=$codec" --set "run.seed=$seed" --set "run.outer_steps=$((STEPS / h))" \
    > "$OUT/$name.log" 2>&1 || echo "convergence_study: $name failed (see $OUT/$name.log)" >&2
  echo "$name $(( $(date +%s) - t0 )) s" >&2
}
export -f run_point
export OUT S MERIDIAN STEPS
for g in $GROUPS_; do points "$g"; done |
  xargs -P "$JOBS" -L 1 bash -c 'run_point "$@"' _

# Timing-only simulations of every setting on both networks (modelled workers with the micro
# model's shapes and step time): the outer-step period that re-times the emulated trajectories.
python3 scripts/convergence_aggregate.py timing "$MERIDIAN" "$OUT"
end=$(date +%s)
echo "convergence study: $(( end - start )) s wall ($GROUPS_)" | tee "$OUT/wall_time.txt"
python3 scripts/convergence_aggregate.py report "$MERIDIAN" "$OUT" results/convergence 4.3
# The configuration: the scenario variants and churn traces every run used.
rm -rf results/convergence/config && mkdir -p results/convergence/config
cp "$S"/*.yaml "$S"/*.csv results/convergence/config/
printf 'scripts/convergence_study.sh %s %s "%s"\n%s\n' "$BUILD" "$OUT" "$GROUPS_" \
  "$(cat "$OUT/wall_time.txt")" > results/convergence/command
