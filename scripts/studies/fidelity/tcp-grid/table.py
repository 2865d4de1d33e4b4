#!/usr/bin/env python3
"""Joins measured.csv (run.sh) and predicted.csv (predict.sh) per cell: the measured delivery
time (median and range over the repetitions), the simulated one, and the simulator's relative
error (simulated / measured - 1, on the time; goodput errs by the inverse). Writes
comparison.csv and comparison.md next to them.

  scripts/studies/fidelity/tcp-grid/table.py [FOLDER, default this one]
"""
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = (Path(sys.argv[1]) if len(sys.argv) > 1 else
        Path(__file__).resolve().parents[4] / "results" / "fidelity" / "tcp-grid")
TARGET = 0.15
MSS_BYTES = 1448


def key(r):
    return (float(r["rtt_ms"]), float(r["loss"]), int(r["bytes"]), r["cc"], int(r["flows"]))


def main():
    runs = defaultdict(list)
    for r in csv.DictReader(open(HERE / "measured.csv")):
        if r["delivered_s"]:
            runs[key(r)].append(r)
    pred = {key(r): r for r in csv.DictReader(open(HERE / "predicted.csv"))}
    rows = []
    for k in sorted(runs):
        t = [float(r["delivered_s"]) for r in runs[k]]
        g = [float(r["goodput_mbit_per_s"]) for r in runs[k]]
        re = sum(int(r["retrans_segs"]) for r in runs[k]) / sum(int(r["segs"]) for r in runs[k])
        p = pred.get(k)
        sim_s = float(p["sim_seconds"]) if p else None
        med = statistics.median(t)
        rows.append({
            "rtt_ms": k[0], "loss": k[1], "mib": k[2] / 2**20, "cc": k[3], "flows": k[4],
            "n": len(t), "real_s": med, "real_min_s": min(t), "real_max_s": max(t),
            "real_mbit": statistics.median(g), "retrans_per_seg": re,
            "sim_s": sim_s, "sim_mbit": float(p["sim_goodput_mbit_per_s"]) if p else None,
            "error": sim_s / med - 1 if sim_s else None,
            "spread": (max(t) - min(t)) / med,
            # random losses one connection expects in its transfer: ~1 or fewer and the
            # steady-state response function has nothing to average over
            "losses_per_connection": k[2] / k[4] / MSS_BYTES * k[1],
        })
    with open(HERE / "comparison.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    within = [r for r in rows if r["error"] is not None and abs(r["error"]) <= TARGET]
    judged = [r for r in rows if r["error"] is not None]
    out = [f"{len(within)} of {len(judged)} cells within ±{TARGET:.0%} (simulated / measured "
           "delivery time − 1; median of the repetitions)\n",
           "| cells | within ±15 % | simulated / measured − 1: median (min … max) |",
           "|---|---:|---|"]
    groups = [("no loss", lambda r: r["loss"] == 0),
              ("loss, N·p < 1 per connection", lambda r: 0 < r["losses_per_connection"] < 1),
              ("loss, 1 ≤ N·p < 10", lambda r: 1 <= r["losses_per_connection"] < 10),
              ("loss, N·p ≥ 10", lambda r: r["losses_per_connection"] >= 10)]
    for name, pick in groups:
        g = [r for r in judged if pick(r)]
        if not g:
            continue
        e = sorted(r["error"] for r in g)
        ok = sum(abs(x) <= TARGET for x in e)
        out.append(f"| {name} | {ok} of {len(g)} | {statistics.median(e):+.1%} "
                   f"({e[0]:+.1%} … {e[-1]:+.1%}) |")
    out += ["",
           "| RTT ms | loss | MiB | cc | flows | losses per connection (N·p) | n | "
           "real s (min–max) | real Mbit/s | retrans/seg | sim s | sim Mbit/s | sim vs real |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        err = "—" if r["error"] is None else f"{r['error']:+.1%}"
        if r["error"] is not None and abs(r["error"]) > TARGET:
            err = f"**{err}**"
        sim = "—" if r["sim_s"] is None else f"{r['sim_s']:.3f}"
        simg = "—" if r["sim_mbit"] is None else f"{r['sim_mbit']:.1f}"
        out.append(f"| {r['rtt_ms']:g} | {r['loss']:g} | {r['mib']:g} | {r['cc']} | {r['flows']} "
                   f"| {r['losses_per_connection']:.2g} | {r['n']} | {r['real_s']:.3f} ({r['real_min_s']:.3f}–{r['real_max_s']:.3f}) "
                   f"| {r['real_mbit']:.1f} | {r['retrans_per_seg']:.1e} | {sim} | {simg} | {err} |")
    (HERE / "comparison.md").write_text("\n".join(out) + "\n")
    print(out[0].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
