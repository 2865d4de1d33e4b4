#!/usr/bin/env python3
"""The fidelity loop's comparison (README.md): the blind prediction for the three-continent real
run (prediction.json, scripts/studies/prediction/summarize.py's form: per figure the median over the
ensemble's seeds of each run's own value) against that run's summary.json (`meridian report`
of the run folder), with the one-site run it was calibrated on beside it.

usage: compare.py PREDICTION_JSON REAL_1SITE_DIR REAL_3CONTINENTS_DIR OUT_DIR
Writes OUT_DIR/table.md and OUT_DIR/summary.json; prints the table. Goals (issue 32, item 5):
median all-reduce within 15 %, within-run IQR within 1.5x."""
import json
import pathlib
import sys


def real_figures(run_dir):
    s = json.loads((pathlib.Path(run_dir) / "summary.json").read_text())
    a = s["allreduce_s"]
    return {"p5": a["p5"], "p25": a["p25"], "p50": a["p50"], "p75": a["p75"], "p95": a["p95"],
            "iqr": a["p75"] - a["p25"], "outer_steps": s["outer_steps"],
            "outer_step_utilization": s["outer_step_utilization"]}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    pred_file, real1_dir, real3_dir, out = sys.argv[1:]
    (name, pred), = json.loads(pathlib.Path(pred_file).read_text()).items()
    f = pred["figures"]
    predicted = {q: f[f"allreduce_s_{q}"]["median"] for q in ("p5", "p25", "p50", "p75", "p95")}
    predicted["iqr"] = f["allreduce_s_iqr"]["median"]
    predicted["iqr_p5"], predicted["iqr_p95"] = f["allreduce_s_iqr"]["p5"], f["allreduce_s_iqr"]["p95"]
    predicted["p50_p5"], predicted["p50_p95"] = f["allreduce_s_p50"]["p5"], f["allreduce_s_p50"]["p95"]
    real1, real3 = real_figures(real1_dir), real_figures(real3_dir)
    median_error = predicted["p50"] / real3["p50"] - 1
    iqr_ratio = predicted["iqr"] / real3["iqr"] if real3["iqr"] > 0 else float("inf")
    result = {
        "prediction": predicted, "seeds": pred["seeds"],
        "real_3continents": real3, "real_1site": real1,
        "median_error": median_error, "iqr_ratio": iqr_ratio,
        "median_within_15_percent": abs(median_error) <= 0.15,
        "iqr_within_1_5x": 1 / 1.5 <= iqr_ratio <= 1.5,
    }
    rows = [("p5", "all-reduce p5 (s)"), ("p25", "all-reduce p25 (s)"), ("p50", "all-reduce median (s)"),
            ("p75", "all-reduce p75 (s)"), ("p95", "all-reduce p95 (s)"), ("iqr", "within-run IQR (s)")]
    lines = ["| figure | one site, real (calibrated on) | three continents, predicted "
             f"(median of {pred['seeds']} seeds) | three continents, real | predicted / real |",
             "|---|---:|---:|---:|---:|"]
    for key, label in rows:
        lines.append(f"| {label} | {real1[key]:.2f} | {predicted[key]:.2f} | {real3[key]:.2f} | "
                     f"{predicted[key] / real3[key]:.3f} |")
    lines.append("")
    lines.append(f"Median: {100 * median_error:+.1f} % (goal within 15 %: "
                 f"{'met' if result['median_within_15_percent'] else 'missed'}); within-run IQR: "
                 f"{iqr_ratio:.2f}x (goal within 1.5x: {'met' if result['iqr_within_1_5x'] else 'missed'}). "
                 f"Across the ensemble's seeds the predicted median ran {predicted['p50_p5']:.2f}-"
                 f"{predicted['p50_p95']:.2f} s and the IQR {predicted['iqr_p5']:.2f}-"
                 f"{predicted['iqr_p95']:.2f} s (p5-p95).")
    table = "\n".join(lines) + "\n"
    pathlib.Path(out, "table.md").write_text(table)
    pathlib.Path(out, "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table, end="")


if __name__ == "__main__":
    main()
