#!/usr/bin/env python3
"""Joins measured*.csv (run.sh) and predicted*.csv (predict.sh) into table.md and summary.json."""
import csv
import json
import statistics
import os
import sys

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "results",
                    "bench", "connections")


def rows(name):
    path = os.path.join(here, name)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []


def key(r):
    return (float(r["rtt_ms"]), float(r["loss"]), int(r["connections"]))


out, summary = [], {"cells": []}
for label, measured, predicted in [("int8 ring, 64 MiB", "measured.csv", "predicted.csv"),
                                   ("fp32 ring, 256 MiB", "measured-fp32.csv",
                                    "predicted-fp32.csv"),
                                   ("int8 ring, 64 MiB, the full grid", "measured-grid.csv",
                                    "predicted-grid.csv")]:
    m, p = rows(measured), {key(r): float(r["time_ms"]) for r in rows(predicted)}
    if not m:
        continue
    out.append(f"\n**{label}** (all-reduce time, ms; K = connections per peer)\n")
    out.append("| RTT ms | loss | K | measured | vs K = 1 | simulated | vs K = 1 | sim / real |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_m = {(key(r)[0], key(r)[1]): float(r["time_ms"]) for r in m if key(r)[2] == 1}
    base_p = {(k[0], k[1]): v for k, v in p.items() if k[2] == 1}
    for r in m:
        k = key(r)
        if not r["time_ms"]:
            out.append(f"| {k[0]:g} | {k[1]:g} | {k[2]} | failed | | | | |")
            continue
        t = float(r["time_ms"])
        sim = p.get(k)
        bm, bp = base_m.get(k[:2]), base_p.get(k[:2])
        cell = {"study": label, "rtt_ms": k[0], "loss": k[1], "connections": k[2],
                "measured_ms": t, "simulated_ms": sim, "load1": float(r["load1"])}
        summary["cells"].append(cell)
        out.append("| {:g} | {:g} | {} | {:.0f} | {} | {} | {} | {} |".format(
            k[0], k[1], k[2], t,
            f"{bm / t:.2f}x" if bm else "",
            f"{sim:.0f}" if sim is not None else "",
            f"{bp / sim:.2f}x" if bp and sim else "",
            f"{sim / t:.2f}" if sim else ""))
cubic = {key(r): float(r["time_ms"]) for r in rows("predicted-cubic.csv")}
if cubic:
    out.append("\n**Simulated with CUBIC** (int8 ring, 64 MiB; not measured: this kernel's default is "
               "BBR)\n")
    out.append("| RTT ms | loss | K | simulated ms | vs K = 1 |")
    out.append("|---:|---:|---:|---:|---:|")
    for k, t in sorted(cubic.items()):
        base = cubic.get((k[0], k[1], 1))
        out.append(f"| {k[0]:g} | {k[1]:g} | {k[2]} | {t:.0f} | {base / t:.2f}x |")
        summary["cells"].append({"study": "int8 ring, 64 MiB, simulated with CUBIC",
                                 "rtt_ms": k[0], "loss": k[1], "connections": k[2],
                                 "simulated_ms": t})
summary["epoch_connect_ms_rtt250"] = rows("connect.csv")
hop, hop_sim = {}, {}
for r in rows("hop/measured.csv"):
    if r["goodput_mbit_per_s"]:
        hop.setdefault((r["rtt_ms"], r["loss"], r["cc"], r["flows"]), []).append(
            float(r["goodput_mbit_per_s"]))
for r in rows("hop/predicted.csv"):
    hop_sim[(r["rtt_ms"], r["loss"], r["cc"], r["flows"])] = float(r["sim_goodput_mbit_per_s"])
summary["one_hop_64mib_100mbit"] = [
    {"rtt_ms": float(k[0]), "loss": float(k[1]), "cc": k[2], "connections": int(k[3]),
     "measured_mbit_per_s_median": statistics.median(v), "repetitions": len(v),
     "simulated_mbit_per_s": hop_sim.get(k)} for k, v in sorted(hop.items())]
open(os.path.join(here, "table.md"), "w").write("\n".join(out).lstrip() + "\n")
json.dump(summary, open(os.path.join(here, "summary.json"), "w"), indent=1)
print("\n".join(out))
