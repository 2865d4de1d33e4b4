#!/usr/bin/env bash
# Reproduces results/fidelity/ (README.md): for each codec, 4 `meridian train` nodes on shaped
# namespaces (100 Mbit/s per node, 60 ms RTT through `meridian netdelay`, the store in a fifth
# namespace), then the same run in `meridian sim` (scenario-<codec>.yaml, compute time = the
# real run's mean inner step), the comparison table and the plots. Needs root (namespaces).
#
#   scripts/studies/fidelity/run.sh [BUILD_DIR=build] [CODECS="int8 fp32"]
#   RTT_MS=60 (the harness's RTT; the sim gets the same through --set network.intra_site_rtt_ms)
#   TAG="" (appended to the run folders: real-<codec><TAG>, sim-<codec><TAG>)
#   NODE_SYSCTL="key=value ..." (kernel settings in the node namespaces, see netns.sh)
#   TBF_BURST (the shaping token bucket's depth; default netns.sh's: rate / the kernel's HZ)
#   SCENARIO=FILE (in results/fidelity/, instead of scenario-<codec>.yaml; its network then gives
#     the simulated delays, and NETDELAY_DELAY the real ones, e.g. "--matrix FILE"; RTT_MS > 0
#     only switches the delay harness on)
#   RUN_FILE=FILE (in results/fidelity/, instead of run-<codec>.yaml)
#   RATE_CV=C RATE_CORR_S=T RATE_SEED=S: the nodes' access rates vary in time around RATE_MBIT
#     (scripts/netns/vary_rate.py: each direction a mean-preserving log-normal AR(1), CV C,
#     correlation time T s, seeded), logged to the run folder's rates.tsv; SIM_SKIP=1 leaves out
#     the simulation of the run (the fidelity loop, loop/run.sh, simulates it its own way)
#   scripts/studies/fidelity/run.sh table [RUN...]   only the comparisons and plots, each real run simulated
#     anew by this checkout's simulator (no RUN: both tables, the five one-site runs and the seven
#     three-continent runs; RUN: int8, int8-rtt0...)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=results/fidelity
M=build/bin/meridian
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
NETNS=scripts/netns/netns.sh
RATE_MBIT=100
RTT_MS=${RTT_MS:-60}
TAG=${TAG:-}
NODES=4

# A committed real run keeps raw.tar.xz only (its node folders, logs, run.yaml, the harness's
# stats and load, the command that ran it and the one that simulates it); table and
# `meridian plot` need them back beside it.
unpack() { [[ -d $1/node-1 || ! -f $1/raw.tar.xz ]] || tar -xJf "$1/raw.tar.xz" -C "$1"; }
pack() {
  local optional=() f
  for f in rates.tsv command.txt sim-command.txt; do [[ -f $1/$f ]] && optional+=("$f"); done
  (cd "$1" && tar -cJf raw.tar.xz node-* node*.log store.log netdelay-stats.txt namespaces.txt \
    machine.txt run.yaml "${optional[@]}")
}

# The simulation of a committed real run, by today's simulator: the command its run recorded
# (sim-command.txt in real-<run>/raw.tar.xz: the scenario, and the run's own measured inner step;
# `table` unpacks it first). Simulations
# are not committed; each `table` makes them anew, so the table always says what the simulator
# of this checkout predicts.
simulate() {
  local cmd sim_args
  cmd=$(cat "$OUT/real-$1/sim-command.txt")
  read -r -a sim_args <<<"${cmd#meridian sim }"
  "$M" sim "${sim_args[@]}" --force >"$OUT/sim-$1.log" 2>&1 ||
    { log "$1: the simulation failed, see $OUT/sim-$1.log"; exit 1; }
}

# The five one-site runs: comparison.{md,csv,png} and analysis/'s side-by-side figures (plots/).
ONE_SITE="int8 fp32 int8-rtt0 int8-rtt30 int8-noidlerestart"
# The three-continent runs (README.md, "Three continents"): comparison-3continents.{md,csv}.
THREE_CONTINENTS="int8-3continents int8-3continents-rmem int8-3continents-noidlerestart
  int8-3continents-cubic int8-3continents-cubic-noidlerestart int8-3continents-reno-idlerestart
  int8-3continents-reno"

table() {  # table OUT_NAME RUN...: the comparison table of the runs, simulated anew
  local name=$1 args=() runs=() r
  shift
  for r in "$@"; do
    unpack "$OUT/real-$r"
    simulate "$r"
    "$M" plot "$OUT/sim-$r" >/dev/null
    args+=("$r" "$OUT/real-$r" "$OUT/sim-$r")
    runs+=("$OUT/real-$r" "$OUT/sim-$r")
  done
  python3 scripts/studies/fidelity/compare.py table "$OUT/$name" "${args[@]}"
  if [[ $name == comparison ]]; then
    gnuplot scripts/studies/fidelity/comparison.gp
    "$M" plot "${runs[@]}" --out "$OUT/plots" >/dev/null
  fi
}
if [[ ${1:-} == table ]]; then
  shift
  if [[ $# -gt 0 ]]; then
    table comparison "$@"
  else
    # shellcheck disable=SC2086  # the lists split into run names
    table comparison $ONE_SITE
    # shellcheck disable=SC2086
    table comparison-3continents $THREE_CONTINENTS
  fi
  exit 0
fi
BUILD=${1:-build}
CODECS=${2:-int8 fp32}
M=$BUILD/bin/meridian
export OMP_NUM_THREADS=1

"$NETNS" check
prefix="mfid$$"
trap '"$NETNS" down "$prefix" $((NODES + 1))' EXIT
work=$(mktemp -d)
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret")

for codec in $CODECS; do
  real=$OUT/real-$codec$TAG sim=$OUT/sim-$codec$TAG
  rm -rf "$real" "$sim"
  mkdir -p "$real"
  echo "RTT_MS=$RTT_MS TAG=$TAG NODE_SYSCTL='${NODE_SYSCTL:-}' TBF_BURST='${TBF_BURST:-}'" \
    "SCENARIO='${SCENARIO:-}' NETDELAY_DELAY='${NETDELAY_DELAY:-}' RUN_FILE='${RUN_FILE:-}'" \
    "RATE_CV='${RATE_CV:-}' RATE_CORR_S='${RATE_CORR_S:-}' RATE_SEED='${RATE_SEED:-}'" \
    "SIM_SKIP='${SIM_SKIP:-}' $0 $BUILD $codec" >"$real/command.txt"
  # The run's own copy of the run file: only output.dir differs (".": the folder the copy is in;
  # not part of the configuration hash). The nodes write $real/node-<ID>/, which
  # `meridian plot/report $real` merge onto one clock.
  sed "s|^  dir: real-.*|  dir: .|" "$OUT/${RUN_FILE:-run-$codec.yaml}" >"$real/run.yaml"
  log "$codec: namespaces ($NODES nodes + the store), $RATE_MBIT Mbit/s," \
    "$([[ -n ${NETDELAY_DELAY:-} ]] && echo "delays $NETDELAY_DELAY" || echo "RTT $RTT_MS ms")"
  MERIDIAN=$M "$NETNS" up "$prefix" $((NODES + 1)) "$RATE_MBIT" "$RTT_MS" >"$real/namespaces.txt"
  store_ip=$("$NETNS" ip "$prefix" "$NODES")
  ip netns exec "$prefix-$NODES" "$M" store --bind "$store_ip" --port 29500 \
    --secret-file "$work/secret" >"$work/store.out" 2>"$real/store.log" &
  store_pid=$!
  for _ in $(seq 1 200); do
    grep -q '^store listening on ' "$work/store.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -q '^store listening on ' "$work/store.out" || { log "the store did not start"; exit 1; }
  vary_pid=""
  if [[ -n ${RATE_CV:-} ]]; then
    python3 scripts/netns/vary_rate.py --prefix "$prefix" --nodes "$NODES" --mean-mbit "$RATE_MBIT" \
      --cv "$RATE_CV" --correlation-s "${RATE_CORR_S:?RATE_CORR_S with RATE_CV}" \
      --seed "${RATE_SEED:-1}" --hz "$("$NETNS" hz)" --log "$real/rates.tsv" &
    vary_pid=$!
  fi
  { echo "# load before the run"; uptime; } >"$real/machine.txt"
  log "$codec: training ($(uptime | sed 's/.*load/load/'))"
  pids=()
  for ((i = 0; i < NODES; i++)); do
    ip netns exec "$prefix-$i" "$M" train "$real/run.yaml" --node-id $((i + 1)) \
      --secret-file "$work/secret" --store "$store_ip:29500" --host "$("$NETNS" ip "$prefix" "$i")" \
      >"$real/node$((i + 1)).log" 2>&1 &
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  { echo "# load after the run"; uptime; } >>"$real/machine.txt"
  if [[ -n $vary_pid ]]; then kill "$vary_pid" 2>/dev/null || true; wait "$vary_pid" || true; fi
  kill "$store_pid" 2>/dev/null || true
  wait "$store_pid" 2>/dev/null || true
  "$NETNS" down "$prefix" $((NODES + 1))
  cp "$("$NETNS" dir "$prefix")/stats" "$real/netdelay-stats.txt"
  [[ $status -eq 0 ]] || { log "$codec: a node failed (status $status), see $real/node*.log"; exit 1; }

  if [[ -n ${SIM_SKIP:-} ]]; then
    "$M" report "$real" >/dev/null
    pack "$real"
    continue
  fi
  step_s=$(python3 scripts/studies/fidelity/compare.py step-time "$real")
  log "$codec: measured inner step $step_s s; simulating"
  sim_args=("$OUT/${SCENARIO:-scenario-$codec.yaml}" --out "$sim"
            --set "hardware.step_time_s=$step_s")
  [[ -n ${SCENARIO:-} ]] || sim_args+=(--set "network.intra_site_rtt_ms=$RTT_MS")
  echo "meridian sim ${sim_args[*]}" >"$real/sim-command.txt"
  "$M" plot "$real" >/dev/null
  "$M" report "$real" >/dev/null   # analysis/'s summary of the real run (sim: `table`)
  pack "$real"
done

rm -rf "$work"
log "runs done; the table: $0 table <runs>"
