#!/usr/bin/env bash
# The three steady intellect1 scenarios as 20-seed ensembles (meridian sim --seeds). The runs go
# to runs/ens-<scenario>/seed-<N>/ (rebuilt byte for byte by this script, not committed); their
# ensemble.json and ensemble.md are copied here. Usage: results/intellect1-ensembles/run.sh BUILD
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
for s in usa useu global; do
  "$build/bin/meridian" sim "scenarios/intellect1-$s.yaml" --seeds 1-20 --out "runs/ens-$s" --force
  mkdir -p "$here/$s"
  cp "runs/ens-$s/ensemble.json" "runs/ens-$s/ensemble.md" "$here/$s/"
done
