#!/usr/bin/env bash
# The two drivers of `meridian sim` (run.driver: engine, the engine's own DilocoNode per node;
# model, the analytic timeline) on the committed scenarios, one after the other in one session
# (issue 20 wants the model driver gone once the engine driver is fast enough): wall seconds
# (/usr/bin/time) and the results that should agree (all-reduce p50, compute utilization,
# simulated time). Local ranks aggregated, as the scenarios have them.
# usage: bench/netsim/drivers.sh BUILD_DIR [SCENARIO...]   (default: the four intellect1 runs and
# intellect1-scale at 64 nodes). Prints a Markdown table on stdout, the machine line on stderr.
set -euo pipefail
build=${1:?usage: drivers.sh BUILD_DIR [SCENARIO...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
meridian=$(cd "$build" && pwd)/bin/meridian
[ $# -gt 0 ] || set -- intellect1-usa intellect1-useu intellect1-global intellect1-full intellect1-scale
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$root/bench/machine.sh" >&2
echo "| scenario | driver | wall s | all-reduce p50 (s) | compute util. | simulated s | retries |"
echo "|---|---|---|---|---|---|---|"
for s in "$@"; do
  for d in engine model; do
    /usr/bin/time -f '%e' -o "$out/time" "$meridian" sim "$root/scenarios/$s.yaml" \
      --out "$out/run" --force --set run.driver=$d > "$out/stdout" 2> "$out/stderr" \
      || { cat "$out/stderr" >&2; exit 1; }
    python3 - "$s" "$d" "$(cat "$out/time")" "$out/run/summary.json" <<'PY'
import json, sys
s, d, wall, path = sys.argv[1:]
j = json.load(open(path))
print(f"| {s} | {d} | {float(wall):.1f} | {j['allreduce_s']['p50']:.1f} | "
      f"{100 * j['compute_utilization']:.2f} % | {j['simulated_s']:.0f} | {j['retries']} |")
PY
  done
done
"$root/bench/machine.sh" >&2
