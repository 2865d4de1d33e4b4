#!/usr/bin/env bash
# The simulator's prediction for every cell of measured.csv (run.sh): `meridian sim-flow` with the
# harness's configuration and the kernel's settings (machine.txt), nothing fitted: 100 Mbit/s
# access links, the cell's RTT, loss, congestion control, bytes and connections, a 4 MiB window
# (tcp_wmem's maximum), MSS 1448, slow start after idle on (the kernel's default; each transfer
# is on new connections, so it starts from the initial window either way). Writes predicted.csv;
# table.py joins the two.
#
#   scripts/studies/fidelity/tcp-grid/predict.sh [BUILD_DIR=build]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
M=${1:-build}/bin/meridian
OUT=${OUT:-results/fidelity/tcp-grid}
echo "rtt_ms,loss,bytes,cc,flows,sim_seconds,sim_goodput_mbit_per_s,sim_rate_bound_mbit_per_s" \
  >"$OUT/predicted.csv"
tail -n +2 "$OUT/measured.csv" | cut -d, -f1-5 | sort -u -t, -k1,1n -k2,2g -k3,3n -k4,4 -k5,5n |
  while IFS=, read -r rtt loss bytes cc flows; do
    json=$("$M" sim-flow --rtt-ms "$rtt" --bandwidth-mbit 100 --loss "$loss" --cc "$cc" \
      --bytes "$bytes" --flows "$flows" --window-bytes 4194304 --mss-bytes 1448 \
      --slow-start-after-idle true)
    python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(",".join(sys.argv[2:] + [
      str(j["seconds"]), str(j["goodput_mbit_per_s"]),
      "" if j.get("rate_bound_mbit_per_s") is None else str(j["rate_bound_mbit_per_s"])]))' \
      "$json" "$rtt" "$loss" "$bytes" "$cc" "$flows"
  done >>"$OUT/predicted.csv"
echo "$OUT/predicted.csv: $(($(wc -l <"$OUT/predicted.csv") - 1)) cells"
