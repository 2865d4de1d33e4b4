#!/usr/bin/env python3
"""The convergence study's two last stages (scripts/studies/convergence/run.sh runs both).

  aggregate.py nodes NETWORK N
      The scenario's nodes list lines for N nodes on NETWORK's sites (usa or global): the sites
      the study emulates on and re-times on.

  aggregate.py timing MERIDIAN OUT
      Timing-only simulations (modelled workers with the `micro` model's shapes, its batch and
      the emulation's step time) of every emulated setting on intellect1-usa and
      intellect1-global: OUT/timing/<network>-<setting>/summary.json. The outer-step period
      they give re-times an emulated trajectory on that network: for synchronous DiLoCo without
      churn the parameters after outer step k do not depend on when the step happened, so the
      loss at step k is the emulated one and its time is the end of step 0 plus k steady periods
      (both from the timing run's outer_step records). The DP baseline's step is DiLoCo's
      outer step with H = 1 in fp32 (one all-reduce of the gradients per step); it evaluates
      every 200 steps.

  aggregate.py report MERIDIAN OUT RESULTS [TARGET]
      Per setting (N, codec, H; DP; churn): final validation loss over the seeds (mean, sample
      standard deviation, min..max), modelled time and tokens to the target validation loss
      (default: the runs' trainer.target_loss) on each network: the table on stdout and in
      OUT/study.md, the seed-mean curves in OUT/curves.dat; the figures (gnuplot, SVG) and
      every complete run's figures into RESULTS/summary.json. A setting with fewer than
      SEEDS complete seeds is marked incomplete in the table ("k of 3").
"""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

NETWORKS = {
    # nodes per N: intellect1-usa's and intellect1-global's sites (the study's N nodes).
    "usa": {
        1: [("us-east", 1)],
        2: [("us-east", 1), ("us-west", 1)],
        4: [("us-east", 2), ("us-west", 1), ("us-nw", 1)],
        8: [("us-east", 3), ("us-west", 3), ("us-nw", 2)],
    },
    "global": {
        1: [("us-east", 1)],
        2: [("us-east", 1), ("eu-west", 1)],
        4: [("us-east", 1), ("us-west", 1), ("eu-west", 1), ("ap-tokyo", 1)],
        8: [("us-east", 2), ("us-west", 1), ("eu-west", 2), ("eu-cent", 1), ("ap-tokyo", 1),
            ("ap-seoul", 1)],
    },
}
# Run folders: nN-CODEC-HH[-VARIANT]-sSEED or dpN-sSEED. VARIANT: "global" (a churn run
# emulated on intellect1-global's sites instead of intellect1-usa's) or "olrX" (outer lr X).
RUN = re.compile(r"^(?:n(?P<n>\d+)-(?P<codec>fp32|int8|int8churn)-H(?P<h>\d+)"
                 r"(?:-(?P<variant>global|olr[0-9.]+))?|dp(?P<dpn>\d+))-s(?P<seed>\d+)$")
SEEDS = 3  # seeds per setting in the study's grid
DP_EVAL_EVERY = 200  # the DP runs evaluate every 200 steps (H = 200 with the identity outer step)


def runs(out):
    """{setting: {seed: summary}} of the complete runs in OUT; a setting is
    (kind, N, codec, H, variant)."""
    found = {}
    for name in sorted(os.listdir(out)):
        m = RUN.match(name)
        path = os.path.join(out, name, "summary.json")
        if not m or not os.path.isfile(path):
            continue
        s = json.load(open(path))
        if not s.get("complete") or not s.get("val_curve"):
            continue
        if m["dpn"]:
            key = ("dp", int(m["dpn"]), "fp32", 1, "")
        else:
            key = ("diloco", int(m["n"]), m["codec"], int(m["h"]), m["variant"] or "")
        found.setdefault(key, {})[int(m["seed"])] = s
    return found


def modelled_scenario(out, network, n, params):
    """A timing-only scenario: convergence-usa.yaml's network keys, the micro model's shapes."""
    return f"""run: {{name: timing-{network}-n{n}, seed: 0, outer_steps: 10}}
model: {{layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn: 192, vocab: 1024, seq_len: 64,
        tied_embeddings: false}}
hardware: {{step_time_s: 0.008}}
train: {{batch: 4}}
network:
  model: CM02
  tcp_gamma_bytes: 4194304
  crosstraffic: false
  tcp: {{cc: cubic, per_flow_cap_gbps: 5}}
  access_bandwidth_gbps: [0.5, 4.0]
  intra_site_rtt_ms: 1.0
  sites_from: intellect1-sites.yaml
  nodes:
{nodes(network, n)}
diloco: {{H: 50, codec: int8, buckets: layers, local_ranks: 1, checkpoint_s: 0, timeout_s: 60,
         dead_after_s: 6}}
"""


def timing_dir(out, network, n, codec, h):
    return os.path.join(out, "timing", f"{network}-n{n}-{codec}-H{h}")


def timing(meridian, out):
    sdir = os.path.join(out, "timing", "scenarios")
    os.makedirs(sdir, exist_ok=True)
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    shutil.copy(os.path.join(root, "scenarios", "intellect1-sites.yaml"), sdir)
    wanted = set()
    for kind, n, codec, h, _ in runs(out):
        if kind == "dp":
            wanted.add((n, "fp32", 1))
        elif codec != "int8churn":
            wanted.add((n, codec, h))
    for network in NETWORKS:
        for n, codec, h in sorted(wanted):
            d = timing_dir(out, network, n, codec, h)
            if os.path.isfile(os.path.join(d, "summary.json")):
                continue
            sc = os.path.join(sdir, f"{network}-n{n}.yaml")
            with open(sc, "w") as f:
                f.write(modelled_scenario(out, network, n, None))
            steps = 200 if h == 1 else 10
            # Message by message, as the emulation runs its rings: with buckets timed whole a
            # rank that is not the slowest returns up to one message late (netsim/README.md,
            # "Aggregation"), 1-2 % of these 2-second outer steps; at N <= 8 it costs little.
            subprocess.run(["nice", "-n", "10", meridian, "sim", sc, "--out", d,
                            "--set", f"diloco.H={h}", "--set", f"diloco.codec={codec}",
                            "--set", f"run.outer_steps={steps}", "--set", "diloco.aggregate=false"],
                           check=True, stdout=subprocess.DEVNULL)


def period(out, network, n, codec, h):
    """(offset, period): the modelled time from the run's start to the end of outer step 0 and
    the steady seconds per outer step after it, from the timing simulation's outer_step
    records (None if not simulated)."""
    path = os.path.join(timing_dir(out, network, n, codec, h), "events.jsonl")
    if not os.path.isfile(path):
        return None
    ends = {}
    for line in open(path):
        e = json.loads(line)
        if e.get("type") == "outer_step":
            ends[e["outer_step"]] = max(ends.get(e["outer_step"], 0.0), e["t"])
    last = max(ends)
    return ends[0], (ends[last] - ends[0]) / last


def emulated_on(key):
    """The network a run was emulated on."""
    return "global" if key[4] == "global" else "usa"


def curve_on(out, key, summary, network):
    """[(t_s, tokens, val_loss)] of one run on the network: emulated times for churn runs;
    re-timed (end of step 0 + k periods) otherwise (the outer lr does not change the timing).
    None when it cannot be re-timed (a churn run on another network than its own)."""
    kind, n, codec, h, _ = key
    pts = summary["val_curve"]
    if codec == "int8churn":
        if network != emulated_on(key):
            return None
        return [(p["t_s"], p["tokens"], p["val_loss"]) for p in pts]
    timing = period(out, network, n, "fp32", 1) if kind == "dp" else period(out, network, n, codec, h)
    if timing is None:
        return None
    offset, per = timing
    # DP: one evaluation every DP_EVAL_EVERY steps, each step an H = 1 outer step.
    steps_per_point = DP_EVAL_EVERY if kind == "dp" else 1
    return [(offset + ((p["outer_step"] + 1) * steps_per_point - 1) * per, p["tokens"], p["val_loss"])
            for p in pts]


def label(key):
    kind, n, codec, h, variant = key
    if kind == "dp":
        return f"DP N={n} (batch {4 * n})"
    if codec == "int8churn":
        return f"DiLoCo N={n} H={h} int8 + churn ({emulated_on(key)})"
    if variant.startswith("olr"):
        return f"DiLoCo N={n} H={h} {codec}, outer lr {variant[3:]}"
    return f"DiLoCo N={n} H={h} {codec}"


def nodes(network, n):
    """The scenario's nodes list lines for N nodes on NETWORK's sites."""
    if network not in NETWORKS or n not in NETWORKS[network]:
        sys.exit(f"convergence/aggregate.py: no site list for {n} nodes on '{network}' "
                 f"(networks: {', '.join(NETWORKS)}; N: 1, 2, 4, 8)")
    return "\n".join(f"    - {{site: {s}, count: {c}}}" for s, c in NETWORKS[network][n])


def first_crossing(curve, target):
    for t, tokens, loss in curve:
        if loss <= target:
            return t, tokens
    return None


def fmt_time(t):
    if t is None:
        return "not reached"
    if t >= 3600:
        return f"{t / 3600:.2f} h"
    if t >= 120:
        return f"{t / 60:.1f} min"
    return f"{t:.0f} s"


def kind_label(key):
    """The setting without its N: one colour in every N's panel."""
    if key[0] == "dp":
        return "DP (same total batch)"
    return re.sub(r"^DiLoCo N=\d+ ", "DiLoCo ", label(key))


def report(meridian, out, results, target=None):
    found = runs(out)
    if not found:
        sys.exit(f"convergence/aggregate.py: no complete runs in {out}")
    if target is None:
        target = next(iter(next(iter(found.values())).values()))["target"]["val_loss"]
    os.makedirs(results, exist_ok=True)
    codec_order = {"fp32": 0, "int8": 1, "int8churn": 2}
    order = sorted(found, key=lambda k: (k[1], k[0] != "dp", codec_order[k[2]], k[3], k[4]))
    rows, curves, checks = [], [], []
    for key in order:
        seeds = found[key]
        finals = [s["val_loss"] for s in seeds.values()]
        row = {"key": key, "setting": label(key), "seeds": len(seeds),
               "mean": statistics.mean(finals),
               "sd": statistics.stdev(finals) if len(finals) > 1 else None,
               "min": min(finals), "max": max(finals),
               "tokens": statistics.mean(s["tokens"] for s in seeds.values())}
        for network in NETWORKS:
            per_seed = [curve_on(out, key, s, network) for s in seeds.values()]
            if any(c is None for c in per_seed):
                row[network] = None
                continue
            hits = [first_crossing(c, target) for c in per_seed]
            reached = [h for h in hits if h]
            row[network] = {
                "time": statistics.mean(h[0] for h in reached) if len(reached) == len(hits) else None,
                "tokens": statistics.mean(h[1] for h in reached) if len(reached) == len(hits) else None,
                "reached": f"{len(reached)}/{len(hits)}",
                "end": statistics.mean(c[-1][0] for c in per_seed),
            }
            # The seeds' mean curve (all seeds evaluate at the same outer steps).
            m = min(len(c) for c in per_seed)
            curves.append((network, key, [
                (statistics.mean(c[i][0] for c in per_seed), statistics.mean(c[i][1] for c in per_seed),
                 statistics.mean(c[i][2] for c in per_seed)) for i in range(m)]))
        rows.append(row)
        # The re-timing check on usa: the emulated run's own end time against the re-timed one.
        if key[0] != "dp" and key[2] != "int8churn" and row["usa"]:
            emulated = statistics.mean(s["val_curve"][-1]["t_s"] for s in seeds.values())
            checks.append(f"| {label(key)} | {emulated:.1f} s | {row['usa']['end']:.1f} s | "
                          f"{100 * (row['usa']['end'] / emulated - 1):+.1f} % |")
    # One summary.json for the study: every complete run's figures (results/ keeps summaries;
    # the loss curves behind the figures are in the runs' own folders, rebuilt by
    # scripts/studies/convergence/run.sh).
    keep = ["mode", "seed", "scenario", "simulated_s", "outer_steps", "complete", "tokens",
            "compute_utilization", "loss", "val_loss", "target", "retries", "fallbacks",
            "failures", "joins"]
    per_run = {}
    for d in sorted(os.listdir(out)):
        p = os.path.join(out, d, "summary.json")
        if RUN.match(d) and os.path.isfile(p):
            with open(p) as f:
                s = json.load(f)
            if s.get("complete"):
                per_run[d] = {k: s.get(k) for k in keep}
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump({"study": "results/convergence/README.md", "runs": per_run}, f, indent=1,
                  sort_keys=True)

    lines = [f"Target validation loss: {target} nats/token. Final loss: mean ± sample standard "
             "deviation over the seeds [min, max]. Time to target: mean over seeds of the first "
             "evaluation at or below it, on the modelled clock (usa: intellect1-usa's network; "
             "global: intellect1-global's), when every seed reached it (k/n: seeds that did); "
             "end: the run's last evaluation. Churn runs are emulated on one network each and "
             f"not re-timed. Seeds \"k of {SEEDS}\": an incomplete point (the other seeds' "
             "runs have not finished), its spread not yet a seed spread.", "",
             "| setting | seeds | tokens | final val loss | usa: to target | usa: end | "
             "global: to target | global: end |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        cells = []
        for network in NETWORKS:
            x = r[network]
            if x is None:
                cells += ["not simulated", ""]
            else:
                to = fmt_time(x["time"]) if x["time"] is not None else (
                    "not reached" if x["reached"].startswith("0/") else "not by all")
                cells += [f"{to} ({x['reached']})", fmt_time(x["end"])]
        seeds = str(r["seeds"]) if r["seeds"] >= SEEDS else f"**{r['seeds']} of {SEEDS}**"
        final = (f"{r['mean']:.3f} (one seed)" if r["sd"] is None else
                 f"{r['mean']:.3f} ± {r['sd']:.3f} [{r['min']:.3f}, {r['max']:.3f}]")
        lines.append(f"| {r['setting']} | {seeds} | {r['tokens'] / 1e6:.1f} M | {final} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Re-timing check on usa (the networks the DiLoCo runs were emulated on): the "
              "emulated end against the re-timed one, seed means.", "",
              "| setting | emulated end | re-timed end | re-timed vs emulated |",
              "|---|--:|--:|--:|"] + checks
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "study.md"), "w") as f:
        f.write(table)
    print(table)

    # Figures: validation loss vs tokens (usa curves; tokens do not depend on the network) and
    # vs modelled time on each network, one panel per N; the outer-lr variants in a figure of
    # their own; the final loss against N.
    data = os.path.join(out, "curves.dat")
    index = {}
    with open(data, "w") as f:
        f.write("# t_s tokens val_loss (seed means), one block per network and setting\n")
        for i, (network, key, pts) in enumerate(curves):
            f.write(("\n\n" if i else "") + f"# {network} {label(key)}\n")
            for t, tokens, loss in pts:
                f.write(f"{t:.6g} {tokens:.6g} {loss:.6g}\n")
            index[(network, key)] = i
    kinds = []
    for key in order:
        if kind_label(key) not in kinds:
            kinds.append(kind_label(key))
    colors = ["#000000", "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00",
              "#f0e442", "#999999", "#882255", "#44aa99", "#aa4499", "#117733", "#661100",
              "#6699cc", "#888800"]

    def lines_of(network, keys, x, name=kind_label):
        parts = []
        for key in keys:
            if (network, key) in index:
                j = kinds.index(kind_label(key))
                dash = "dt 2" if "int8" in label(key) else "dt 1"
                parts.append(f"'{data}' index {index[(network, key)]} using {x}:3 with lines lw 2 "
                             f"{dash} lc rgb '{colors[j % len(colors)]}' title '{name(key)}'")
        parts.append(f"{target} with lines dt 3 lc rgb '#808080' title 'target {target}'")
        return "plot " + ", ".join(parts) + "\n"

    main_keys = [k for k in order if not k[4].startswith("olr")]

    def panels(network, ns, keys_at, x, xlabel, title, extra, name=kind_label):
        """One panel per N in `ns` with the curves of keys_at(N) on the network, stacked, aligned
        (the same margins; on the clock the same axis)."""
        out_ = (f"set terminal svg size 900,{360 * len(ns)} dynamic font 'sans,11'\n"
                f"set multiplot layout {len(ns)},1 title '{title}'\n{extra}"
                "set lmargin at screen 0.08\nset rmargin at screen 0.64\n"
                f"set xlabel '{xlabel}'\nset ylabel 'validation loss [nats/token]'\n")
        for n in ns:
            out_ += f"set title 'N = {n} nodes'\n"
            out_ += lines_of(network, keys_at(n), x, name)
        return out_ + "unset multiplot\n"

    def main_panels(network, x, xlabel, title, extra):
        ns = sorted({k[1] for k in main_keys if (network, k) in index})
        return panels(network, ns, lambda n: [k for k in main_keys if k[1] == n], x, xlabel,
                      title, extra)

    script = "set grid\nset key outside right top\nset yrange [*:6.5]\n"
    t_end = max(p[0] for _, _, pts in curves for p in pts)
    script += f"set output '{results}/loss_vs_tokens.svg'\n"
    script += main_panels("usa", "($2/1e6)", "tokens (all nodes) [millions]",
                          "Validation loss vs tokens", "set format x '%g'\n")
    for network in NETWORKS:
        script += f"set output '{results}/loss_vs_time_{network}.svg'\n"
        script += main_panels(network, 1, "modelled time [s] (log scale)",
                              f"Validation loss vs modelled time: intellect1-{network} network",
                              f"set format x '%g'\nset logscale x\nset xrange [1:{t_end * 1.5:g}]\n")
        script += "unset logscale x\nset xrange [*:*]\n"
    olr = [k for k in order if k[4].startswith("olr")]
    for h in sorted({k[3] for k in olr}):
        # The outer-lr variants at this H beside their N's DP and fp32 settings, a panel per N.
        script += f"set output '{results}/loss_vs_tokens_outer_lr_H{h}.svg'\n"
        script += panels(
            "usa", sorted({k[1] for k in olr if k[3] == h}),
            lambda n: [k for k in order if k[1] == n and not k[4] and k[2] == "fp32"] +
            [k for k in olr if k[1] == n and k[3] == h], "($2/1e6)",
            "tokens (all nodes) [millions]",
            f"Outer learning rate at H = {h} (fp32): validation loss vs tokens",
            "set format x '%g'\n",
            name=lambda k: label(k) + ("" if k[4] or k[0] == "dp" else ", outer lr 0.7"))
    # The final loss against N, per setting (mean ± sd over seeds; settings at one N only are
    # left out).
    trend = os.path.join(out, "final_vs_n.dat")
    with open(trend, "w") as f:
        f.write("# N mean sd (final validation loss), one block per setting\n")
        plotted = []
        for kl in kinds:
            pts = [r for r in rows if kind_label(r["key"]) == kl and not r["key"][4].startswith("olr")]
            if len({r["key"][1] for r in pts}) < 2:
                continue
            f.write(("\n\n" if plotted else "") + f"# {kl}\n")
            for r in sorted(pts, key=lambda r: r["key"][1]):
                f.write(f"{r['key'][1]} {r['mean']:.6g} {r['sd'] or 0:.6g}\n")
            plotted.append(kl)
    if plotted:
        parts = [f"'{trend}' index {i} using 1:2:3 with yerrorlines lw 2 "
                 f"{'dt 2' if 'int8' in kl else 'dt 1'} lc rgb '{colors[kinds.index(kl) % len(colors)]}' "
                 f"title '{kl}'" for i, kl in enumerate(plotted)]
        script += ("set terminal svg size 900,480 dynamic font 'sans,11'\n"
                   f"set output '{results}/final_loss_vs_n.svg'\nset yrange [*:*]\n"
                   "set lmargin\nset rmargin\n"
                   "set title 'Final validation loss against the number of nodes N'\n"
                   "set logscale x 2\nset xrange [1.8:9]\nset xtics (2, 4, 8)\nset format x '%g'\n"
                   "set xlabel 'N (nodes; 6,000 inner steps each)'\n"
                   "set ylabel 'final validation loss [nats/token]'\n"
                   "plot " + ", ".join(parts) + "\n")
    subprocess.run(["gnuplot"], input=script.encode(), check=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "nodes":
        if not sys.argv[3].isdigit():
            sys.exit(f"convergence/aggregate.py: N must be a node count, not '{sys.argv[3]}'")
        print(nodes(sys.argv[2], int(sys.argv[3])))
    elif len(sys.argv) >= 4 and sys.argv[1] == "timing":
        timing(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 5 and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4],
               float(sys.argv[5]) if len(sys.argv) > 5 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
