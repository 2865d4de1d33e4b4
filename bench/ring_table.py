#!/usr/bin/env python3
"""Turns ring_bench's JSON output (--benchmark_out=FILE --benchmark_out_format=json, with
--benchmark_repetitions) into the Markdown table of results/bench/ring.md: one row per
(codec, ranks, size), median over repetitions. Not a plotting tool."""
import json
import sys

CODECS = {0: "fp32", 1: "bf16", 2: "int8", 3: "int8-minmax", 4: "fp4"}


def main(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    rows = []
    for b in runs:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        parts = dict(p.split(":") for p in b["run_name"].split("/")[1:] if ":" in p)
        rows.append((int(parts["codec"]), int(parts["ranks"]), int(parts["MiB"]),
                     b["real_time"], b["algbw_GBps"], b["busbw_GBps"], b["wire_MB_per_rank"]))
    rows.sort()
    print("| codec | ranks | size (MiB) | time (ms) | algbw (GB/s) | busbw (GB/s) | wire MB / rank |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for codec, ranks, mib, ms, alg, bus, wire in rows:
        print(f"| {CODECS.get(codec, codec)} | {ranks} | {mib} | {ms:.1f} | {alg:.3f} | {bus:.3f} "
              f"| {wire:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
