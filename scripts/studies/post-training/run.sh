#!/usr/bin/env bash
# The post-training workflow behind results/post-training/: pre-train a base model on the general
# (fortune) corpus, Spectrum on it, continual pre-training on the domain corpus (licence texts of
# base-files) with every tensor trained and with Spectrum's top 25 % only, merges of the CPT model
# with the base, and validation loss of each on both corpora. Usage (from the repository root,
# after building with MERIDIAN_WITH_TORCH=ON):
#   scripts/studies/post-training/run.sh BUILD_DIR OUT_DIR CONFIG BASE_STEPS CPT_STEPS [finetune args...]
# (extra arguments, e.g. --batch 4 --seq-len 128, go to every `meridian finetune`).
set -euo pipefail
M="$1/bin/meridian"; OUT="$2"; CONFIG="${3:-small}"; BASE_STEPS="${4:-200}"; CPT_STEPS="${5:-60}"
shift 5 || true
EXTRA=("$@"); CACHE="$OUT/cache"; EVAL=16
mkdir -p "$OUT"
ft() { "$M" finetune --force --config "$CONFIG" --cache "$CACHE" --eval-sequences "$EVAL" "${EXTRA[@]}" "$@"; }

ft --corpus general --steps "$BASE_STEPS" --warmup 30 --out "$OUT/base"
"$M" spectrum "$OUT/base" --top 25% --by-type --out "$OUT/spectrum.yaml" > "$OUT/spectrum.txt"
ft --corpus domain --init "$OUT/base" --steps "$CPT_STEPS" --lr 3e-4 --warmup 10 --out "$OUT/cpt_full"
ft --corpus domain --init "$OUT/base" --steps "$CPT_STEPS" --lr 3e-4 --warmup 10 \
   --spectrum "$OUT/spectrum.yaml" --out "$OUT/cpt_spectrum25"
"$M" merge --method slerp --t 0.5 "$OUT/base" "$OUT/cpt_full" --out "$OUT/merge_slerp"
"$M" merge --method linear "$OUT/base" "$OUT/cpt_full" --out "$OUT/merge_linear"
"$M" merge --method ties --density 0.5 "$OUT/base" "$OUT/cpt_full" --out "$OUT/merge_ties"
"$M" merge --method dare --density 0.5 --seed 1 "$OUT/base" "$OUT/cpt_full" --out "$OUT/merge_dare"
for m in slerp linear ties dare; do
  ft --init "$OUT/merge_$m" --steps 0 --out "$OUT/merge_${m}_eval"
done
