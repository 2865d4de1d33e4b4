#!/usr/bin/env bash
# Issue 32, item 5: close the loop on our own data. A real run on one site calibrates the
# simulator; the simulator then predicts a real run on another layout (three continents), blind;
# that run is made and compared. Ground truth: 4 `meridian train` nodes in shaped namespaces
# (scripts/studies/fidelity/run.sh), each node's access rate varying in time around 100 Mbit/s
# (scripts/netns/vary_rate.py: CV 0.5, correlation time 20 s; another seed on each layout).
# Steps, in this order, in separate commits (the prediction is committed before real3 runs):
#   loop/run.sh BUILD real1       the one-site real run, 60 ms RTT (~11 min here; root)
#   loop/run.sh BUILD calibrate   fit the mean access rate and its variation to it (~5 min)
#   loop/run.sh BUILD predict     the three-continent ensemble with the fitted inputs (~1 min)
#   loop/run.sh BUILD real3       the three-continent real run (~12 min here; root)
#   loop/run.sh BUILD compare     table.md and summary.json: predicted against measured
# Both real runs use CUBIC without the idle restart (NODE_SYSCTL below), the TCP the fidelity
# study validated the simulator against (results/fidelity/README.md, "Three continents"); the
# harness must be allowed CUBIC: sysctl -w net.ipv4.tcp_allowed_congestion_control="reno bbr cubic".
# Bulk (each seed's events) goes to runs/; the calibration's tables and the figures here.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR real1|calibrate|predict|real3|compare}" && pwd)
step=${2:?usage: run.sh BUILD_DIR real1|calibrate|predict|real3|compare}
root=$(cd "$(dirname "$0")/../../../.." && pwd)
here=$root/results/fidelity/loop
cd "$here/../../.."
M="$build/bin/meridian"
F=results/fidelity
real1=$F/real-int8-loop-1site real3=$F/real-int8-loop-3continents
export NODE_SYSCTL='net.ipv4.tcp_congestion_control=cubic net.ipv4.tcp_slow_start_after_idle=0'
export RATE_CV=0.5 RATE_CORR_S=20 SIM_SKIP=1
# The inner-step time the simulations charge: the one-site run's (the prediction may not look
# at the run it predicts).
step_time() { python3 scripts/studies/fidelity/compare.py step-time "$real1"; }
fitted() {  # --set arguments for the fitted values of calibration.json, on N nodes' entries
  python3 - "$here/calibration/calibration.json" "$1" <<'PY'
import json, sys
fit = json.load(open(sys.argv[1]))["best"]["values"]
nodes = int(sys.argv[2])
for key, value in fit.items():
    if key == "network.nodes[0].bandwidth_gbps":
        for k in range(nodes):
            print(f"--set\nnetwork.nodes[{k}].bandwidth_gbps={value!r}")
    else:
        print(f"--set\n{key}={value!r}")
PY
}
case "$step" in
real1)
  RTT_MS=60 TAG=-loop-1site RUN_FILE=loop/run.yaml RATE_SEED=1 scripts/studies/fidelity/run.sh "$build" int8
  ;;
calibrate)
  "$M" calibrate $F/loop/scenario-1site.yaml --observed "$real1" \
    --set "hardware.step_time_s=$(step_time)" \
    --fit 'network.nodes[0].bandwidth_gbps=0.02:0.5:log' \
    --fit network.variation.access_cv=0:1.5 \
    --fit network.variation.access_correlation_s=1:300:log \
    --seeds 1-8 --evaluations 60 --out runs/loop-calibrate --force > /dev/null
  mkdir -p "$here/calibration"
  cp runs/loop-calibrate/{calibration.md,calibration.json,evaluations.jsonl} "$here/calibration/"
  ;;
predict)
  mapfile -t set < <(fitted 4)
  "$M" sim $F/loop/scenario-3continents.yaml --seeds 1-20 --no-plots --out runs/loop-predict \
    --force --set "hardware.step_time_s=$(step_time)" "${set[@]}" > /dev/null
  echo "meridian sim $F/loop/scenario-3continents.yaml --seeds 1-20 --set hardware.step_time_s=$(step_time) ${set[*]}" \
    > "$here/prediction-command.txt"
  python3 scripts/studies/prediction/summarize.py runs/loop-predict > "$here/prediction.json"
  ;;
real3)
  sed 's/^  outer_steps: 40$/  outer_steps: 30/' $F/loop/run.yaml > $F/loop/run-3continents.yaml
  RTT_MS=1 TAG=-loop-3continents RUN_FILE=loop/run-3continents.yaml RATE_SEED=2 \
    SCENARIO=loop/scenario-3continents.yaml NETDELAY_DELAY="--matrix $F/matrix-3continents.txt" \
    scripts/studies/fidelity/run.sh "$build" int8
  ;;
compare)
  python3 scripts/studies/fidelity/loop/compare.py "$here/prediction.json" "$real1" "$real3" "$here"
  ;;
*) echo "run.sh: unknown step '$step'" >&2; exit 2 ;;
esac
