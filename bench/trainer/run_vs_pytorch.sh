#!/usr/bin/env bash
# Training tokens/s of one model config on one core: Meridian's TorchWorker (trainer_bench)
# next to the same model, batch and optimizer in PyTorch (pytorch_llama.py), in one run,
# interleaved (C++ fp32, PyTorch fp32, C++ bf16, PyTorch bf16) and repeated ROUNDS times;
# the best of the rounds is reported, as wall-clock and as process CPU time tokens/s.
# usage: bench/trainer/run_vs_pytorch.sh [BUILD_DIR] [MODEL] [STEPS] [ROUNDS]
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-small}
STEPS=${3:-5}
ROUNDS=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
CONFIG="$HERE/../../trainer/configs/$MODEL.yaml"
export OMP_NUM_THREADS=1
lines=""
for round in $(seq "$ROUNDS"); do
  for p in 0 1; do
    lines+=$(MERIDIAN_BENCH_MODEL=$MODEL MERIDIAN_BENCH_STEPS=$STEPS "$BUILD/bench/trainer_bench" \
      --benchmark_filter="bf16:$p" --benchmark_format=json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
b = json.load(sys.stdin)["benchmarks"][0]
print(json.dumps({"impl": "meridian", "bf16_autocast": "/bf16:1/" in b["name"],
                  "tokens_per_s": b["tokens_per_s"], "tokens_per_cpu_s": b["tokens_per_cpu_s"]}))')$'\n'
    prec=$([ "$p" = 1 ] && echo bf16 || echo fp32)
    lines+=$(/usr/bin/python3 "$HERE/pytorch_llama.py" "$CONFIG" "$STEPS" "$prec")$'\n'
  done
done
/usr/bin/python3 - "$lines" "$MODEL" "$STEPS" "$ROUNDS" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
best = {}
for r in rows:
    k = (r["impl"], int(r["bf16_autocast"]))
    for m in ("tokens_per_s", "tokens_per_cpu_s"):
        best[k + (m,)] = max(best.get(k + (m,), 0), r[m])
print(f"model `{sys.argv[2]}`, {sys.argv[3]} steps per measurement, best of {sys.argv[4]} "
      "interleaved rounds, 1 thread\n")
print("| precision | clock | Meridian (LibTorch C++) tokens/s | PyTorch 1.13 tokens/s | ratio |")
print("|---|---|---:|---:|---:|")
for p, name in ((0, "fp32"), (1, "bf16 autocast")):
    for m, clock in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "process CPU")):
        c, y = best[("meridian", p, m)], best[("pytorch", p, m)]
        print(f"| {name} | {clock} | {c:.0f} | {y:.0f} | {c / y:.2f}x |")
PY
