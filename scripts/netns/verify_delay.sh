#!/usr/bin/env bash
# Checks the delay harness with `meridian netprobe`: for each RTT, N namespaces at RATE Mbit/s;
# node i probes node (i+1) mod N, all at once (a ring's traffic pattern): round trips, then
# BYTES of bulk data. Prints a Markdown table row per (RTT, node) and the forwarder's counters
# (CPU time, lateness). A measurement, not a test (tests/netns/ has the test).
#
#   verify_delay.sh [N=4] [RATE_MBIT=100] [BYTES=50000000] [RTTS_MS="20 50 100"]
#   MERIDIAN=path/to/meridian (default build/bin/meridian)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-4} rate=${2:-100} bytes=${3:-50000000} rtts=${4:-20 50 100}
export MERIDIAN=${MERIDIAN:-$here/../../build/bin/meridian}
"$here/netns.sh" check || exit $?
prefix="mvd$$"
work=$(mktemp -d)
trap '"$here/netns.sh" down "$prefix" "$n"; rm -rf "$work"' EXIT

echo "| RTT configured (ms) | from → to | connect (ms) | RTT min / median / max (ms) | bulk | Mbit/s |"
echo "|---|---|---|---|---|---|"
for rtt in $rtts; do
  "$here/netns.sh" up "$prefix" "$n" "$rate" "$rtt" >/dev/null
  dir=$("$here/netns.sh" dir "$prefix")
  fwd=$(cat "$dir/netdelay.pid")
  for ((i = 0; i < n; i++)); do
    ip netns exec "$prefix-$i" "$MERIDIAN" netprobe serve --bind "$("$here/netns.sh" ip "$prefix" "$i")" \
      --port 0 --port-file "$work/port$i" --connections 2 2>/dev/null &
  done
  for ((i = 0; i < n; i++)); do
    for _ in $(seq 1 200); do [[ -s $work/port$i ]] && break; sleep 0.05; done
  done
  cpu0=$(awk '{ print $14 + $15 }' "/proc/$fwd/stat")
  t0=$(date +%s.%N)
  pids=()
  for ((i = 0; i < n; i++)); do
    j=$(( (i + 1) % n ))
    ip netns exec "$prefix-$i" "$MERIDIAN" netprobe "$("$here/netns.sh" ip "$prefix" "$j"):$(cat "$work/port$j")" \
      --pings 20 --bytes "$bytes" >"$work/out$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  cpu1=$(awk '{ print $14 + $15 }' "/proc/$fwd/stat")
  for ((i = 0; i < n; i++)); do
    awk -v rtt="$rtt" -v i="$i" -v j="$(( (i + 1) % n ))" '{
      for (k = 1; k <= NF; ++k) { split($k, kv, "="); f[kv[1]] = kv[2] }
      printf "| %s | %d → %d | %.1f | %.1f / %.1f / %.1f | %.0f MB in %.2f s | %.1f |\n", rtt, i, j,
        f["connect_ms"], f["rtt_ms_min"], f["rtt_ms_median"], f["rtt_ms_max"], f["bytes"] / 1e6,
        f["seconds"], f["mbit_per_s"] }' "$work/out$i"
  done
  "$here/netns.sh" down "$prefix" "$n"
  ticks=$(getconf CLK_TCK)
  echo "|   | forwarder: $(awk -v a="$cpu0" -v b="$cpu1" -v t="$ticks" -v s="$t0" -v e="$t1" \
    'BEGIN { printf "%.2f s CPU over %.2f s (%.0f %%)", (b - a) / t, e - s, 100 * (b - a) / t / (e - s) }'); \
late mean $(awk '/late_mean_us/ { printf "%.0f", $2 }' "$dir/stats") µs, \
max $(awk '/late_max_us/ { printf "%.0f", $2 }' "$dir/stats") µs; \
$(awk '/frames_in/ { printf "%d frames", $2 }' "$dir/stats"), \
drops $(awk '/dropped|send_errors/ { s += $2 } END { print s }' "$dir/stats") | | | | |"
  rm -f "$work"/port*
done
