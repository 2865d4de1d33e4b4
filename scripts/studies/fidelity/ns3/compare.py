#!/usr/bin/env python3
"""Validation (b) of issue 18: one ring all-reduce bucket, `meridian sim` against ns-3.

For every cell of config.yaml's grid (nodes x WAN RTT x loss x congestion control) this runs the
Meridian scenario (scenario.yaml filled in for the cell) and then ns3_ring_bucket on the same
topology, TCP settings and per-node start times, once per seed, and writes comparison.csv,
comparison.md, summary.json and the raw outputs (meridian.jsonl, ns3.jsonl). It compares only:
no Meridian parameter is set from an ns-3 result.

Usage: compare.py --build BUILD_DIR [--work DIR] [--only N,RTT,LOSS,CC]
"""
import argparse
import copy
import csv
import json
import os
import statistics
import subprocess
import sys

import yaml

# The study's folder (config.yaml in, the comparison out): results/fidelity/ns3.
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "results",
                    "fidelity", "ns3")

# ns-3's point-to-point links clock out whole frames: 1448 bytes of payload travel in a 1500-byte
# IP packet (20 IP + 20 TCP + 12 timestamp option) plus a 2-byte PPP header. Meridian's access
# bandwidth is what the payload gets (goodput; results/fidelity/skyplane/README.md), so the same
# physical link is B * 1448 / 1502 there. A unit conversion, not a fit.
PAYLOAD_PER_FRAME = 1448 / 1502


def cell_scenario(base, cfg, nodes, rtt_ms, loss, cc):
    sites = nodes // 2
    sc = copy.deepcopy(base)
    names = [f"s{i}" for i in range(sites)]
    src = "results/fidelity/ns3/config.yaml (the cross-check's grid)"
    net = sc["network"]
    net["sites"] = [{"name": n, "region": f"ns-3 cross-check site {n}"} for n in names]
    net["rtt"] = [{"a": a, "b": b, "ms": rtt_ms, "source": src}
                  for i, a in enumerate(names) for b in names[i + 1:]]
    if loss > 0:
        net["paths"] = [{"a": a, "b": b, "loss": loss, "source": src}
                        for i, a in enumerate(names) for b in names[i + 1:]]
    net["intra_site_rtt_ms"] = cfg["lan_rtt_ms"]
    gbps = cfg["access_mbit"] / 1000 * PAYLOAD_PER_FRAME
    net["nodes"] = [{"site": n, "count": 2, "bandwidth_gbps": gbps} for n in names]
    tcp = cfg["tcp"]
    net["tcp"] = {"cc": cc, "mss_bytes": tcp["mss_bytes"],
                  "initial_window_segments": tcp["initial_window_segments"],
                  "rto_min_ms": tcp["rto_min_ms"]}
    net["tcp_gamma_bytes"] = tcp["window_bytes"]
    return sc


def run_meridian(meridian, scenario, workdir):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "scenario.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(scenario, f, sort_keys=False)
    out = os.path.join(workdir, "sim")
    subprocess.run([meridian, "sim", path, "--out", out, "--force"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = [json.loads(l) for l in open(os.path.join(out, "events.jsonl"))]
    ar = sorted((e for e in events if e["type"] == "allreduce"), key=lambda e: e["node"])
    if len(ar) != scenario_nodes(scenario) or any(e["attempt"] != 0 for e in ar):
        sys.exit(f"{workdir}: expected one first-attempt allreduce per node, got {len(ar)}")
    return ar


def scenario_nodes(sc):
    return sum(g["count"] for g in sc["network"]["nodes"])


def run_ns3(binary, cfg, nodes, rtt_ms, loss, cc, starts, seed, cache_dir):
    """One ns-3 run; its JSON, kept in cache_dir under its exact arguments (reruns skip it)."""
    tcp, ns3 = cfg["tcp"], cfg["ns3"]
    args = [binary, f"--nodes={nodes}", f"--sites={nodes // 2}",
            f"--bucket-bytes={4 * cfg['bucket_elements']}", f"--header-bytes={cfg['header_bytes']}",
            f"--access-mbit={cfg['access_mbit']}", f"--wan-mbit={cfg['wan_mbit']}",
            f"--rtt-ms={rtt_ms}", f"--lan-rtt-ms={cfg['lan_rtt_ms']}", f"--loss={loss}",
            f"--cc={cc}", f"--seed={seed}", f"--mss-bytes={tcp['mss_bytes']}",
            f"--buffer-bytes={tcp['window_bytes']}",
            f"--initial-window={tcp['initial_window_segments']}",
            f"--min-rto-ms={tcp['rto_min_ms']}", f"--delack-count={ns3['delack_count']}",
            f"--delack-timeout-ms={ns3['delack_timeout_ms']}",
            f"--hystart={'true' if ns3['hystart'] else 'false'}",
            f"--queue-packets={ns3['queue_packets']}", f"--stop-s={ns3['stop_s']}",
            "--start-s=" + ",".join(f"{s:.9f}" for s in starts)]
    cached = os.path.join(cache_dir, f"ns3-seed{seed}.json")
    if os.path.exists(cached):
        c = json.load(open(cached))
        if c.get("args") == args[1:]:
            return c["out"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode not in (0, 3):  # 3: the bucket did not finish by --stop-s
        sys.exit(f"{' '.join(args)}\nfailed ({r.returncode}): {r.stderr}")
    out = json.loads(r.stdout)
    json.dump({"args": args[1:], "out": out}, open(cached, "w"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, help="Meridian's build folder")
    ap.add_argument("--work", default=None, help="scratch folder (default BUILD/ns3-fidelity)")
    ap.add_argument("--only", default=None, help="one cell: NODES,RTT_MS,LOSS,CC")
    a = ap.parse_args()
    meridian = os.path.join(a.build, "bin", "meridian")
    ns3 = os.path.join(a.build, "bench", "ns3_ring_bucket")
    for exe in (meridian, ns3):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare.py: {exe} not found (build the targets meridian and "
                     "ns3_ring_bucket; the latter needs libns3-dev)")
    work = a.work or os.path.join(a.build, "ns3-fidelity")
    cfg = yaml.safe_load(open(os.path.join(HERE, "config.yaml")))
    base = yaml.safe_load(open(os.path.join(HERE, "scenario.yaml")))
    g = cfg["grid"]
    cells = [(n, r, l, c) for n in g["nodes"] for r in g["rtt_ms"] for l in g["loss"]
             for c in g["cc"]]
    if a.only:
        n, r, l, c = a.only.split(",")
        cells = [(int(n), float(r), float(l), c)]

    rows, meridian_raw, ns3_raw = [], [], []
    for n, rtt, loss, cc in cells:
        tag = f"n{n}-rtt{rtt:g}-loss{loss:g}-{cc}"
        ar = run_meridian(meridian, cell_scenario(base, cfg, n, rtt, loss, cc),
                          os.path.join(work, tag))
        origin = min(e["start_s"] for e in ar)
        starts = [e["start_s"] - origin for e in ar]
        m_done = [e["start_s"] + e["elapsed_s"] - origin for e in ar]
        m_bucket = max(m_done)
        meridian_raw.append({"cell": tag, "allreduce": ar})
        runs, stalled = [], []
        for seed in cfg["seeds"] if loss > 0 else cfg["seeds"][:1]:  # no loss: nothing random
            out = run_ns3(ns3, cfg, n, rtt, loss, cc, starts, seed, os.path.join(work, tag))
            ns3_raw.append({"cell": tag, **out})
            # A run that does not finish is an ns-3 failure, not a slow network: README.md,
            # "ns-3's stalls". It is counted and left out of the mean.
            (runs if out["complete"] else stalled).append(out)
        ns3_times = [o["bucket_s"] for o in runs]
        ns3_mean = statistics.mean(ns3_times)
        node_ns3 = [statistics.mean(o["nodes"][i]["done_s"] for o in runs) for i in range(n)]
        rows.append({
            "nodes": n, "rtt_ms": rtt, "loss": loss, "cc": cc,
            "meridian_s": round(m_bucket, 4),
            "ns3_mean_s": round(ns3_mean, 4),
            "ns3_min_s": round(min(ns3_times), 4), "ns3_max_s": round(max(ns3_times), 4),
            "ns3_runs": len(runs),
            "ns3_stalled_seeds": " ".join(str(o["config"]["seed"]) for o in stalled),
            "rel_error": round(m_bucket / ns3_mean - 1, 4),
            "node_max_abs_rel_error": round(max(abs(m / s - 1) for m, s in zip(m_done, node_ns3)), 4),
            "start_spread_s": round(max(starts), 4),
            "ns3_wan_losses_mean": statistics.mean(o["wan_packets_lost"] for o in runs),
            "ns3_fast_recoveries_mean": statistics.mean(o["fast_recoveries"] for o in runs),
            "ns3_timeouts_mean": statistics.mean(o["timeouts"] for o in runs),
        })
        r = rows[-1]
        print(f"{tag:28s} meridian {r['meridian_s']:8.3f} s  ns-3 {r['ns3_mean_s']:8.3f} s "
              f"[{r['ns3_min_s']:.3f}, {r['ns3_max_s']:.3f}]  {100 * r['rel_error']:+6.1f} %",
              flush=True)

    if a.only:
        return
    with open(os.path.join(HERE, "comparison.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(HERE, "meridian.jsonl"), "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in meridian_raw)
    with open(os.path.join(HERE, "ns3.jsonl"), "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in ns3_raw)
    md = ["| N | WAN RTT (ms) | loss | cc | Meridian (s) | ns-3 mean (s) | ns-3 range (s) | "
          "Meridian vs ns-3 | ns-3 runs | ns-3 WAN losses | ns-3 fast rec. / RTO |",
          "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['nodes']} | {r['rtt_ms']:g} | {r['loss']:g} | {r['cc']} | "
                  f"{r['meridian_s']:.3f} | {r['ns3_mean_s']:.3f} | "
                  f"{r['ns3_min_s']:.3f}–{r['ns3_max_s']:.3f} | {100 * r['rel_error']:+.1f} % | "
                  f"{r['ns3_runs']}{' (+' + str(len(r['ns3_stalled_seeds'].split())) + ' stalled)' if r['ns3_stalled_seeds'] else ''} | "
                  f"{r['ns3_wan_losses_mean']:.1f} | {r['ns3_fast_recoveries_mean']:.1f} / "
                  f"{r['ns3_timeouts_mean']:.1f} |")
    open(os.path.join(HERE, "comparison.md"), "w").write("\n".join(md) + "\n")

    def band(sel):
        errs = [r["rel_error"] for r in rows if sel(r)]
        return {"cells": len(errs), "within_15_percent": sum(abs(e) <= 0.15 for e in errs),
                "median_error": statistics.median(errs),
                "min_error": min(errs), "max_error": max(errs)} if errs else None
    summary = {"cells": len(rows), "all": band(lambda r: True),
               "by_loss": {f"{l:g}": band(lambda r, l=l: r["loss"] == l) for l in g["loss"]},
               "by_rtt_ms": {f"{t:g}": band(lambda r, t=t: r["rtt_ms"] == t) for t in g["rtt_ms"]},
               "by_cc": {c: band(lambda r, c=c: r["cc"] == c) for c in g["cc"]},
               "config": cfg}
    json.dump(summary, open(os.path.join(HERE, "summary.json"), "w"), indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))


if __name__ == "__main__":
    main()
