#!/usr/bin/env bash
# Part (b) of results/variants/README.md: each variant's convergence in emulation, at the
# blocking int8 H = 50 point of results/convergence/ (model micro, N = 4 on intellect1-usa's
# sites, 6,000 inner steps per node, seeds 0-2), with the scenario file that study committed
# (results/convergence/config/n4.yaml) and the same overrides as scripts/studies/convergence/run.sh's
# run_point. Runs go to runs/variants-convergence/ (not committed); convergence.json here holds
# each run's final validation loss and time to the target loss (a variant not run here keeps
# its committed rows).
#   scripts/studies/variants/convergence.sh BUILD [VARIANTS]   VARIANTS default: every row of the table
# Variants as in variants.sh ("none" is blocking DiLoCo); one may carry more overrides after
# '@': "delayed@diloco.outer_momentum=0". SEEDS (default "0 1 2"): the seeds of each variant.
# About 4 minutes of wall per run, two at a time, on 2 vCPUs (33 runs: about 70 minutes).
set -euo pipefail
build=$(cd "${1:?usage: convergence.sh BUILD_DIR [VARIANTS]}" && pwd)
variants=${2:-none delayed eager stream4 none@diloco.outer_momentum=0 delayed@diloco.outer_momentum=0 eager@diloco.outer_momentum=0 stream4@diloco.outer_momentum=0 topk topk-delayed stream4-topk}
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/variants
cd "$here/../.."
export OMP_NUM_THREADS=1
out=runs/variants-convergence
mkdir -p "$out"
"$build/bin/meridian" corpus --corpus=debian-docs --vocab=1024 >&2
for v in $variants; do
  seeds=${SEEDS:-0 1 2}
  for seed in $seeds; do
    echo "n4-int8-H50-${v//[@=]/_}-s$seed $v $seed"
  done
done | xargs -P 2 -L 1 bash -c '
  name=$0 v=$1 seed=$2 extra=()
  IFS=@ read -r -a parts <<< "$v"
  source '"$here"'/variants.sh
  spec=$(variant_settings "${parts[0]}") || exit 2
  read -r -a extra <<< "$spec"
  for kv in "${parts[@]:1}"; do extra+=(--set "$kv"); done
  [[ -f '"$out"'/$name/summary.json ]] && grep -q "\"complete\": true" '"$out"'/$name/summary.json && exit 0
  nice -n 10 '"$build"'/bin/meridian sim results/convergence/config/n4.yaml --out '"$out"'/$name \
    --set diloco.H=50 --set diloco.codec=int8 --set run.seed=$seed --set run.outer_steps=120 \
    "${extra[@]}" > '"$out"'/$name.log 2>&1 \
    || echo "convergence: $name failed" >&2'
python3 - "$out" "$here" <<'PY'
import json, pathlib, statistics, sys
out, here = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = {}
def point(s):
    t = s.get("target") or {}
    return {"val_loss": s.get("val_loss"), "time_to_target_s": t.get("time_s") if t.get("reached") else None,
            "target_outer_step": t.get("outer_step") if t.get("reached") else None,
            "compute_utilization": s.get("compute_utilization"), "simulated_s": s.get("simulated_s")}
# A variant with no run in `out` keeps its rows from the committed convergence.json (the runs
# are not committed: a clone reruns only the variants it names).
kept = here / "convergence.json"
if kept.exists():
    for v, a in json.loads(kept.read_text()).items():
        if v != "blocking" and not any(out.glob(f"n4-int8-H50-{v}-s*/summary.json")):
            rows[v] = {int(seed): r for seed, r in a["runs"].items()}
for d in sorted(out.glob("n4-int8-H50-*-s*")):
    if not (d / "summary.json").exists():
        continue
    v, seed = d.name[len("n4-int8-H50-"):d.name.rindex("-s")], int(d.name.split("-s")[-1])
    rows.setdefault(v, {})[seed] = point(json.loads((d / "summary.json").read_text()))
agg = {}
for v, by in rows.items():
    vals = [r["val_loss"] for r in by.values() if r["val_loss"] is not None]
    times = [r["time_to_target_s"] for r in by.values() if r["time_to_target_s"] is not None]
    agg[v] = {"seeds": sorted(by), "val_loss_mean": statistics.mean(vals) if vals else None,
              "val_loss_min": min(vals) if vals else None, "val_loss_max": max(vals) if vals else None,
              "time_to_target_s_mean": statistics.mean(times) if len(times) == len(by) else None,
              "runs": by}
(here / "convergence.json").write_text(json.dumps(agg, indent=1) + "\n")
for v, a in agg.items():
    print(v, a["seeds"], a["val_loss_mean"], a["time_to_target_s_mean"])
PY
# README.md's tables from the new outputs (its prose is by hand: read it against them).
python3 scripts/studies/variants/readme_tables.py "$here"
