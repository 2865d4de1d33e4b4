#!/usr/bin/env bash
# Training tokens/s of one model config on one core: Meridian's TorchWorker (trainer_bench)
# next to the same model, batch and optimizer in PyTorch (pytorch_llama.py), in one run,
# interleaved (C++ fp32, PyTorch fp32, C++ bf16, PyTorch bf16) and repeated ROUNDS times.
# Reports the best and the median round, as wall-clock and as process CPU time tokens/s, with
# the load average, after the machine line (bench/machine.sh) and the GEMM kernels trainer_bench
# chose: paste all of it, a verdict holds for the machine it ran on (issue 23). Not a correctness
# check (tests/trainer does that).
# usage: bench/trainer/run_vs_pytorch.sh [BUILD_DIR] [MODEL] [STEPS] [ROUNDS]
# PYTORCH_CONTROL_ENV="VAR=value ...": also runs PyTorch with that environment each round (a
#   control, e.g. OPENBLAS_CORETYPE=SkylakeX for OpenBLAS's AVX-512 kernels) as a third column.
# PRECISIONS="fp32 bf16" (default): which precisions to run.
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-small}
STEPS=${3:-5}
ROUNDS=${4:-2}
PRECISIONS=${PRECISIONS:-fp32 bf16}
CONTROL=${PYTORCH_CONTROL_ENV:-}
HERE=$(cd "$(dirname "$0")" && pwd)
CONFIG="$HERE/../../trainer/configs/$MODEL.yaml"
export OMP_NUM_THREADS=1
load() { cut -d' ' -f1 /proc/loadavg; }
lines=""
loads="$(load)"
for round in $(seq "$ROUNDS"); do
  for prec in $PRECISIONS; do
    p=$([ "$prec" = bf16 ] && echo 1 || echo 0)
    lines+=$(MERIDIAN_BENCH_MODEL=$MODEL MERIDIAN_BENCH_STEPS=$STEPS "$BUILD/bench/trainer_bench" \
      --benchmark_filter="bf16:$p" --benchmark_format=json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
out = json.load(sys.stdin)
b = out["benchmarks"][0]
print(json.dumps({"impl": "meridian", "bf16_autocast": "/bf16:1/" in b["name"],
                  "gemm_kernels": out["context"].get("gemm_kernels", "not reported"),
                  "tokens_per_s": b["tokens_per_s"], "tokens_per_cpu_s": b["tokens_per_cpu_s"]}))')$'\n'
    lines+=$(/usr/bin/python3 "$HERE/pytorch_llama.py" "$CONFIG" "$STEPS" "$prec")$'\n'
    if [ -n "$CONTROL" ]; then
      lines+=$(env $CONTROL /usr/bin/python3 "$HERE/pytorch_llama.py" "$CONFIG" "$STEPS" "$prec" |
        sed 's/"impl": "pytorch"/"impl": "control"/')$'\n'
    fi
  done
  loads+=" $(load)"
done
"$HERE/../machine.sh"
/usr/bin/python3 - "$lines" "$MODEL" "$STEPS" "$ROUNDS" "$loads" "$CONTROL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
model, steps, rounds, loads, control = sys.argv[2:7]
impls = ["meridian", "pytorch"] + (["control"] if control else [])
vals = {}
for r in rows:
    for m in ("tokens_per_s", "tokens_per_cpu_s"):
        vals.setdefault((r["impl"], int(r["bf16_autocast"]), m), []).append(r[m])
kernels = sorted({r["gemm_kernels"] for r in rows if "gemm_kernels" in r})
print(f"Meridian's GEMM kernels (trainer_bench): {'; '.join(kernels)}\n")
print(f"model `{model}`, {steps} steps per measurement, {rounds} interleaved rounds, 1 thread; "
      f"load average (1 min) at start and after each round: {loads}\n")
head = "| precision | clock | round | Meridian tokens/s | PyTorch tokens/s | ratio |"
if control:
    head += f" PyTorch with `{control}` | ratio |"
print(head)
print("|---|---|---|" + "---:|" * (head.count("|") - 4))
for p, name in ((0, "fp32"), (1, "bf16 autocast")):
    if ("meridian", p, "tokens_per_s") not in vals:
        continue
    for m, clock in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "process CPU")):
        for stat, f in (("best", max), ("median", statistics.median)):
            c = f(vals[("meridian", p, m)])
            cells = [f"{c:.0f}"]
            for impl in impls[1:]:
                y = f(vals[(impl, p, m)])
                cells += [f"{y:.0f}", f"{c / y:.2f}x"]
            print(f"| {name} | {clock} | {stat} | " + " | ".join(cells) + " |")
PY
