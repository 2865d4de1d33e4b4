#!/usr/bin/env bash
# The simulated side of the grid (README.md): `meridian sim scenario.yaml` per cell (RTT, loss, K)
# at the harness's configured link; the all-reduce time is the last node's end minus the first
# node's start of outer step 1's all-reduce (step 0 runs on fresh connections, as the bench's
# warm-up round does). Writes predicted.csv here (or to $OUT).
#   scripts/studies/bench/connections/predict.sh [BUILD]
# SET: more --set values (space-separated), CSV: the output's name; the fp32 cells of run.sh:
#   SET="diloco.codec=fp32 model.vocab=75088" CSV=predicted-fp32.csv RTTS=250 predict.sh
#   (vocab 75088: 67,109,760 parameters, the bench's 256 MiB of fp32)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
here=$root/results/bench/connections
build=${1:-$root/build}
out=${OUT:-$here}
RTTS=${RTTS:-"50 250"}
LOSSES=${LOSSES:-"0 1e-4"}
KS=${KS:-"1 4 16"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv=$out/${CSV:-predicted.csv}
extra=()
for kv in ${SET:-}; do extra+=(--set "$kv"); done
echo "rtt_ms,loss,connections,time_ms" > "$csv"
for rtt in $RTTS; do
  for loss in $LOSSES; do
    for k in $KS; do
      "$build/bin/meridian" sim "$here/scenario.yaml" --out "$tmp/sim" --force \
        --set network.intra_site_rtt_ms="$rtt" --set "network.paths[0].loss=$loss" \
        --set transport.connections_per_peer="$k" "${extra[@]}" >/dev/null 2>"$tmp/log" ||
        { cat "$tmp/log" >&2; exit 1; }
      ms=$(python3 - "$tmp/sim/events.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ar = [e for e in ev if e.get("type") == "allreduce" and e.get("outer_step") == 1]
print(f"{1000 * (max(e['t'] for e in ar) - min(e['start_s'] for e in ar)):.1f}")
PY
)
      echo "$rtt,$loss,$k,$ms" | tee -a "$csv"
    done
  done
done
