#!/usr/bin/env python3
"""results/variants/ensembles/*/ensemble.json -> summary.json and table.md (run.sh calls it).

Per scenario and variant: compute utilization and outer-step utilization (median and 90 %
interval over the seeds), the sync a node waited per outer step, and the collective bytes per
second per node (mean, peak); per variant, the smallest access bandwidth of the sweep at which
every seed's compute utilization reaches 99 %."""
import json
import pathlib
import sys

here = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                    pathlib.Path(__file__).resolve().parents[3] / "results" / "variants")
ens = here / "ensembles"
SCENARIOS = ["usa", "useu", "global", "full"]
ALL_VARIANTS = ["none", "delayed", "eager", "stream4", "stream16", "stream4-fp4", "topk",
                "topk-delayed", "stream4-topk"]
LABEL = {"none": "blocking", "delayed": "delayed", "eager": "eager",
         "stream4": "streaming P=4 (int8)", "stream16": "streaming P=16 (int8)",
         "stream4-fp4": "streaming P=4 (fp4)", "topk": "sparse top-k 2 %, 2 bits",
         "topk-delayed": "sparse top-k 2 %, 2 bits, delayed",
         "stream4-topk": "sparse top-k 2 %, 2 bits, streaming P=4"}


def holds(v):
    """Whether this folder's ensembles hold variant v (a scenario's or a sweep point's)."""
    if any((ens / f"{s}-{v}").exists() for s in SCENARIOS):
        return True
    for p in ens.glob(f"bandwidth-{v}-*"):
        try:
            float(p.name[len(f"bandwidth-{v}-"):])
            return True
        except ValueError:  # another variant's, whose name extends this one's
            pass
    return False


# The variants this folder's ensembles hold, in the study's order.
VARIANTS = [v for v in ALL_VARIANTS if holds(v)]


def load(name):
    p = ens / name / "ensemble.json"
    return json.loads(p.read_text()) if p.exists() else None


def fig(e, key):
    m = e["metrics"].get(key)
    if not m:
        return None
    return {k: m[k] for k in ("median", "p5", "p95", "min", "max")}


summary = {"scenarios": {}, "bandwidth_sweep": {}}
for s in SCENARIOS:
    for v in VARIANTS:
        e = load(f"{s}-{v}")
        if not e:
            continue
        summary["scenarios"].setdefault(s, {})[v] = {
            "seeds": e["seeds"] if isinstance(e["seeds"], int) else len(e["seeds"]),
            "compute_utilization": fig(e, "compute_utilization"),
            "outer_step_utilization": fig(e, "outer_step_utilization"),
            "sync_s_per_outer_step": fig(e, "sync_s_per_outer_step"),
            "bytes_per_s_mean": fig(e, "bytes_per_s_mean"),
            "bytes_per_s_peak": fig(e, "bytes_per_s_peak"),
            "allreduce_s_p50": fig(e, "allreduce_s_p50"),
        }
bandwidths = sorted({float(p.name.split("-")[-1]) for p in ens.glob("bandwidth-*")})
for v in VARIANTS:
    rows = []
    for b in bandwidths:
        e = load(f"bandwidth-{v}-{b:g}")
        if e:
            u = e["metrics"]["compute_utilization"]
            rows.append({"gbps": b, "compute_utilization_min": u["min"],
                         "compute_utilization_median": u["median"]})
    needed = next((r["gbps"] for r in rows if r["compute_utilization_min"] >= 0.99), None)
    summary["bandwidth_sweep"][v] = {"rows": rows, "needed_gbps_for_99pct": needed}
(here / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def pct(f):
    return "n/a" if not f else f"{100 * f['median']:.1f} % ({100 * f['p5']:.1f}–{100 * f['p95']:.1f})"


def sec(f):
    return "n/a" if not f else f"{f['median']:.1f}"


def rate(f):
    return "n/a" if not f else f"{8 * f['median'] / 1e6:.0f}"


lines = ["| scenario | variant | compute utilization, median (90 % interval) | outer-step utilization "
         "| sync waited per outer step (s) | all-reduce p50 (s) | Mb/s per node, mean | Mb/s, peak |",
         "|---|---|---|---|---|---|---|---|"]
for s, by in summary["scenarios"].items():
    for v, r in by.items():
        lines.append(f"| intellect1-{s} | {LABEL[v]} | {pct(r['compute_utilization'])} | "
                     f"{pct(r['outer_step_utilization'])} | {sec(r['sync_s_per_outer_step'])} | "
                     f"{sec(r['allreduce_s_p50'])} | {rate(r['bytes_per_s_mean'])} | "
                     f"{rate(r['bytes_per_s_peak'])} |")
lines += ["", "| access bandwidth (Gb/s, every node) | " +
          " | ".join(LABEL[v] for v in VARIANTS) + " |", "|---" * (1 + len(VARIANTS)) + "|"]
for i, b in enumerate(bandwidths):
    cells = []
    for v in VARIANTS:
        rows = summary["bandwidth_sweep"][v]["rows"]
        cells.append(f"{100 * rows[i]['compute_utilization_min']:.1f} %" if i < len(rows) else "n/a")
    lines.append(f"| {b:g} | " + " | ".join(cells) + " |")
def needed(v):
    sweep = summary["bandwidth_sweep"][v]
    if not sweep["rows"]:
        return "n/a"
    return str(sweep["needed_gbps_for_99pct"] or f"> {sweep['rows'][-1]['gbps']:g}")


lines.append("| needed for 99 % | " + " | ".join(needed(v) for v in VARIANTS) + " |")
(here / "table.md").write_text("\n".join(lines) + "\n")
print((here / "table.md").read_text())
