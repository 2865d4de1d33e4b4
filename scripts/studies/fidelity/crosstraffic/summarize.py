#!/usr/bin/env python3
"""summary.json of the crosstraffic measurement (run.sh): per codec, the all-reduce time per outer
step of the real run (slowest and fastest node) and of the two simulations (crosstraffic on and
off), their means, each simulation against the real run, and the real / simulated ratio that
remains.

  summarize.py LABEL REAL_DIR SIM_TRUE_DIR SIM_FALSE_DIR [LABEL ...] > summary.json

Also prints one line per label to stderr.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compare  # noqa: E402  (scripts/studies/fidelity/compare.py: the per-step reading of both worlds)


def machine(real_dir):
    path = os.path.join(real_dir, "machine.txt")
    return open(path).read().strip().splitlines() if os.path.exists(path) else []


def summary(real_dir, sim_on, sim_off):
    real = compare.per_step(real_dir)
    on, off = compare.per_step(sim_on), compare.per_step(sim_off)
    steps = sorted(real)
    mean = lambda d, k="max": statistics.mean(d[s][k] for s in steps)  # noqa: E731
    out = {
        "real_command": open(os.path.join(real_dir, "command.txt")).read().strip(),
        "real_machine": machine(real_dir),
        "bytes_sent_per_node": {"real": real[steps[0]]["bytes_per_node"],
                                "sim": on[steps[0]]["bytes_per_node"]},
        "per_outer_step": [
            {"outer_step": s, "real_slowest_s": real[s]["max"], "real_fastest_s": real[s]["min"],
             "sim_crosstraffic_true_s": on[s]["max"], "sim_crosstraffic_false_s": off[s]["max"]}
            for s in steps],
        "real_s": mean(real), "real_fastest_s": mean(real, "min"),
        "sim_crosstraffic_true_s": mean(on), "sim_crosstraffic_false_s": mean(off),
    }
    out["sim_true_vs_real"] = out["sim_crosstraffic_true_s"] / out["real_s"] - 1
    out["sim_false_vs_real"] = out["sim_crosstraffic_false_s"] / out["real_s"] - 1
    out["real_over_sim_false"] = out["real_s"] / out["sim_crosstraffic_false_s"]
    return out


def main(args):
    if not args or len(args) % 4:
        sys.exit(__doc__)
    runs = {args[i]: summary(*args[i + 1:i + 4]) for i in range(0, len(args), 4)}
    json.dump({
        "what": "all-reduce per outer step (outer_step.allreduce_s), mean over outer steps of the "
                "slowest node; two sites of two nodes, 100 Mbit/s, RTT 1 ms within and 100 ms "
                "across (crosstraffic/README.md)",
        "runs": runs,
    }, sys.stdout, indent=1)
    print()
    for label, r in runs.items():
        print(f"{label}: real {r['real_s']:.3f} s; simulated, crosstraffic on "
              f"{r['sim_crosstraffic_true_s']:.3f} s ({r['sim_true_vs_real']:+.1%}), off "
              f"{r['sim_crosstraffic_false_s']:.3f} s ({r['sim_false_vs_real']:+.1%})",
              file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
