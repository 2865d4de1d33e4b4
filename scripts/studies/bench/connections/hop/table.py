#!/usr/bin/env python3
"""One hop: measured.csv (scripts/studies/fidelity/tcp-grid/run.sh) and predicted.csv (its predict.sh)
as a Markdown table of median goodput per cell. usage: table.py [DIR]"""
import csv, statistics, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..", "results", "bench",
    "connections", "hop")
m = list(csv.DictReader(open(os.path.join(d, "measured.csv"))))
p = {(r["rtt_ms"], r["loss"], r["cc"], r["flows"]): r for r in csv.DictReader(open(os.path.join(d, "predicted.csv")))}
cells = {}
for r in m:
    if r["goodput_mbit_per_s"]:
        cells.setdefault((r["rtt_ms"], r["loss"], r["cc"], r["flows"]), []).append(float(r["goodput_mbit_per_s"]))
print("| RTT ms | loss | CC | K | measured Mbit/s (median, n) | vs K = 1 | simulated Mbit/s | vs K = 1 | sim / real |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for key in sorted(cells, key=lambda k: (float(k[0]), float(k[1]), k[2], int(k[3]))):
    g = statistics.median(cells[key]); n = len(cells[key])
    b = statistics.median(cells.get((key[0], key[1], key[2], "1"), [float("nan")]))
    s = float(p[key]["sim_goodput_mbit_per_s"]); sb = float(p[(key[0], key[1], key[2], "1")]["sim_goodput_mbit_per_s"])
    print(f"| {key[0]} | {float(key[1]):g} | {key[2]} | {key[3]} | {g:.1f} ({n}) | {g/b:.2f}x | {s:.1f} | {s/sb:.2f}x | {s/g:.2f} |")
