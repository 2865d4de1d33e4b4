#!/usr/bin/env bash
# Validation (b) of issue 18: one bucket of a 4- and 6-node ring all-reduce over LAN and lossy WAN
# hops, `meridian sim` against ns-3 3.37's packet-level TCP (bench/ns3/ring_bucket_ns3.cc), over
# config.yaml's grid. Needs the targets meridian and ns3_ring_bucket (libns3-dev). About 10 min of
# CPU here, almost all of it ns-3.
#
#   scripts/studies/fidelity/ns3/run.sh [BUILD_DIR=build]   -> comparison.csv, comparison.md, summary.json,
#                                                      meridian.jsonl, ns3.jsonl
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$scripts/../../../../results/fidelity/ns3"
build=$(cd ../../.. && realpath "${1:-build}")
exec python3 "$scripts/compare.py" --build "$build"
