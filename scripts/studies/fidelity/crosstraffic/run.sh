#!/usr/bin/env bash
# Issue 18, "Remove the crosstraffic artefact", decided by measurement: 4 real `meridian train`
# nodes on the namespace harness as two sites of two (ring: LAN, WAN, LAN, WAN hops; 100 Mbit/s
# per node, RTT 1 ms within a site and 100 ms across, through `meridian netdelay --matrix
# matrix-2sites.txt`; Reno without idle restart), by ../run.sh's machinery, then `meridian sim`
# of scenario-2sites.yaml with network.crosstraffic true and false (the real run's inner-step
# time), for each codec, and summary.json: the all-reduce per outer step of each. Needs root.
# ~5 minutes per codec.
#
#   scripts/studies/fidelity/crosstraffic/run.sh [BUILD_DIR=build]
#   CODECS="int8 fp32" (fp32's ring messages are 4x int8's: 1.6 MB, 126 ms at 100 Mbit/s, longer
#     than the WAN's 50 ms one way, so LAN and WAN transfers overlap; int8's 394 kB do not)
#   REAL_SYSCTL (the node namespaces' TCP; default Reno, tcp_slow_start_after_idle=0)
#   REPEAT="" (appended to the run's label: REPEAT=-2 keeps runs/crosstraffic/real-fp32-2 beside
#     real-fp32)
#   scripts/studies/fidelity/crosstraffic/run.sh summary   (only the sims and summary.json, from the
#                                                    real runs already in runs/crosstraffic/)
# summary.json covers every real run in runs/crosstraffic/ (label: the folder's name after real-).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
HERE=results/fidelity/crosstraffic
BUILD=build
[[ ${1:-} != summary && -n ${1:-} ]] && BUILD=$1
M=$BUILD/bin/meridian
CODECS=${CODECS:-int8 fp32}
RUNS=runs/crosstraffic   # event streams stay out of git (runs/ is ignored); summary.json is kept
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

for codec in $CODECS; do
  [[ ${1:-} == summary ]] && break
  real=$RUNS/real-$codec${REPEAT:-}
  mkdir -p "$RUNS"
  rm -rf "$real"
  SCENARIO=crosstraffic/scenario-2sites.yaml RTT_MS=1 TAG=-crosstraffic \
    NETDELAY_DELAY="--matrix $HERE/matrix-2sites.txt" \
    NODE_SYSCTL="${REAL_SYSCTL:-net.ipv4.tcp_congestion_control=reno net.ipv4.tcp_slow_start_after_idle=0}" \
    scripts/studies/fidelity/run.sh "$BUILD" "$codec"
  mv "results/fidelity/real-$codec-crosstraffic" "$real"
  # ../run.sh's own simulation is of the scenario's codec (int8); the ones below replace it.
  rm -rf "results/fidelity/sim-$codec-crosstraffic" "results/fidelity/sim-$codec-crosstraffic.log"
done

triples=()
for real in "$RUNS"/real-*; do
  label=${real#"$RUNS"/real-}
  codec=${label%%-*}
  step_s=$(python3 scripts/studies/fidelity/compare.py step-time "$real")
  for ct in true false; do
    log "$label: simulating with network.crosstraffic=$ct (inner step $step_s s)"
    "$M" sim "$HERE/scenario-2sites.yaml" --out "$RUNS/sim-$label-crosstraffic-$ct" --force \
      --set "hardware.step_time_s=$step_s" --set "diloco.codec=$codec" \
      --set "network.crosstraffic=$ct" >/dev/null 2>&1
  done
  triples+=("$label" "$real" "$RUNS/sim-$label-crosstraffic-true" "$RUNS/sim-$label-crosstraffic-false")
done
python3 scripts/studies/fidelity/crosstraffic/summarize.py "${triples[@]}" >"$HERE/summary.json"
