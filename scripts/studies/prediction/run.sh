#!/usr/bin/env bash
# Issue 32: calibrate intellect1-usa on INTELLECT-1's USA figures, then predict its USA+EU and
# global phases blind. Two steps, run in two commits: the calibration (whose fitted values the
# shipped intellect1-* scenarios then carry: the freezing commit), then the predictions.
#   scripts/studies/prediction/run.sh BUILD_DIR calibrate   (about 8 minutes here)
#   scripts/studies/prediction/run.sh BUILD_DIR predict     (about 1 minute here)
# Bulk (each seed's events) goes to runs/ (git ignores it); the tables and summary.json here.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR calibrate|predict}" && pwd)
step=${2:?usage: run.sh BUILD_DIR calibrate|predict}
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/prediction
cd "$here/../.."
M="$build/bin/meridian"
case "$step" in
calibrate)
  # The inputs a USA run can tell: the nodes' access bandwidths (the range they are drawn from),
  # how they vary in time, and the TCP window of the nodes' connections. The --set lines give
  # them their values from before the calibration (the defaults and INTELLECT-1's published
  # range), so that this reruns the same search on the calibrated scenarios too.
  "$M" calibrate scenarios/intellect1-usa.yaml --observed results/prediction/observed-usa.yaml \
    --set 'network.access_bandwidth_gbps=[0.5,4.0]' --set network.tcp_gamma_bytes=4194304 \
    --set network.variation.access_cv=0 --set network.variation.access_correlation_s=0 \
    --fit 'network.access_bandwidth_gbps[0]=0.25:8' --fit 'network.access_bandwidth_gbps[1]=1:25' \
    --fit network.variation.access_cv=0:1.5 \
    --fit network.variation.access_correlation_s=30:10000:log \
    --fit network.tcp_gamma_bytes=1048576:67108864:log \
    --seeds 1-10 --evaluations 50 --out runs/calibrate-usa --force > /dev/null
  mkdir -p "$here/calibration"
  cp runs/calibrate-usa/{calibration.md,calibration.json,evaluations.jsonl} "$here/calibration/"
  ;;
predict)
  for s in usa useu global; do
    "$M" sim "scenarios/intellect1-$s.yaml" --seeds 1-20 --no-plots --out "runs/predict-$s" \
      --force > /dev/null
  done
  python3 scripts/studies/prediction/summarize.py runs/predict-usa runs/predict-useu runs/predict-global \
    > "$here/summary.json"
  ;;
*) echo "run.sh: unknown step '$step' (calibrate or predict)" >&2; exit 2 ;;
esac
