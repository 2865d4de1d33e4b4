#!/usr/bin/env bash
# Network-namespace harness: N namespaces, each node's access link shaped by tbf in both
# directions, joined by a Linux bridge, or (with RTT_MS) by `meridian netdelay`, a user-space L2
# forwarder that adds the one-way delay (this kernel has no netem; see README.md).
# Needs root (or CAP_NET_ADMIN) and iproute2; `check` says why when not.
#
#   netns.sh check                           exit 0 if namespaces can be made, 77 (+ reason) if not
#   netns.sh up PREFIX N RATE_MBIT [RTT_MS]  make PREFIX-0..N-1; prints "namespace IP" per node
#   netns.sh ip PREFIX I                     the IP of node I
#   netns.sh down PREFIX N                   remove them, stop the forwarder (idempotent)
#   netns.sh hz                              the kernel's timer frequency (tbf bursts follow it)
#
# With RTT_MS the nodes' veths end in namespace PREFIX-sw, where `meridian netdelay` forwards
# between them with RTT_MS/2 one way (any pair), or with the delays of NETDELAY_DELAY (e.g.
# "--access-delay-ms 5,10,20,40" or "--matrix FILE") when set. NETDELAY_DELAY is passed to
# netdelay as its options, so it also carries loss and jitter ("--loss 1e-4 --seed 3",
# "--matrix FILE --jitter-ms 2"); without a delay option in it, RTT_MS/2 is the delay. MERIDIAN=path/to/meridian
# (default: build/bin/meridian of this checkout). It runs SCHED_FIFO unless NETDELAY_REALTIME=0.
# Its log and counters (lateness of releases included): $(netns.sh dir PREFIX).
# NODE_SYSCTL="key=value ..." is applied in every node namespace (e.g. TCP settings; commas in
# a value stand for spaces).
# TBF_BURST is the shaping token bucket's depth (tc units, e.g. 128kb); a link idle for
# depth / rate then lets that many bytes through at once, which a plain rate-limited link (what
# the simulator models) does not. The default is the smallest depth that still reaches the rate:
# rate / HZ (the kernel's timer frequency, read from its config; 100 if unknown), at least 16 kB
# (50 kB for 100 Mbit/s at HZ=250).
# NETNS_OFFLOADS=off turns TSO, GSO and GRO off on both ends of every node's veth (ethtool), so
# that every frame is one MTU-sized packet: netdelay's loss is then per packet, not per 64 kB GSO
# frame of up to 44 TCP segments. Default: off when NETDELAY_DELAY has --loss or --loss-ge, on
# (the kernel's default, fewer frames for netdelay to move) otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

subnet() {  # a /24 derived from the prefix, so parallel harnesses do not collide
  local h
  h=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo "10.$(( 100 + h % 100 )).$(( (h / 100) % 250 ))"
}
state_dir() { echo "${TMPDIR:-/tmp}/meridian-netns-$1"; }

kernel_hz() {  # the kernel's CONFIG_HZ, or 100 (the smallest, so the largest burst) if unknown
  local hz
  hz=$({ grep -h '^CONFIG_HZ=' "/boot/config-$(uname -r)" 2>/dev/null ||
         zcat /proc/config.gz 2>/dev/null | grep '^CONFIG_HZ='; } | head -n 1 | cut -d= -f2 || true)
  [[ $hz =~ ^[0-9]+$ && $hz -gt 0 ]] && echo "$hz" || echo 100
}

default_burst() {  # default_burst RATE_MBIT: bytes tbf needs to reach RATE (rate / HZ, >= 16 kB)
  local bytes=$(( $1 * 125000 / $(kernel_hz) ))
  echo $(( bytes > 16384 ? bytes : 16384 ))
}

shape() {  # shape NS_EXEC_PREFIX... DEV RATE: tbf at RATE Mbit/s on DEV's egress
  local rate=${*: -1} dev=${*: -2:1}
  "${@:1:$#-2}" tc qdisc add dev "$dev" root tbf rate "${rate}mbit" \
    burst "${TBF_BURST:-$(default_burst "$rate")}" latency 400ms
}

offloads() {  # offloads NS_EXEC_PREFIX... DEV: TSO/GSO/GRO off on DEV when NETNS_OFFLOADS=off
  [[ $offloads == off ]] || return 0
  "${@:1:$#-1}" ethtool -K "${*: -1}" tso off gso off gro off
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
  dir)
    state_dir "$2" ;;
  hz)
    kernel_hz ;;
  up)
    prefix=$2; n=$3; rate=$4; rtt=${5:-}
    net=$(subnet "$prefix")
    # shellcheck disable=SC2206  # NETDELAY_DELAY is a list of arguments on purpose
    delay=(${NETDELAY_DELAY:-})
    [[ " ${delay[*]} " =~ \ --(delay-ms|access-delay-ms|matrix)\  ]] ||
      delay=(--delay-ms "$(awk -v r="${rtt:-0}" 'BEGIN { print r / 2 }')" "${delay[@]}")
    offloads=${NETNS_OFFLOADS:-}
    if [[ -z $offloads ]]; then
      offloads=on
      [[ " ${delay[*]} " =~ \ --loss(-ge)?\  ]] && offloads=off
    fi
    if [[ $offloads == off ]] && ! command -v ethtool >/dev/null; then
      echo "netns.sh: NETNS_OFFLOADS=off (or --loss) needs ethtool: apt-get install ethtool" >&2
      exit 2
    fi
    if [[ -z $rtt ]]; then
      ip link add "$prefix-br" type bridge
      ip link set "$prefix-br" up
    else
      meridian=${MERIDIAN:-$here/../../build/bin/meridian}
      [[ -x $meridian ]] || { echo "netns.sh: $meridian is not built (MERIDIAN=...)" >&2; exit 2; }
      ip netns add "$prefix-sw"
      ip -n "$prefix-sw" link set lo up
      # The switch namespace has no addresses: its kernel must not talk on the ports.
      ip netns exec "$prefix-sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1
    fi
    ports=()
    for ((i = 0; i < n; i++)); do
      ns="$prefix-$i" port="$prefix-h$i"
      ip netns add "$ns"
      ip link add "$port" type veth peer name eth0 netns "$ns"
      if [[ -z $rtt ]]; then
        ip link set "$port" master "$prefix-br" up
        on_port=()
      else
        ip link set "$port" netns "$prefix-sw"
        on_port=(ip netns exec "$prefix-sw")
        "${on_port[@]}" ip link set "$port" up
      fi
      ports+=(--port "$port")
      ip -n "$ns" addr add "$net.$(( i + 1 ))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      # NODE_SYSCTL="k=v ...": per-namespace kernel settings (e.g. TCP) for every node; commas
      # in a value stand for spaces (net.ipv4.tcp_rmem=4096,131072,33554432).
      for setting in ${NODE_SYSCTL:-}; do
        ip netns exec "$ns" sysctl -qw "${setting%%=*}=$(tr , ' ' <<<"${setting#*=}")"
      done
      offloads ip netns exec "$ns" eth0
      offloads "${on_port[@]}" "$port"
      # Upload (node -> switch) and download (switch -> node), each at the access rate.
      shape ip netns exec "$ns" eth0 "$rate"
      shape "${on_port[@]}" "$port" "$rate"
      echo "$ns $net.$(( i + 1 ))"
    done
    if [[ -n $rtt ]]; then
      dir=$(state_dir "$prefix")
      mkdir -p "$dir"
      rm -f "$dir/ready"
      rt=--realtime  # SCHED_FIFO: on a loaded machine releases would otherwise be late
      [[ ${NETDELAY_REALTIME:-1} == 0 ]] && rt=""
      ip netns exec "$prefix-sw" "$meridian" netdelay "${ports[@]}" "${delay[@]}" \
        --ready-file "$dir/ready" --stats-file "$dir/stats" $rt >"$dir/netdelay.log" 2>&1 &
      echo $! >"$dir/netdelay.pid"
      for _ in $(seq 1 200); do  # bounded wait for its sockets
        [[ -e $dir/ready ]] && break
        kill -0 "$(cat "$dir/netdelay.pid")" 2>/dev/null || break
        sleep 0.05
      done
      [[ -e $dir/ready ]] || { echo "netns.sh: netdelay did not start:" >&2; cat "$dir/netdelay.log" >&2; exit 1; }
    fi ;;
  down)
    prefix=$2; n=$3
    dir=$(state_dir "$prefix")
    for ((i = 0; i < n; i++)); do  # processes a harness left in its namespaces
      pids=$(ip netns pids "$prefix-$i" 2>/dev/null || true)
      [[ -n $pids ]] && kill $pids 2>/dev/null || true
    done
    if [[ -f $dir/netdelay.pid ]]; then
      pid=$(cat "$dir/netdelay.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      rm -f "$dir/netdelay.pid"
    fi
    for ((i = 0; i < n; i++)); do
      ip netns del "$prefix-$i" 2>/dev/null || true
      ip link del "$prefix-h$i" 2>/dev/null || true
    done
    ip netns del "$prefix-sw" 2>/dev/null || true
    ip link del "$prefix-br" 2>/dev/null || true ;;
  *)
    sed -n '2,15p' "$0"; exit 2 ;;
esac
