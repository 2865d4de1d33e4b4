#!/usr/bin/env bash
# Network-namespace harness: N namespaces on one bridge, each node's access link shaped by tbf
# in both directions. netem is not available on this kernel, so there is no added delay here
# (see README.md). Needs root (or CAP_NET_ADMIN) and iproute2; `check` says why when not.
#
#   netns.sh check                      exit 0 if namespaces can be made, 77 (+ reason) if not
#   netns.sh up PREFIX N RATE_MBIT      make PREFIX-0..N-1, bridge PREFIX-br; prints node IPs
#   netns.sh ip PREFIX I                the IP of node I
#   netns.sh down PREFIX N              remove them (idempotent)
set -euo pipefail

subnet() {  # a /24 derived from the prefix, so parallel harnesses do not collide
  local h
  h=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo "10.$(( 100 + h % 100 )).$(( (h / 100) % 250 ))"
}

cmd=${1:-}
case "$cmd" in
  check)
    if [[ $(id -u) -ne 0 ]]; then echo "netns harness skipped: needs root (CAP_NET_ADMIN)"; exit 77; fi
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
      echo "netns harness skipped: iproute2 (ip, tc) not installed"; exit 77
    fi
    probe="merprobe$$"
    if ! ip netns add "$probe" 2>/dev/null; then
      echo "netns harness skipped: cannot create network namespaces here"; exit 77
    fi
    ip netns del "$probe"
    exit 0 ;;
  ip)
    echo "$(subnet "$2").$(( $3 + 1 ))" ;;
  up)
    prefix=$2; n=$3; rate=$4
    net=$(subnet "$prefix")
    ip link add "$prefix-br" type bridge
    ip link set "$prefix-br" up
    for ((i = 0; i < n; i++)); do
      ns="$prefix-$i"
      ip netns add "$ns"
      ip link add "$prefix-h$i" type veth peer name eth0 netns "$ns"
      ip link set "$prefix-h$i" master "$prefix-br" up
      ip -n "$ns" addr add "$net.$(( i + 1 ))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      # Upload (node -> bridge) and download (bridge -> node), each at the access rate.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${rate}mbit" burst 128kb latency 400ms
      tc qdisc add dev "$prefix-h$i" root tbf rate "${rate}mbit" burst 128kb latency 400ms
      echo "$ns $net.$(( i + 1 ))"
    done ;;
  down)
    prefix=$2; n=$3
    for ((i = 0; i < n; i++)); do
      ip netns del "$prefix-$i" 2>/dev/null || true
      ip link del "$prefix-h$i" 2>/dev/null || true
    done
    ip link del "$prefix-br" 2>/dev/null || true ;;
  *)
    sed -n '2,10p' "$0"; exit 2 ;;
esac
