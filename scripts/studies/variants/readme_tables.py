#!/usr/bin/env python3
"""Writes the generated tables of results/variants/README.md from the study's outputs, leaving
its prose alone: (a) the utilization table and the access-bandwidth table (table.md, written by
summarize.py), (b) the convergence table (convergence.json, written by convergence.sh) and (c)
the GPU-hours table (convergence.json with the compute utilization on intellect1-global of
summary.json). Each table replaces the block of
table lines in README.md that starts with the same header line.

usage: readme_tables.py [--check] [FOLDER]   (FOLDER: results/variants, the default)
--check: change nothing; exit 1 when README.md's tables differ from what the outputs give."""
import json
import pathlib
import statistics
import sys

TARGET = 4.6  # the validation loss the study times (README.md, "(b)")
# convergence.json key -> (variant, outer optimizer), in the table's order.
ROWS = [("none", "blocking", "Nesterov lr 0.7, μ 0.9"),
        ("delayed", "delayed", "Nesterov lr 0.7, μ 0.9"),
        ("eager", "eager", "Nesterov lr 0.7, μ 0.9"),
        ("stream4", "streaming P=4", "Nesterov lr 0.7, μ 0.9"),
        ("none_diloco.outer_momentum_0", "blocking", "SGD lr 0.7, μ 0"),
        ("delayed_diloco.outer_momentum_0", "delayed", "SGD lr 0.7, μ 0"),
        ("eager_diloco.outer_momentum_0", "eager", "SGD lr 0.7, μ 0"),
        ("stream4_diloco.outer_momentum_0", "streaming P=4", "SGD lr 0.7, μ 0"),
        ("topk", "sparse top-k 2 %, 2 bits", "SGD lr 0.7, μ 0, error feedback β 0.95"),
        ("topk-delayed", "sparse top-k 2 %, 2 bits, delayed",
         "SGD lr 0.7, μ 0, error feedback β 0.95"),
        ("stream4-topk", "sparse top-k 2 %, 2 bits, streaming P=4",
         "SGD lr 0.7, μ 0, error feedback β 0.95")]
# The utilization study's variant for a convergence key's first part.
UTIL_OF = {"none": "none", "delayed": "delayed", "eager": "eager",
           "stream4": "stream4", "topk": "topk", "topk-delayed": "topk-delayed",
           "stream4-topk": "stream4-topk"}


def fmt(x, digits=3):
    return "not reached" if x is None else f"{x:.{digits}f}"


def convergence_tables(conv, summary):
    def utilization(variant):
        return summary["scenarios"]["global"][variant]["compute_utilization"]["median"]

    lines = ["| variant | outer optimizer | seeds | final validation loss (per seed) | mean | "
             f"outer step reaching {TARGET} (per seed) | time to {TARGET}, usa clock (emulated s, "
             "per seed) | emulated run (s) |",
             "|---|---|---|---|---|---|---|---|"]
    gpu = {}
    for key, label, optimizer in ROWS:
        study = conv.get(key)
        if not study:
            continue
        runs = [study["runs"][str(s)] for s in study["seeds"]]
        steps = [r.get("target_outer_step") for r in runs]
        lines.append(
            f"| {label} | {optimizer} | {len(runs)} | {', '.join(fmt(r['val_loss']) for r in runs)} "
            f"| {study['val_loss_mean']:.3f} | "
            f"{', '.join('not reached' if x is None else str(x) for x in steps)} | "
            f"{', '.join(fmt(r['time_to_target_s'], 1) for r in runs)} | "
            f"{', '.join('%.0f' % r['simulated_s'] for r in runs)} |")
        # (c) needs the variant's utilization in (a); one not measured there is left out of it.
        variant = UTIL_OF[key.split("_")[0]]
        if all(x is not None for x in steps) and variant in summary["scenarios"]["global"]:
            u = utilization(variant)
            mean_steps = statistics.mean(steps)
            gpu[(label, optimizer)] = (mean_steps, u, mean_steps / u, study["val_loss_mean"])
    gpu_lines = [f"| variant | outer optimizer | outer steps to {TARGET} (mean) | compute "
                 f"utilization, intellect1-global | GPU-hours to {TARGET}, relative | final loss "
                 "at 6,000 inner steps |",
                 "|---|---|---|---|---|---|"]
    reference = gpu[(ROWS[0][1], ROWS[0][2])][2]
    for (label, optimizer), (steps, u, hours, loss) in sorted(gpu.items(), key=lambda kv: kv[1][2]):
        gpu_lines.append(f"| {label} | {optimizer} | {steps:.1f} | {100 * u:.1f} % | "
                         f"{hours / reference:.2f} | {loss:.3f} |")
    return "\n".join(lines), "\n".join(gpu_lines)


def replace_table(readme, table):
    """The block of '|' lines in readme that starts with table's header line, replaced."""
    lines = readme.split("\n")
    header = table.split("\n")[0]
    starts = [i for i, line in enumerate(lines) if line == header]
    if len(starts) != 1:
        sys.exit(f"readme_tables.py: README.md has {len(starts)} tables headed '{header[:60]}...', "
                 "expected 1")
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:starts[0]] + table.split("\n") + lines[end:])


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    here = pathlib.Path(args[0] if args else
                        pathlib.Path(__file__).resolve().parents[3] / "results" / "variants")
    tables = (here / "table.md").read_text().strip().split("\n\n")
    conv = json.loads((here / "convergence.json").read_text())
    summary = json.loads((here / "summary.json").read_text())
    readme_path = here / "README.md"
    readme = readme_path.read_text()
    updated = readme
    for table in [tables[0], tables[1], *convergence_tables(conv, summary)]:
        updated = replace_table(updated, table)
    if "--check" in sys.argv[1:]:
        if updated != readme:
            sys.exit("readme_tables.py: README.md's tables differ from the study's outputs")
        return
    readme_path.write_text(updated)


if __name__ == "__main__":
    main()
