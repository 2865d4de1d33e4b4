#!/usr/bin/env bash
# The grid's explanation under test: is the gap at loss 1e-3 the bucket's transient, or the
# response functions themselves? Two nodes on two sites (one WAN connection each way) exchange a
# 128 MiB bucket: each connection carries 64 MiB twice (~93,000 segments, ~93 losses at 1e-3), far
# longer than the grid's 16 MiB bucket. ns-3's goodput against `meridian sim-flow` for the same
# two messages, one seed. Same TCP settings as config.yaml.
#
#   scripts/studies/fidelity/ns3/steady.sh [BUILD_DIR=build]   -> steady.csv, steady.md
set -euo pipefail
cd "$(dirname "$0")/../../../../results/fidelity/ns3"
build=$(cd ../../.. && realpath "${1:-build}")
bytes=134217728   # the bucket; each step's message is half of it
gbps_payload=0.96405   # 1 Gb/s line rate carrying 1448 of every 1502 bytes (compare.py)
{
  echo "rtt_ms,loss,cc,ns3_goodput_mbit,meridian_goodput_mbit,meridian_bound_mbit,rel_error,ns3_wan_losses"
  for rtt in 20 100 250; do
    for cc in cubic reno; do
      loss=1e-3
      n=$("$build/bench/ns3_ring_bucket" --nodes 2 --sites 2 --bucket-bytes $bytes --rtt-ms $rtt \
            --loss $loss --cc $cc --seed 1 --stop-s 3600)
      m=$("$build/bin/meridian" sim-flow --rtt-ms $rtt --loss $loss --cc $cc --bytes $((bytes / 2)) \
            --messages 2 --bandwidth-mbit $(python3 -c "print($gbps_payload * 1000)"))
      python3 - "$n" "$m" $rtt $loss $cc $bytes <<'PY'
import json, sys
n, m = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rtt, loss, cc, total = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
# Each connection carries the whole bucket (two messages of half of it); the later node's
# completion ends both.
ns3 = total * 8 / n["bucket_s"] / 1e6 if n["complete"] else float("nan")
mer = m["goodput_mbit_per_s"]
print(f"{rtt},{loss},{cc},{ns3:.3f},{mer:.3f},{m['rate_bound_mbit_per_s']:.3f},"
      f"{mer / ns3 - 1:.4f},{n['wan_packets_lost']}")
PY
    done
  done
} > steady.csv
python3 - <<'PY'
import csv
rows = list(csv.DictReader(open("steady.csv")))
out = ["| WAN RTT (ms) | loss | cc | ns-3 goodput (Mbit/s) | Meridian (Mbit/s) | response function (Mbit/s) | Meridian vs ns-3 | ns-3 WAN losses |",
       "|---:|---:|---|---:|---:|---:|---:|---:|"]
for r in rows:
    out.append(f"| {r['rtt_ms']} | {r['loss']} | {r['cc']} | {float(r['ns3_goodput_mbit']):.2f} | "
               f"{float(r['meridian_goodput_mbit']):.2f} | {float(r['meridian_bound_mbit']):.2f} | "
               f"{100 * float(r['rel_error']):+.1f} % | {r['ns3_wan_losses']} |")
open("steady.md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
