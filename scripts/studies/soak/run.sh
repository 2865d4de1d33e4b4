#!/usr/bin/env bash
# The long churn soaks of results/soak/ (README.md there): one on the standalone TCP store, one on
# a 3-member etcd cluster with member kills, started together (they share the machine equally),
# each under `nice -n 10` and nohup, each a 120 s churn-free baseline then 60 min of churn, hard
# bounded to 65 min (the driver's --max-total-s 64 min; `timeout` 65 min behind it). Not the
# short soak of `make test` (tests/soak/, label `soak`).
#
#   scripts/studies/soak/run.sh start OUT_ROOT [BUILD]   starts both in the background and returns;
#                                                 OUT_ROOT/{tcp,etcd}/ (summary.json at the end)
#   scripts/studies/soak/run.sh report OUT_ROOT          OUT_ROOT/{tcp,etcd} -> results/soak/summary.json
#                                                 and results/soak/table.md
set -euo pipefail
cd "$(dirname "$0")/../../.."
cmd=${1:?usage: scripts/studies/soak/run.sh start|report OUT_ROOT [BUILD]}
root=${2:?usage: scripts/studies/soak/run.sh start|report OUT_ROOT [BUILD]}
build=${3:-build}
case $cmd in
  start)
    mkdir -p "$root/bin"
    # A copy of the binary: rebuilding the checkout during the soak does not change what it runs.
    cp "$build/bin/meridian" "$build/bin/meridian-torch" "$root/bin/"  # the front and its other half
    git rev-parse HEAD > "$root/commit"
    for store in tcp etcd; do
      OMP_NUM_THREADS=1 setsid nohup nice -n 10 timeout --signal=TERM 3900 \
        python3 scripts/soak/soak.py run --store "$store" --out "$root/$store" \
        --meridian "$root/bin/meridian" --cache-dir "$build/trainer_cache" --seed 36 \
        --baseline-s 120 --churn-s 3600 --tail-timeout-s 60 --max-total-s 3840 \
        > "$root/$store.log" 2>&1 &
      echo "soak $store: pid $! in $root/$store (log $root/$store.log)"
    done
    ;;
  report)
    python3 scripts/soak/soak.py report "$root/tcp" "$root/etcd" --out results/soak
    ;;
  *) echo "run.sh: unknown command $cmd (start, report)" >&2; exit 2 ;;
esac
