#!/usr/bin/env bash
# intellect1-scale: utilization, MFU and all-reduce time against the node count (16 to 256 nodes
# on four continents, scenarios/intellect1-scale.yaml scaled by --set network.nodes), and the
# simulator's own cost per simulated outer step (wall seconds, peak memory) for
# results/bench/netsim.md. Usage: scripts/studies/intellect1-scale/run.sh BUILD_DIR [N ...]
# Writes results/intellect1-scale/summary.json and table.md; the runs go to runs/scale-<N>/.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [N ...]}
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(16 32 64 128 256)
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/intellect1-scale
meridian=$(cd "$build" && pwd)/bin/meridian
outer=3

. "$root/scripts/studies/intellect1-scale/nodes_for.sh"

cd "$root"
mkdir -p runs
rows=()
for n in "${sizes[@]}"; do
  [ $((n % 16)) -eq 0 ] || { echo "run.sh: $n is not a multiple of 16" >&2; exit 2; }
  out="runs/scale-$n"
  echo "== $n nodes" >&2
  /usr/bin/time -f '%e %M' -o "$out.time" \
    "$meridian" sim scenarios/intellect1-scale.yaml --out "$out" --force \
      --set "network.nodes=$(nodes_for "$n")" --set run.outer_steps=$outer > "$out.txt" 2> "$out.log" \
    || { cat "$out.log" >&2; exit 1; }
  read -r wall_s peak_kib < "$out.time"
  rows+=("$n $wall_s $peak_kib $out/summary.json")
done

python3 - "$here" "$outer" "${rows[@]}" <<'PY'
import json, math, sys
here, outer, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
points = []
for r in rows:
    n, wall, kib, path = r.split(" ", 3)
    s = json.load(open(path))
    points.append({
        "nodes": int(n), "outer_steps": outer,
        "wall_s": float(wall), "wall_s_per_outer_step": float(wall) / outer,
        "peak_rss_mib": int(kib) / 1024,
        "compute_utilization": s["compute_utilization"],
        "outer_step_utilization": s["outer_step_utilization"],
        "mfu": s["mfu"],
        "allreduce_s_p50": s["allreduce_s"]["p50"],
        "failures": s["failures"],
        "nodes_min": s["nodes"]["min"],
    })
def fit(key):  # least squares of log(y) on log(N): y ~ N^k
    xs = [math.log(p["nodes"]) for p in points]; ys = [math.log(p[key]) for p in points]
    if len(xs) < 2: return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
out = {"command": "scripts/studies/intellect1-scale/run.sh BUILD " + " ".join(str(p["nodes"]) for p in points),
       "scenario": "scenarios/intellect1-scale.yaml", "points": points,
       "growth_exponent": {"wall_s_per_outer_step": fit("wall_s_per_outer_step"),
                           "peak_rss_mib": fit("peak_rss_mib")}}
json.dump(out, open(here + "/summary.json", "w"), indent=2)
with open(here + "/table.md", "w") as f:
    f.write("| nodes | wall s / outer step | peak RSS (MiB) | compute util. | outer-step util. | MFU | all-reduce p50 (s) | failures | min members |\n")
    f.write("|---|---|---|---|---|---|---|---|---|\n")
    for p in points:
        f.write(f"| {p['nodes']} | {p['wall_s_per_outer_step']:.1f} | {p['peak_rss_mib']:.0f} | "
                f"{100*p['compute_utilization']:.1f} % | {100*p['outer_step_utilization']:.1f} % | "
                f"{100*p['mfu']:.1f} % | {p['allreduce_s_p50']:.0f} | {p['failures']} | {p['nodes_min']} |\n")
    g = out["growth_exponent"]
    if g["wall_s_per_outer_step"] is not None:
        f.write(f"\nFitted growth (least squares on log-log): wall per outer step ~ N^{g['wall_s_per_outer_step']:.2f}, "
                f"peak memory ~ N^{g['peak_rss_mib']:.2f}.\n")
print(open(here + "/table.md").read())
with open("runs/scale.dat", "w") as f:
    f.write("# nodes compute_util outer_step_util mfu wall_s_per_outer_step peak_rss_mib\n")
    for p in points:
        f.write(f"{p['nodes']} {100*p['compute_utilization']} {100*p['outer_step_utilization']} "
                f"{100*p['mfu']} {p['wall_s_per_outer_step']} {p['peak_rss_mib']}\n")
PY

# The figure the README cites (its data, runs/scale.dat, is rebuilt by this script).
gnuplot <<GP
set terminal pngcairo size 1100,420 font 'DejaVu Sans,11'
set output '$here/scale.png'
set multiplot layout 1,2
set logscale x 2
set xlabel 'nodes (8 GPUs each, four continents)'
set grid
set key outside bottom center horizontal
set ylabel 'percent'
set yrange [0:100]
set title 'Utilization and MFU against the node count'
plot 'runs/scale.dat' using 1:2 with linespoints lw 2 pt 7 title 'compute utilization', \
     '' using 1:3 with linespoints lw 2 pt 5 title 'T_{inner}/(T_{inner}+T_{allreduce})', \
     '' using 1:4 with linespoints lw 2 pt 9 title 'MFU'
set title 'Simulator cost (this machine)'
set ylabel 'wall seconds per simulated outer step'
set logscale y
set autoscale y
plot 'runs/scale.dat' using 1:5 with linespoints lw 2 pt 7 title 'engine driver, local ranks aggregated'
unset multiplot
GP
