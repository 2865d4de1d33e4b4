#!/usr/bin/env bash
# The convergence study of results/convergence/README.md (issue 22): DiLoCo H x N x codec (and
# int8 under churn) against a data-parallel baseline with the same total batch, >= 3 seeds per
# point, the `micro` model on the debian-docs corpus, emulated over the intellect1-usa network;
# then every setting re-timed on intellect1-usa and intellect1-global by timing-only
# simulations. Every run trains 6,000 inner steps per node (30 outer steps at H = 200).
#
#   scripts/studies/convergence/run.sh [BUILD_DIR] [OUT_DIR] [GROUPS]
#
# GROUPS (default "n2 n2-int8"): which blocks of the grid to emulate, in order:
#   n2              N = 2: DP; fp32 at H = 10, 50, 200; int8 and int8 under churn at H = 50
#   n2-int8         N = 2: int8 at H = 10 and 200
#   n2-global-churn N = 2: int8 under churn at H = 50 emulated on intellect1-global's sites
#                   (churn trajectories depend on timing, so they are not re-timed)
#   n2-outer-lr     N = 2: fp32 at H = 10 with outer lr 0.3 and 0.1 (is the H = 10 penalty the
#                   outer optimizer's?); OUTER_LRS (default "0.3 0.1") and OUTER_LR_H (default
#                   10) pick other outer lrs and another H
#   n4..., n8...: the same for N = 4 and 8
# Every group runs seeds 0-2. Runs go to OUT_DIR (default runs/convergence; one folder per
# run, kept if already complete, so a second call resumes), JOBS (default 2) at a time under
# `nice -n 10`; the wall time is printed and written to OUT_DIR/wall_time.txt. Then
# scripts/studies/convergence/aggregate.py writes the table, the figures' data and the figures into
# results/convergence/. Scenario files are replaced atomically, so a second invocation on the
# same OUT_DIR may run beside one still going.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-runs/convergence}
GROUPS_=${3:-n2 n2-int8}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
MERIDIAN=$(cd "$BUILD" && pwd)/bin/meridian
STEPS=6000        # inner steps per node in every run
JOBS=${JOBS:-2}
export OMP_NUM_THREADS=1
mkdir -p "$OUT/scenarios"
cd "$ROOT"
start=$(date +%s)

# The corpus (tokenized once into the cache; about a minute).
nice -n 10 "$MERIDIAN" corpus --corpus=debian-docs --vocab=1024 >&2

# Scenario variants of scenarios/convergence-usa.yaml (N = 4 on intellect1-usa): N nodes on a
# network's sites (the lists are scripts/studies/convergence/aggregate.py's, which re-times on them),
# and the DP baseline. Each file is written beside its final name and renamed into place.
S="$OUT/scenarios"
cp scenarios/intellect1-sites.yaml "$S/.sites.tmp" && mv "$S/.sites.tmp" "$S/intellect1-sites.yaml"
nodes_for() {  # N [NETWORK] -> the nodes list lines
  python3 scripts/studies/convergence/aggregate.py nodes "${2:-usa}" "$1"
}
variant() {  # NAME N NETWORK [dp|churn] -> $S/NAME.yaml (and $S/NAME.csv for churn)
  local name=$1 n=$2 net=$3 kind=${4:-} tmp="$S/.$1.tmp"
  awk -v nodes="$(nodes_for "$n" "$net")" '
    /^  nodes:/ {print; print nodes; skip=1; next}
    skip && /^    - / {next}
    {skip=0; print}' scenarios/convergence-usa.yaml > "$tmp"
  if [[ $kind == dp ]]; then
    # One worker with the N nodes' total batch; outer lr 1 without momentum makes the outer
    # step the identity (theta <- theta - (theta - theta_H)): plain large-batch AdamW.
    sed -i -e "s/^  batch: 4\$/  batch: $((4 * dp_n))/" -e 's/^  outer_lr: 0.7$/  outer_lr: 1.0/' \
      -e 's/^  outer_momentum: 0.9$/  outer_momentum: 0.0/' "$tmp"
  elif [[ $kind == churn ]]; then
    # The last host slot crashes at inner step 2,000 and its host rejoins at 3,000 (a new node
    # that recovers the state live from a survivor).
    local last host
    last=$(nodes_for "$n" "$net" | tail -1 | sed -E 's/.*site: ([a-z-]+), *count: ([0-9]+).*/\1-\2/')
    host=${last%-*}-$(( ${last##*-} - 1 ))
    printf 'step,node,event\n2000,%s,fail\n3000,%s,join\n' "$host" "$host" > "$S/.$name.csv.tmp"
    mv "$S/.$name.csv.tmp" "$S/$name.csv"
    printf '\nchurn:\n  trace: %s.csv\n' "$name" >> "$tmp"
  fi
  mv "$tmp" "$S/$name.yaml"
}
for n in 2 4 8; do
  variant "n$n" "$n" usa
  dp_n=$n variant "dp$n" 1 usa dp
  variant "n$n-churn" "$n" usa churn
  variant "n$n-global-churn" "$n" global churn
done

# The runs of a group: "NAME SCENARIO H CODEC SEED [KEY=VALUE...]", seed by seed (a cut-short
# study has every setting at the first seeds). nN: DP, fp32 at H = 50, 10, 200, int8 and int8
# under churn at H = 50; nN-int8: int8 at H = 10 and 200; nN-global-churn: int8 under churn at
# H = 50 on intellect1-global's sites; nN-outer-lr: fp32 at H = OUTER_LR_H (10) and the outer lrs
# OUTER_LRS (0.3 0.1).
points() {
  local group=$1 n h
  n=${group#n}; n=${n%%-*}
  for seed in 0 1 2; do
    case $group in
      n$n-int8)
        echo "n$n-int8-H200-s$seed n$n 200 int8 $seed"
        echo "n$n-int8-H10-s$seed n$n 10 int8 $seed" ;;
      n$n-global-churn)
        echo "n$n-int8churn-H50-global-s$seed n$n-global-churn 50 int8 $seed" ;;
      n$n-outer-lr)
        for lr in ${OUTER_LRS:-0.3 0.1}; do
          h=${OUTER_LR_H:-10}
          echo "n$n-fp32-H$h-olr$lr-s$seed n$n $h fp32 $seed diloco.outer_lr=$lr"
        done ;;
      n$n)
        echo "n$n-fp32-H50-s$seed n$n 50 fp32 $seed"
        echo "n$n-fp32-H10-s$seed n$n 10 fp32 $seed"
        echo "dp$n-s$seed dp$n 200 fp32 $seed"
        echo "n$n-int8-H50-s$seed n$n 50 int8 $seed"
        echo "n$n-int8churn-H50-s$seed n$n-churn 50 int8 $seed"
        echo "n$n-fp32-H200-s$seed n$n 200 fp32 $seed" ;;
      *) echo "convergence/run.sh: unknown group '$group'" >&2; exit 2 ;;
    esac
  done
}
run_point() {  # NAME SCENARIO H CODEC SEED [KEY=VALUE...]: one emulated run into $OUT/NAME
  local name=$1 sc=$2 h=$3 codec=$4 seed=$5
  shift 5
  local dir="$OUT/$name" extra=() kv
  for kv in "$@"; do extra+=(--set "$kv"); done
  if [[ -f $dir/summary.json ]] && grep -q '"complete": true' "$dir/summary.json"; then return; fi
  local t0=$(date +%s)
  nice -n 10 "$MERIDIAN" sim "$S/$sc.yaml" --out "$dir" --set "diloco.H=$h" \
    --set "diloco.codec=$codec" --set "run.seed=$seed" --set "run.outer_steps=$((STEPS / h))" \
    "${extra[@]}" > "$OUT/$name.log" 2>&1 || echo "convergence/run.sh: $name failed (see $OUT/$name.log)" >&2
  echo "$name $(( $(date +%s) - t0 )) s" >&2
}
export -f run_point
export OUT S MERIDIAN STEPS
for g in $GROUPS_; do points "$g" > /dev/null; done  # an unknown group fails before any run
for g in $GROUPS_; do points "$g"; done |
  xargs -P "$JOBS" -L 1 bash -c 'run_point "$@"' _

# Timing-only simulations of every setting on both networks (modelled workers with the micro
# model's shapes and step time): the outer-step period that re-times the emulated trajectories.
python3 scripts/studies/convergence/aggregate.py timing "$MERIDIAN" "$OUT"
end=$(date +%s)
echo "convergence study: $(( end - start )) s wall ($GROUPS_)" | tee "$OUT/wall_time.txt"
python3 scripts/studies/convergence/aggregate.py report "$MERIDIAN" "$OUT" results/convergence 4.3
# The configuration: the scenario variants and churn traces every run used.
rm -rf results/convergence/config && mkdir -p results/convergence/config
cp "$S"/*.yaml "$S"/*.csv results/convergence/config/
printf 'scripts/studies/convergence/run.sh %s %s "%s"\n%s\n' "$BUILD" "$OUT" "$GROUPS_" \
  "$(cat "$OUT/wall_time.txt")" > results/convergence/command
