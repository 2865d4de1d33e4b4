#!/usr/bin/env bash
# Heartbeat-to-detection latency against dead_after_s (issue 23), simulated: in
# scenarios/intellect1-scale at 16, 64, 128 and 256 nodes, five hosts crash at t = 1000, 1900, 2800,
# 3700 and 4600 s (in Sydney, Seoul, Frankfurt, Oregon and N. Virginia; the store is in
# N. Virginia). For each crash: the time from the crash to the coordinator's `silent` event
# (its heartbeat rule fired) and to `fail_detected` (the round that removed the node).
# Usage: scripts/studies/intellect1-scale/detection.sh BUILD_DIR -> detection.json and detection.md here.
set -euo pipefail
build=$(cd "${1:?usage: detection.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/intellect1-scale
cd "$here/../.."
mkdir -p runs
trace=$PWD/runs/detection-churn.csv
printf 'time_s,node,event\n1000,ap-sydney-1,fail\n1900,ap-seoul-0,fail\n2800,eu-cent-1,fail\n3700,us-nw-1,fail\n4600,us-east-1,fail\n' > "$trace"
. "$root/scripts/studies/intellect1-scale/nodes_for.sh"
for n in 16 64 128 256; do
  "$build/bin/meridian" sim scenarios/intellect1-scale.yaml --out "runs/detection-$n" --force \
    --set "network.nodes=$(nodes_for "$n")" --set run.outer_steps=3 \
    --set "churn.trace=$trace" > /dev/null 2> "runs/detection-$n.log"
done
python3 - "$here" <<'PY'
import json, sys
here = sys.argv[1]
crash_t = {"ap-sydney-1": 1000, "ap-seoul-0": 1900, "eu-cent-1": 2800, "us-nw-1": 3700,
           "us-east-1": 4600}
out = {"command": "scripts/studies/intellect1-scale/detection.sh BUILD", "heartbeat_s": 2.0,
       "dead_after_s": 6.0, "sizes": []}
lines = ["| nodes | crashed host | silent after (s) | removed after (s), by |", "|---|---|---|---|"]
for n in (16, 64, 128, 256):
    events = [json.loads(l) for l in open(f"runs/detection-{n}/events.jsonl")]
    host_of = {e["node"]: e.get("host") for e in events if e["type"] == "node_started"}
    silent, removed = {}, {}
    for e in events:
        if e["type"] == "silent":
            silent.setdefault(e["node_silent"], e)
        if e["type"] == "fail_detected":
            removed.setdefault(e["failed"], e)
    rows = []
    for node, host in sorted(host_of.items(), key=lambda kv: crash_t.get(kv[1], 0)):
        if host not in crash_t:
            continue
        s = silent[node]["t"] - crash_t[host] if node in silent else None
        r = removed[node]["t"] - crash_t[host] if node in removed else None
        rows.append({"host": host, "silent_after_s": s, "removed_after_s": r,
                     "removed_by": removed[node]["by"] if node in removed else None})
        fs = f"{s:.1f}" if s is not None else "n/a"
        fr = f"{r:.1f}, {removed[node]['by']}" if r is not None else "n/a"
        lines.append(f"| {n} | {host} | {fs} | {fr} |")
    out["sizes"].append({"nodes": n, "crashes": rows})
json.dump(out, open(here + "/detection.json", "w"), indent=2)
open(here + "/detection.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
