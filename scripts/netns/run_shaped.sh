#!/usr/bin/env bash
# Runs a multi-rank program with one rank per network namespace on tbf-shaped links (see
# netns.sh), then tears the namespaces down. With --rtt-ms the links go through `meridian
# netdelay` (RTT_MS between any two nodes), else through a bridge. Each rank is started as
#   PROGRAM ARGS... --rank I --ranks N --hostname <its IP> --store <rank 0's IP>:29500
# with --serve-store added for rank 0 (ports are per namespace, so 29500 never collides).
#
#   run_shaped.sh [--rtt-ms RTT_MS] N RATE_MBIT PROGRAM [ARGS...]
# Exit: the first non-zero rank status; 77 when namespaces are not permitted (says why).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
rtt=()
if [[ ${1:-} == --rtt-ms ]]; then rtt=("$2"); shift 2; fi
n=$1 rate=$2 program=$3
shift 3
"$here/netns.sh" check || exit $?
prefix="mer$$"
trap '"$here/netns.sh" down "$prefix" "$n"' EXIT
"$here/netns.sh" up "$prefix" "$n" "$rate" "${rtt[@]}" >/dev/null || exit 1
store="$("$here/netns.sh" ip "$prefix" 0):29500"
pids=()
for ((i = 0; i < n; i++)); do
  extra=()
  [[ $i -eq 0 ]] && extra=(--serve-store)
  ip netns exec "$prefix-$i" "$program" "$@" --rank "$i" --ranks "$n" \
    --hostname "$("$here/netns.sh" ip "$prefix" "$i")" --store "$store" "${extra[@]}" &
  pids+=($!)
done
wait_all_pids "${pids[@]}"
