#!/usr/bin/env bash
# Validation grid (a) of issue 18: real Linux TCP goodput on the namespace harness. Two
# namespaces, 100 Mbit/s each way (tbf), joined by `meridian netdelay` with RTT/2 one way and
# Bernoulli loss P per packet (offloads off: one frame = one packet, scripts/netns/README.md);
# node 0 sends a message of S bytes to node 1 over K fresh TCP connections (S/K each) with
# congestion control CC (`meridian netprobe --flows K --cc CC`), repeated. Writes measured.csv
# (one row per transfer), setups.csv (the forwarder's counters per RTT x loss) and machine.txt.
# Needs root. About 35 minutes here.
#
#   scripts/studies/fidelity/tcp-grid/run.sh [BUILD_DIR=build]
#   RTTS="10 50 100 250" LOSSES="0 1e-5 1e-4 1e-3" SIZES_MIB="4 64" CCS="cubic reno" FLOWS="1 8"
#   OUT=results/fidelity/tcp-grid (where the files go)
#
# Repetitions: 3 per cell; 2 for 64 MiB at RTT >= 100 ms with loss; none (dropped, > 60 s per
# transfer by the Mathis/CUBIC response functions at this rate) for one flow of 64 MiB at loss
# 1e-3 and RTT >= 50 ms and for one Reno flow of 64 MiB at RTT 250 ms and loss 1e-4. Within an
# RTT x loss setup the forwarder runs on, so repetitions draw different parts of its loss stream.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BUILD=${1:-build}
M=$PWD/$BUILD/bin/meridian
NETNS=scripts/netns/netns.sh
OUT=${OUT:-results/fidelity/tcp-grid}
RATE_MBIT=100
RTTS=${RTTS:-10 50 100 250}
LOSSES=${LOSSES:-0 1e-5 1e-4 1e-3}
SIZES_MIB=${SIZES_MIB:-4 64}
CCS=${CCS:-cubic reno}
FLOWS=${FLOWS:-1 8}
# Fresh connections must not inherit the previous transfer's ssthresh (tcp_metrics).
SYSCTL="net.ipv4.tcp_no_metrics_save=1"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

reps() {  # reps RTT LOSS MIB CC FLOWS: how often the cell runs (0: dropped, see above)
  local rtt=$1 loss=$2 mib=$3 cc=$4 flows=$5
  if [[ $mib -ge 64 && $flows -eq 1 ]]; then
    [[ $loss == 1e-3 && $rtt -ge 50 ]] && { echo 0; return; }
    [[ $loss == 1e-4 && $rtt -ge 250 && $cc == reno ]] && { echo 0; return; }
  fi
  [[ $mib -ge 64 && $rtt -ge 100 && $loss != 0 ]] && { echo 2; return; }
  echo 3
}

"$NETNS" check
mkdir -p "$OUT"
prefix="mgrid$$"
trap '"$NETNS" down "$prefix" 2' EXIT
work=$(mktemp -d)

{
  echo "# $(date -u +%FT%TZ) $0 $BUILD"
  echo "kernel $(uname -r)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) vCPU"
  echo "link ${RATE_MBIT} Mbit/s each way (tbf, netns.sh default burst), offloads off (tso gso gro)"
  echo "node namespace settings (after NODE_SYSCTL=\"$SYSCTL\"):"
  MERIDIAN=$M NODE_SYSCTL=$SYSCTL NETDELAY_DELAY="--loss 0" "$NETNS" up "$prefix" 2 "$RATE_MBIT" 10 >/dev/null
  ip netns exec "$prefix-0" sysctl net.ipv4.tcp_wmem net.ipv4.tcp_rmem net.core.wmem_max \
    net.core.rmem_max net.ipv4.tcp_slow_start_after_idle net.ipv4.tcp_no_metrics_save \
    net.ipv4.tcp_congestion_control net.ipv4.tcp_available_congestion_control net.ipv4.tcp_sack \
    net.ipv4.tcp_timestamps net.ipv4.tcp_ecn | sed 's/^/  /'
  echo "  offloads on eth0: $(ip netns exec "$prefix-0" ethtool -k eth0 |
    grep -E '^(tcp-segmentation|generic-segmentation|generic-receive)-offload' | tr '\n' ' ')"
  "$NETNS" down "$prefix" 2
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/machine.txt"

echo "rtt_ms,loss,bytes,cc,flows,rep,delivered_s,goodput_mbit_per_s,seconds_with_reply,retrans_segs,segs,load1,utc" \
  >"$OUT/measured.csv"
echo "rtt_ms,loss,forwarder_cpu_s,wall_s,frames_in,dropped_loss,dropped_other,gso_frames,late_mean_us,late_max_us,load1_start,load1_end" \
  >"$OUT/setups.csv"
field() { tr ' ' '\n' <"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }
stat() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }

for rtt in $RTTS; do
  for loss in $LOSSES; do
    MERIDIAN=$M NODE_SYSCTL=$SYSCTL NETNS_OFFLOADS=off NETDELAY_DELAY="--loss $loss --seed 1" \
      "$NETNS" up "$prefix" 2 "$RATE_MBIT" "$rtt" >/dev/null
    dir=$("$NETNS" dir "$prefix")
    fwd=$(cat "$dir/netdelay.pid")
    dst=$("$NETNS" ip "$prefix" 1)
    rm -f "$work/port"
    ip netns exec "$prefix-1" "$M" netprobe serve --bind "$dst" --port 0 --port-file "$work/port" \
      2>"$work/serve.log" &
    for _ in $(seq 1 200); do [[ -s $work/port ]] && break; sleep 0.05; done
    cpu0=$(awk '{ print $14 + $15 }' "/proc/$fwd/stat") t0=$(date +%s.%N)
    load0=$(cut -d' ' -f1 /proc/loadavg)
    log "RTT $rtt ms, loss $loss (load $load0)"
    for rep in 1 2 3; do
      for cc in $CCS; do
        for flows in $FLOWS; do
          for mib in $SIZES_MIB; do
            [[ $rep -le $(reps "$rtt" "$loss" "$mib" "$cc" "$flows") ]] || continue
            bytes=$((mib << 20))
            utc=$(date -u +%H:%M:%S)
            if timeout 150 ip netns exec "$prefix-0" "$M" netprobe "$dst:$(cat "$work/port")" \
                --pings 0 --bytes "$bytes" --flows "$flows" --cc "$cc" >"$work/out" 2>"$work/err"; then
              echo "$rtt,$loss,$bytes,$cc,$flows,$rep,$(field delivered_s "$work/out")," \
                "$(field delivered_mbit_per_s "$work/out"),$(field seconds "$work/out")," \
                "$(field retrans_segs "$work/out"),$(field segs "$work/out")," \
                "$(cut -d' ' -f1 /proc/loadavg),$utc" | tr -d ' ' >>"$OUT/measured.csv"
            else
              log "failed: RTT $rtt loss $loss $mib MiB $cc x$flows rep $rep: $(cat "$work/err")"
              echo "$rtt,$loss,$bytes,$cc,$flows,$rep,,,,,,$(cut -d' ' -f1 /proc/loadavg),$utc" \
                >>"$OUT/measured.csv"
            fi
            grep -q "congestion control $cc" "$work/err" ||
              log "warning: netprobe did not report $cc: $(cat "$work/err")"
          done
        done
      done
    done
    cpu1=$(awk '{ print $14 + $15 }' "/proc/$fwd/stat") t1=$(date +%s.%N)
    "$NETNS" down "$prefix" 2
    s=$dir/stats
    echo "$rtt,$loss,$(awk -v a="$cpu0" -v b="$cpu1" -v t="$(getconf CLK_TCK)" \
      'BEGIN { printf "%.2f", (b - a) / t }'),$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
      ",$(stat frames_in "$s"),$(stat dropped_loss "$s")" \
      ",$(( $(stat dropped_no_buffer "$s") + $(stat dropped_truncated "$s") + $(stat send_errors "$s") ))" \
      ",$(stat gso_frames "$s"),$(stat late_mean_us "$s"),$(stat late_max_us "$s"),$load0" \
      ",$(cut -d' ' -f1 /proc/loadavg)" | tr -d ' ' >>"$OUT/setups.csv"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
rm -rf "$work"
log "done: $OUT/measured.csv"
