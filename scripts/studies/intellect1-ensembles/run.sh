#!/usr/bin/env bash
# The four intellect1 scenarios as 20-seed ensembles (meridian sim --seeds), and the
# figure that compares them. The runs go to runs/ens-<scenario>/seed-<N>/ (rebuilt byte for byte
# by this script, not committed); their ensemble.json and ensemble.md are copied here, and
# plots/compare_ensemble_*.png drawn from them. Usage: scripts/studies/intellect1-ensembles/run.sh BUILD
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/intellect1-ensembles
cd "$here/../.."
for s in usa useu global; do
  "$build/bin/meridian" sim "scenarios/intellect1-$s.yaml" --seeds 1-20 --out "runs/ens-$s" \
    --force --no-plots
  mkdir -p "$here/$s"
  cp "runs/ens-$s/ensemble.json" "runs/ens-$s/ensemble.md" "$here/$s/"
done
# intellect1-full (29 days, churn) under the same seeds: about 20 s of wall per seed here.
"$build/bin/meridian" sim scenarios/intellect1-full.yaml --seeds 1-20 --out runs/ens-full --force \
  --no-plots
mkdir -p "$here/full"
cp runs/ens-full/ensemble.json runs/ens-full/ensemble.md "$here/full/"
"$build/bin/meridian" plot "$here/usa" "$here/useu" "$here/global" "$here/full" \
  --label "USA (8 nodes)" --label "US + EU (10)" --label "global (14)" \
  --label "full (4-14, churn)" --no-svg --out "$here/plots" > /dev/null
rm -rf "$here/plots/data" "$here/plots/"*.gp "$here/plots/"*.log "$here"/*/plots   # regenerable
