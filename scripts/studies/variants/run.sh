#!/usr/bin/env bash
# The variants study of results/variants/README.md (issue 31): INTELLECT-1's four scenarios as
# 20-seed ensembles under each outer-step variant, and an access-bandwidth sweep on the global
# network. Runs go to runs/variants/ (rebuilt by this script, not committed); each ensemble's
# ensemble.json is copied here, then summarize.py writes summary.json and table.md.
#   scripts/studies/variants/run.sh BUILD [VARIANTS]
# VARIANTS default: every variant of variants.sh ("none delayed eager stream4 stream16
# stream4-fp4 topk topk-delayed stream4-topk").
# VARIANTS_DIR=DIR: the ensembles, summary.json and table.md go to DIR (a sub-study, or a check
# that the committed outputs reproduce) and README.md's tables are left alone.
# BANDWIDTHS="B ...": the sweep's access bandwidths, Gb/s (default 0.05 0.1 0.2 0.5 1 2 4 8 16).
# KEEP=1: an ensemble already in DIR is kept, not rerun (to add variants to a study).
# About 1 s of wall per steady seed and 20 s per intellect1-full seed on 2 vCPUs.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [VARIANTS]}" && pwd)
variants=${2:-none delayed eager stream4 stream16 stream4-fp4 topk topk-delayed stream4-topk}
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/variants
source "$root/scripts/studies/variants/variants.sh"  # variant_settings
cd "$here/../.."
meridian="$build/bin/meridian"
dest=$(mkdir -p "${VARIANTS_DIR:-$here}" && cd "${VARIANTS_DIR:-$here}" && pwd)
for v in $variants; do
  spec=$(variant_settings "$v")
  read -r -a set_v <<< "$spec"
  for s in usa useu global full; do
    [ -n "${KEEP:-}" ] && [ -f "$dest/ensembles/$s-$v/ensemble.json" ] && continue
    out="runs/variants/$s-$v"
    "$meridian" sim "scenarios/intellect1-$s.yaml" --seeds 1-20 "${set_v[@]}" \
      --out "$out" --force --no-plots > /dev/null
    mkdir -p "$dest/ensembles/$s-$v"
    cp "$out/ensemble.json" "$dest/ensembles/$s-$v/"
  done
  # The access bandwidth each variant needs on the global network: every node at B Gb/s, no
  # checkpoints (their 60 s per step is the same for every variant), seeds 1-5.
  for b in ${BANDWIDTHS:-0.05 0.1 0.2 0.5 1 2 4 8 16}; do
    [ -n "${KEEP:-}" ] && [ -f "$dest/ensembles/bandwidth-$v-$b/ensemble.json" ] && continue
    out="runs/variants/bandwidth-$v-$b"
    "$meridian" sim scenarios/intellect1-global.yaml --seeds 1-5 "${set_v[@]}" \
      --set "network.access_bandwidth_gbps=[$b,$b]" --set diloco.checkpoint_s=0 \
      --out "$out" --force --no-plots > /dev/null
    mkdir -p "$dest/ensembles/bandwidth-$v-$b"
    cp "$out/ensemble.json" "$dest/ensembles/bandwidth-$v-$b/"
  done
done
python3 scripts/studies/variants/summarize.py "$dest"
# README.md's tables from the new outputs (its prose is by hand: read it against them).
if [ "$dest" = "$here" ]; then python3 scripts/studies/variants/readme_tables.py "$here"; fi
