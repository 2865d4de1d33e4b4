#!/usr/bin/env bash
# Issue 35, item 2: what K TCP connections per peer (transport.connections_per_peer) give a real
# 4-node ring on long, lossy paths. One rank per network namespace (scripts/netns/), access
# links shaped by tbf at RATE Mbit/s, `meridian netdelay` adding RTT/2 each way and Bernoulli
# loss; gloo_allreduce_bench's int8 ring (as DiLoCo runs it) over Meridian's Gloo transport with
# K connections per peer. Needs root (namespaces). Writes measured.csv here (or to $OUT).
#   scripts/studies/bench/connections/run.sh [BUILD]     e.g. build
set -euo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
here=$root/results/bench/connections
build=${1:-$root/build}
bench=$build/bench/gloo_allreduce_bench
out=${OUT:-$here}
RATE=${RATE:-200}
SIZE_MIB=${SIZE_MIB:-64}
ITERS=${ITERS:-3}
RTTS=${RTTS:-"50 250"}
LOSSES=${LOSSES:-"0 1e-4"}
KS=${KS:-"1 4 16"}
METHOD=${METHOD:-int8-norestore}
# TSO/GSO/GRO off in every cell, loss 0 too (as results/fidelity/tcp-grid): one frame is one
# segment through tbf and the forwarder, whatever the loss.
export NETNS_OFFLOADS=${NETNS_OFFLOADS:-off}
export MERIDIAN=${MERIDIAN:-$build/bin/meridian}
csv=$out/${CSV:-measured.csv}
echo "rtt_ms,loss,connections,size_mib,method,time_ms,algbw_gbps,load1" > "$csv"
for rtt in $RTTS; do
  for loss in $LOSSES; do
    for k in $KS; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      line=$(NETDELAY_DELAY="--loss $loss --seed 1" "$root/scripts/netns/run_shaped.sh" \
        --rtt-ms "$rtt" 4 "$RATE" "$bench" --sizes-mib "$SIZE_MIB" --iters "$ITERS" \
        --methods "$METHOD" --connections "$k" --timeout-s 300 | grep '^| [0-9]' || true)
      # | MiB | method | time ms | algbw | ...
      IFS='|' read -r _ mib method ms algbw _ <<< "$line"
      echo "$rtt,$loss,$k,$(echo $mib),$(echo $method),$(echo $ms),$(echo $algbw),$load" | tee -a "$csv"
    done
  done
done
