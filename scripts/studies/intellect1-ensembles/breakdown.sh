#!/usr/bin/env bash
# What sets each geography's all-reduce time (issue 18): the ensembles of run.sh again with the
# WAN model's causes taken away one after another, each step keeping the ones before:
#   model            the scenario as committed
#   - path changes   network.variation.path_change_interval_s=0
#   - access variation  + network.variation.access_cv=0 (each node's share constant in time)
#   - idle restart   + network.tcp.slow_start_after_idle=false
#   - window         + tcp_gamma_bytes=1e12 (no window/RTT bound)
#   - slow nodes     + every access link at 18.4335 Gb/s, the top of the scenarios' range
# What remains is the RTT's latency term (and the ring's bytes at the top access rate). Loss and shared
# capacity are not in these scenarios (no public numbers: scenarios/intellect1-sites.yaml).
# Seeds 1-20, 3 outer steps each (the steps of a run differ only by path changes).
# Usage: scripts/studies/intellect1-ensembles/breakdown.sh BUILD  -> breakdown.json, breakdown.md here.
set -euo pipefail
build=$(cd "${1:?usage: breakdown.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/intellect1-ensembles
cd "$here/../.."
steps=("model" "- path changes" "- access variation" "- idle restart" "- window" "- slow nodes")
sets=("" "--set network.variation.path_change_interval_s=0"
      "--set network.variation.access_cv=0"
      "--set network.tcp.slow_start_after_idle=false"
      "--set network.tcp_gamma_bytes=1e12"
      "--set network.access_bandwidth_gbps=18.4335")
for s in usa useu global; do
  args=(--set run.outer_steps=3)
  for k in "${!steps[@]}"; do
    # shellcheck disable=SC2206
    args+=(${sets[$k]})
    "$build/bin/meridian" sim "scenarios/intellect1-$s.yaml" --seeds 1-20 "${args[@]}" \
      --out "runs/breakdown-$s-$k" --force > /dev/null
  done
done
python3 - "$here" <<'PY'
import json, sys
here = sys.argv[1]
steps = ["model", "- path changes", "- access variation", "- idle restart", "- window",
         "- slow nodes"]
out = {}
md = ["| scenario | " + " | ".join(steps) + " |", "|---|" + "---:|" * len(steps)]
for s in ["usa", "useu", "global"]:
    row = []
    for k, name in enumerate(steps):
        e = json.load(open(f"runs/breakdown-{s}-{k}/ensemble.json"))
        m = e["metrics"]["allreduce_s_p50"]
        row.append({"step": name, "median_s": m["median"], "p5_s": m["p5"], "p95_s": m["p95"],
                    "compute_utilization_median": e["metrics"]["compute_utilization"]["median"]})
    out[s] = row
    md.append(f"| intellect1-{s} | " + " | ".join(
        f"{r['median_s']:.0f} ({r['p5_s']:.0f}–{r['p95_s']:.0f})" for r in row) + " |")
json.dump(out, open(f"{here}/breakdown.json", "w"), indent=2)
open(f"{here}/breakdown.md", "w").write(
    "All-reduce per outer step (s): median over seeds 1-20 (90 % interval), each column removing "
    "one more cause (breakdown.sh).\n\n" + "\n".join(md) + "\n")
print("\n".join(md))
PY
