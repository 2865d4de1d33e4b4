#!/usr/bin/env bash
# Checks netdelay's loss is per packet: two namespaces at RATE Mbit/s and RTT_MS, one TCP flow
# of BYTES from node 0 to node 1 with `--loss P`, with the veths' offloads on (GSO frames of up
# to 64 kB cross the forwarder) and off (netns.sh's default under --loss: one frame, one TCP
# segment). Prints a Markdown table: the frames netdelay dropped, the GSO frames it saw, the
# sender's data segments and retransmissions (TCP_INFO) and their ratio against P.
# A measurement, not a test.
#
#   verify_loss.sh [RATE_MBIT=100] [RTT_MS=20] [BYTES=20000000] ["LOSSES=0.01 0.002"] [CC=cubic]
#   MERIDIAN=path/to/meridian (default build/bin/meridian)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rate=${1:-100} rtt=${2:-20} bytes=${3:-20000000} losses=${4:-0.01 0.002} cc=${5:-cubic}
export MERIDIAN=${MERIDIAN:-$here/../../build/bin/meridian}
"$here/netns.sh" check || exit $?
prefix="mvl$$"
work=$(mktemp -d)
trap '"$here/netns.sh" down "$prefix" 2; rm -rf "$work"' EXIT

stat() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
field() { tr ' ' '\n' <"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }

echo "| offloads | loss P | frames lost (both ways) | GSO frames | data segments | retransmitted | retransmitted / segments | Mbit/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for p in $losses; do
  for off in on off; do
    NETNS_OFFLOADS=$off NETDELAY_DELAY="--loss $p --seed 1" \
      NODE_SYSCTL="net.ipv4.tcp_no_metrics_save=1" \
      "$here/netns.sh" up "$prefix" 2 "$rate" "$rtt" >/dev/null
    ip netns exec "$prefix-1" "$MERIDIAN" netprobe serve --bind "$("$here/netns.sh" ip "$prefix" 1)" \
      --port 0 --port-file "$work/port" --connections 1 2>/dev/null &
    for _ in $(seq 1 200); do [[ -s $work/port ]] && break; sleep 0.05; done
    ip netns exec "$prefix-0" "$MERIDIAN" netprobe \
      "$("$here/netns.sh" ip "$prefix" 1):$(cat "$work/port")" --pings 0 --bytes "$bytes" --cc "$cc" \
      >"$work/out" 2>/dev/null
    wait
    "$here/netns.sh" down "$prefix" 2
    stats="$("$here/netns.sh" dir "$prefix")/stats"
    segs=$(field segs "$work/out") re=$(field retrans_segs "$work/out")
    echo "| $off | $p | $(stat dropped_loss "$stats") | $(stat gso_frames "$stats") | $segs | $re |" \
      "$(awk -v r="$re" -v s="$segs" -v p="$p" 'BEGIN { printf "%.4f (%.1f P)", r / s, r / s / p }') |" \
      "$(field mbit_per_s "$work/out") |"
    rm -f "$work/port"
  done
done
