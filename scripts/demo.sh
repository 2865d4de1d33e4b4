#!/usr/bin/env bash
# `make demo`: simulate INTELLECT-1's intercontinental run (14 nodes: 7 US, 5 EU, 2 Asia; 20 outer
# steps of a 10B model over a SimGrid WAN), then draw its plots and write its report.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin/meridian"
OUT="$BUILD/demo/intellect1-global"
"$BIN" version
if ! "$BIN" help sim >/dev/null 2>&1; then
  echo "demo: this meridian was built without SimGrid (MERIDIAN_WITH_SIMGRID=OFF); nothing to simulate" >&2
  exit 2
fi
"$BIN" sim scenarios/intellect1-global.yaml --out "$OUT" --force   # the demo owns $OUT: a rerun redraws it
"$BIN" plot "$OUT"
"$BIN" report "$OUT"
echo
echo "demo: events, summary, plots and report are in $OUT/"
echo "      open $OUT/report.html in a browser; plots in $OUT/plots/"
