#!/usr/bin/env python3
"""Reads ensembles of `meridian sim --seeds` (one folder each) and prints, per ensemble, the
figures a prediction states: for each per-run figure (the all-reduce p5, p25, p50, p75, p95 of
that run's outer steps, its within-run IQR, its outer-step utilization) the median over the
seeds and the 5th-95th percentile across them (numpy's default interpolation, as summary.h)."""
import json
import pathlib
import sys


def percentile(values, p):
    x = sorted(values)
    h = (len(x) - 1) * p
    lo = int(h)
    return x[lo] + (h - lo) * (x[min(lo + 1, len(x) - 1)] - x[lo])


def figures(summary):
    a = summary["allreduce_s"]
    out = {f"allreduce_s_{q}": a[q] for q in ("p5", "p25", "p50", "p75", "p95")}
    out["allreduce_s_iqr"] = a["p75"] - a["p25"]
    out["outer_step_utilization"] = summary["outer_step_utilization"]
    out["compute_utilization"] = summary["compute_utilization"]
    return out


result = {}
for folder in sys.argv[1:]:
    runs = sorted(pathlib.Path(folder).glob("seed-*/summary.json"))
    per_run = [figures(json.loads(r.read_text())) for r in runs]
    result[pathlib.Path(folder).name] = {
        "seeds": len(per_run),
        "figures": {
            k: {"median": percentile([f[k] for f in per_run], 0.5),
                "p5": percentile([f[k] for f in per_run], 0.05),
                "p95": percentile([f[k] for f in per_run], 0.95)}
            for k in per_run[0]
        },
    }
json.dump(result, sys.stdout, indent=2)
print()
