#!/usr/bin/env python3
"""The fidelity study's comparison (README.md): the all-reduce time per outer step of the real and
simulated runs, side by side. Not a metrics library: the run metrics are analysis/'s
(`meridian plot`, `meridian report`, summary.json), which also merges a real run's per-node
streams onto one clock. This script only needs each node's own durations, so it reads the
node streams as they are.

  compare.py step-time REAL_DIR          mean inner-step seconds of the real run (for the sim)
  compare.py table OUT_PREFIX LABEL REAL_DIR SIM_DIR [LABEL REAL_DIR SIM_DIR ...]
                                         OUT_PREFIX.md / .csv / .dat (per outer step, per run)

A run folder holds events.jsonl (a simulation) or node-<ID>/events.jsonl, one per process (a
real run), or those node folders packed in raw.tar.xz (a committed real run).
"""
import glob
import json
import os
import statistics
import sys
import tarfile


def parse(lines):
    return [json.loads(line) for line in lines if line.strip()]


def read(path):
    with open(path) as f:
        return parse(f)


def records(run_dir):
    """Every record of the run: its events.jsonl, or all its nodes' streams one after another."""
    single = os.path.join(run_dir, "events.jsonl")
    if os.path.exists(single):
        return read(single)
    files = sorted(glob.glob(os.path.join(run_dir, "node-*", "events.jsonl")))
    if files:
        return [r for path in files for r in read(path)]
    raw = os.path.join(run_dir, "raw.tar.xz")
    if os.path.exists(raw):
        with tarfile.open(raw) as tar:
            names = sorted(n for n in tar.getnames()
                           if n.startswith("node-") and n.endswith("/events.jsonl"))
            if names:
                return [r for n in names
                        for r in parse(tar.extractfile(n).read().decode().splitlines())]
    sys.exit(f"compare.py: {run_dir} has neither events.jsonl, node-*/events.jsonl nor a "
             "raw.tar.xz holding them")


def inner_step_s(run_dir):
    rs = [r for r in records(run_dir) if r["type"] == "inner_steps"]
    return sum(r["compute_s"] for r in rs) / sum(r["steps"] for r in rs)


def per_step(run_dir):
    """outer step -> {max, min, mean} of the nodes' outer_step.allreduce_s, and bytes sent."""
    steps = {}
    for r in records(run_dir):
        if r["type"] == "outer_step":
            steps.setdefault(r["outer_step"], {"ar": [], "bytes": 0})["ar"].append(r["allreduce_s"])
        elif r["type"] == "allreduce":
            steps.setdefault(r["outer_step"], {"ar": [], "bytes": 0})["bytes"] += r["bytes_sent"]
    out = {}
    for k, v in sorted(steps.items()):
        if v["ar"]:
            out[k] = {"max": max(v["ar"]), "min": min(v["ar"]), "mean": statistics.mean(v["ar"]),
                      "nodes": len(v["ar"]), "bytes_per_node": v["bytes"] / len(v["ar"])}
    return out


def table(prefix, triples):
    md = ["| run | outer step | real: slowest node (s) | real: fastest node (s) | "
          "sim: slowest node (s) | sim: fastest node (s) | sim / real (slowest) | "
          "bytes sent per node, real / sim (MB) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    csv = ["run,outer_step,real_max_s,real_min_s,sim_max_s,sim_min_s,ratio_max,"
           "real_bytes_per_node,sim_bytes_per_node"]
    dat = []
    summary = []
    for label, real_dir, sim_dir in triples:
        real, sim = per_step(real_dir), per_step(sim_dir)
        rows = []
        for k in sorted(set(real) & set(sim)):
            a, b = real[k], sim[k]
            ratio = b["max"] / a["max"]
            rows.append((k, a, b, ratio))
            md.append(f"| {label} | {k} | {a['max']:.3f} | {a['min']:.3f} | {b['max']:.3f} | "
                      f"{b['min']:.3f} | {ratio:.3f} | {a['bytes_per_node'] / 1e6:.2f} / "
                      f"{b['bytes_per_node'] / 1e6:.2f} |")
            csv.append(f"{label},{k},{a['max']:.6f},{a['min']:.6f},{b['max']:.6f},{b['min']:.6f},"
                       f"{ratio:.6f},{a['bytes_per_node']:.0f},{b['bytes_per_node']:.0f}")
        dat.append(f"# {label}: outer_step real_max real_min sim_max sim_min")
        dat += [f"{k} {a['max']:.6f} {a['min']:.6f} {b['max']:.6f} {b['min']:.6f}"
                for k, a, b, _ in rows]
        dat += ["", ""]
        if rows:
            rm = statistics.mean(a["max"] for _, a, _, _ in rows)
            rn = statistics.mean(a["min"] for _, a, _, _ in rows)
            sm = statistics.mean(b["max"] for _, _, b, _ in rows)
            summary.append((label, len(rows), rm, rn, sm, (sm - rm) / rm, (sm - rn) / rn))
    md += ["", "| run | outer steps | real mean, slowest node (s) | real mean, fastest node (s) | "
           "sim mean (s) | sim vs real slowest | sim vs real fastest |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {l} | {n} | {rm:.3f} | {rn:.3f} | {sm:.3f} | {dm * 100:+.1f} % | {dn * 100:+.1f} % |"
           for l, n, rm, rn, sm, dm, dn in summary]
    for ext, lines in ((".md", md), (".csv", csv), (".dat", dat)):
        with open(prefix + ext, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n".join(md))


def main(argv):
    if len(argv) >= 2 and argv[0] == "step-time":
        print(f"{inner_step_s(argv[1]):.6f}")
    elif len(argv) >= 5 and argv[0] == "table" and (len(argv) - 2) % 3 == 0:
        table(argv[1], [tuple(argv[i:i + 3]) for i in range(2, len(argv), 3)])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
