#!/usr/bin/env bash
# The simulator's cost against the node count (issue 23, results/bench/netsim.md): wall seconds
# per simulated outer step and peak memory of `meridian sim scenarios/intellect1-scale.yaml` at N
# nodes on four continents (its proportions per 16 nodes: 3 N. Virginia, 2 N. California,
# 2 Oregon, 3 Ireland, 2 Frankfurt, 1 Tokyo, 1 Seoul, 2 Sydney, rounded; the remainder in
# N. Virginia), engine driver, one outer step, with the local ranks aggregated (diloco.aggregate: true, the default) and
# message level (false: one flow per message and local rank). One process at a time.
# usage: bench/netsim/scale.sh BUILD_DIR MODE N... (MODE: aggregated, message or both)
#   OUTER_STEPS=K (default 1): simulate K outer steps; the per-outer-step columns divide by K
#   SET="k=v ..." : more --set overrides, e.g. SET=diloco.overlap=delayed (a variant needs K >= 2
#   for its overlap to run: the last step's all-reduce has nothing to overlap)
# Prints one Markdown row per run on stdout: N | mode | wall s | CPU s (user + system: less
# sensitive to other processes on a shared machine) | max RSS MiB | messages | simulated
# all-reduce s; and the fitted growth exponent of each mode's wall and CPU time.
set -euo pipefail
build=${1:?usage: scale.sh BUILD_DIR MODE N...}
mode=${2:?usage: scale.sh BUILD_DIR MODE N...}
shift 2
[ $# -gt 0 ] || set -- 14 28 56 112 256
case "$mode" in
  both) modes=(aggregated message) ;;
  aggregated | message) modes=("$mode") ;;
  *) echo "scale.sh: MODE must be aggregated, message or both, got '$mode'" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
meridian=$(cd "$build" && pwd)/bin/meridian
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$root/bench/machine.sh" >&2
echo "| nodes | rings | wall s / outer step | CPU s / outer step | max RSS (MiB) | messages | all-reduce (simulated s) |"
echo "|---|---|---|---|---|---|---|"
steps=${OUTER_STEPS:-1}
extra=()
for kv in ${SET:-}; do extra+=(--set "$kv"); done
fits=()
for m in "${modes[@]}"; do
  agg=$([ "$m" = aggregated ] && echo true || echo false)
  points=()
  for n in "$@"; do
    k16() { echo $(( ($1 * n + 8) / 16 )); }
    two=$(k16 2) three=$(k16 3) one=$(k16 1)
    east=$(( n - 4 * two - three - 2 * one ))
    nodes="[{site: us-east, count: $east}, {site: us-west, count: $two}, {site: us-nw, count: $two},"
    nodes+=" {site: eu-west, count: $three}, {site: eu-cent, count: $two},"
    nodes+=" {site: ap-tokyo, count: $one}, {site: ap-seoul, count: $one},"
    nodes+=" {site: ap-sydney, count: $two}]"
    /usr/bin/time -v -o "$out/time" "$meridian" sim "$root/scenarios/intellect1-scale.yaml" \
      --out "$out/run" --force --set "network.nodes=$nodes" --set run.outer_steps=$steps \
      --set diloco.aggregate=$agg "${extra[@]}" > "$out/stdout" 2> "$out/stderr" \
      || { cat "$out/stderr" >&2; exit 1; }
    wall=$(awk -F': ' -v k="$steps" '/Elapsed \(wall clock\)/ {n = split($2, a, ":"); s = 0;
           for (i = 1; i <= n; i++) s = s * 60 + a[i]; printf "%.2f", s / k}' "$out/time")
    cpu=$(awk -F': ' -v k="$steps" '/User time|System time/ {s += $2} END {printf "%.2f", s / k}' \
          "$out/time")
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$out/time")
    msgs=$(tr '\r' '\n' < "$out/stderr" | grep -o '[0-9]* messages' | tail -1 | cut -d' ' -f1)
    ar=$(python3 -c "import json; print(round(json.load(open('$out/run/summary.json'))['allreduce_s']['p50'], 1))")
    echo "| $n | $m | $wall | $cpu | $rss | $msgs | $ar |"
    points+=("$n $wall $cpu")
  done
  fits+=("$m $(printf '%s\n' "${points[@]}" | python3 -c "
import math, sys
p = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
def fit(col):  # least squares of log(y) on log(N): y ~ N^k
    xs = [math.log(r[0]) for r in p]; ys = [math.log(r[col]) for r in p]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    d = sum((x - mx) ** 2 for x in xs)
    return f'{sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / d:.2f}' if d > 0 else 'n/a'
print(fit(1), fit(2))")")
done
echo
for f in "${fits[@]}"; do
  set -- $f
  echo "Fitted growth per outer step ($1, least squares on log-log): wall N^$2, CPU N^$3."
done
"$root/bench/machine.sh" >&2
