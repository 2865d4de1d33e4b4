#!/usr/bin/env bash
# Regenerates the simulated INTELLECT-1 results (README-netsim.md, README-analysis.md): the four
# intellect1-* runs, their side-by-side figures and the H × codec sweep of intellect1-global.
# Simulate mode is deterministic (same scenario and seed, same events), so only what a README
# reads is committed: each run's summary.json, the figures the READMEs cite, the sweep's table.
# The events, reports and plot data are rebuilt here, under runs/ (git ignores it).
#   scripts/studies/netsim-runs.sh BUILD_DIR     (about 1.5 minutes here)
set -euo pipefail
build=$(cd "${1:?usage: netsim-runs.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/results
cd "$here/.."
M="$build/bin/meridian"
for s in usa useu global full; do
  "$M" sim "scenarios/intellect1-$s.yaml" --out "runs/intellect1-$s" --force > /dev/null
  mkdir -p "$here/intellect1-$s"
  cp "runs/intellect1-$s/summary.json" "$here/intellect1-$s/"
  "$M" report "runs/intellect1-$s" > /dev/null   # runs/intellect1-<s>/report.html and plots/
done
"$M" plot runs/intellect1-usa runs/intellect1-useu runs/intellect1-global runs/intellect1-full \
  --no-svg --out "$here/compare-intellect1" > /dev/null
rm -rf "$here/compare-intellect1/data" "$here/compare-intellect1/"*.gp "$here/compare-intellect1/"*.log
sweep=sweep-intellect1-global-H-codec
"$M" sweep scenarios/intellect1-global.yaml --set diloco.H=50,100,500 \
  --set diloco.codec=fp32,int8 --out "runs/$sweep" --force > /dev/null
mkdir -p "$here/$sweep/plots"
cp "runs/$sweep/sweep.md" "runs/$sweep/sweep.csv" "$here/$sweep/"
cp "runs/$sweep/plots/"sweep_*.png "$here/$sweep/plots/"
