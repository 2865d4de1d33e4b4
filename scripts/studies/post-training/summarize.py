#!/usr/bin/env python3
"""The post-training study's outputs (results/post-training/README.md), standard library only.

usage: summarize.py SRC DEST
  SRC   a run.sh output directory (SRC/<run>/result.json for every run), or a folder that holds
        a summary.json this script wrote (the committed results/post-training/<config>/)
  DEST  gets summary.json (every run's result.json, by run; kept as is when SRC is DEST),
        tables.md (the README's tables) and losses.csv (per-step training loss and time of the
        trained runs: regenerable, not committed)
"""
import json
import os
import sys

RUNS = ("base", "cpt_full", "cpt_spectrum25", "merge_slerp_eval", "merge_linear_eval",
        "merge_ties_eval", "merge_dare_eval")


def load_runs(src):
    summary = os.path.join(src, "summary.json")
    if os.path.exists(summary):
        with open(summary) as f:
            return json.load(f)["runs"]
    runs = {}
    for name in RUNS:
        with open(os.path.join(src, name, "result.json")) as f:
            runs[name] = json.load(f)
    return runs


def tables(runs):
    base = runs["base"]
    rows = [("base (general pre-training)", base), ("CPT, all tensors", runs["cpt_full"]),
            ("CPT, Spectrum top 25 %", runs["cpt_spectrum25"])]
    for m in ("slerp", "linear", "ties", "dare"):
        rows.append((f"merge {m}(base, CPT all)", runs[f"merge_{m}_eval"]))
    out = ["| model | val loss general | val loss domain | Δ general vs base | Δ domain vs base |",
           "|---|---|---|---|---|"]
    for name, r in rows:
        out.append(f"| {name} | {r['val_loss_general']:.4f} | {r['val_loss_domain']:.4f} | "
                   f"{r['val_loss_general'] - base['val_loss_general']:+.4f} | "
                   f"{r['val_loss_domain'] - base['val_loss_domain']:+.4f} |")
    out.append("")
    full, spec = rows[1][1], rows[2][1]
    mib = 1 << 20
    out += ["| CPT run | trained params | optimizer state | peak RSS | median s/step | "
            "mean train loss, last 10 steps | val domain | val general |",
            "|---|---|---|---|---|---|---|---|"]
    for name, r in (("all tensors", full), ("Spectrum top 25 %", spec)):
        last = r["train_loss"][-10:]
        out.append(
            f"| {name} | {r['params_trainable']:,} "
            f"({100 * r['params_trainable'] / r['params_total']:.1f} %) | "
            f"{r['optimizer_state_bytes'] / mib:.1f} MiB | {r['peak_rss_bytes'] / mib:.0f} MiB | "
            f"{r['step_s_median']:.3f} | {sum(last) / len(last):.4f} | {r['val_loss_domain']:.4f} | "
            f"{r['val_loss_general']:.4f} |")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(sys.argv) != 2 else sys.stdout)
        return 0 if len(sys.argv) == 2 else 2
    src, dest = sys.argv[1], sys.argv[2]
    runs = load_runs(src)
    os.makedirs(dest, exist_ok=True)
    if os.path.realpath(src) != os.path.realpath(dest):
        with open(os.path.join(dest, "summary.json"), "w") as f:
            json.dump({"runs": runs}, f, indent=1, sort_keys=True)
            f.write("\n")
    with open(os.path.join(dest, "tables.md"), "w") as f:
        f.write(tables(runs))
    with open(os.path.join(dest, "losses.csv"), "w") as f:
        f.write("run,step,train_loss,step_s\n")
        for key in ("base", "cpt_full", "cpt_spectrum25"):
            r = runs[key]
            for i, (loss, s) in enumerate(zip(r["train_loss"], r["step_s"])):
                f.write(f"{key},{i},{loss:.6f},{s:.4f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
