#!/usr/bin/env python3
"""Tables for results/post-training/README.md from a run.sh output directory (standard library
only). Usage: summarize.py OUT_DIR > tables.md; also writes OUT_DIR/losses.csv."""
import json
import os
import sys

out = sys.argv[1]


def load(name):
    with open(os.path.join(out, name, "result.json")) as f:
        return json.load(f)


base = load("base")
rows = [("base (general pre-training)", base), ("CPT, all tensors", load("cpt_full")),
        ("CPT, Spectrum top 25 %", load("cpt_spectrum25"))]
for m in ("slerp", "linear", "ties", "dare"):
    rows.append((f"merge {m}(base, CPT all)", load(f"merge_{m}_eval")))

print("| model | val loss general | val loss domain | Δ general vs base | Δ domain vs base |")
print("|---|---|---|---|---|")
for name, r in rows:
    print(f"| {name} | {r['val_loss_general']:.4f} | {r['val_loss_domain']:.4f} | "
          f"{r['val_loss_general'] - base['val_loss_general']:+.4f} | "
          f"{r['val_loss_domain'] - base['val_loss_domain']:+.4f} |")
print()

full, spec = rows[1][1], rows[2][1]
mib = 1 << 20
print("| CPT run | trained params | optimizer state | peak RSS | median s/step | "
      "mean train loss, last 10 steps | val domain | val general |")
print("|---|---|---|---|---|---|---|---|")
for name, r in (("all tensors", full), ("Spectrum top 25 %", spec)):
    last = r["train_loss"][-10:]
    print(f"| {name} | {r['params_trainable']:,} ({100 * r['params_trainable'] / r['params_total']:.1f} %) | "
          f"{r['optimizer_state_bytes'] / mib:.1f} MiB | {r['peak_rss_bytes'] / mib:.0f} MiB | "
          f"{r['step_s_median']:.3f} | {sum(last) / len(last):.4f} | {r['val_loss_domain']:.4f} | "
          f"{r['val_loss_general']:.4f} |")

with open(os.path.join(out, "losses.csv"), "w") as f:
    f.write("run,step,train_loss,step_s\n")
    for key in ("base", "cpt_full", "cpt_spectrum25"):
        r = load(key)
        for i, (l, s) in enumerate(zip(r["train_loss"], r["step_s"])):
            f.write(f"{key},{i},{l:.6f},{s:.4f}\n")
