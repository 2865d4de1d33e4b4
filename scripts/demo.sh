#!/usr/bin/env bash
# `make demo`: the showcase run. Until the simulator lands: the ring all-reduce benchmark over
# the in-process transport.
set -euo pipefail
BUILD=${1:-build}
"$BUILD"/bin/meridian version
if [ -x "$BUILD/bench/ring_bench" ]; then
  "$BUILD/bench/ring_bench" --benchmark_filter='.*/1048576/.*|.*/16777216/.*' --benchmark_counters_tabular=true
fi
