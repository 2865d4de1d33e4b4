#!/usr/bin/env bash
# Prints the machine line every table in results/bench/ starts with (issue 23: a verdict holds
# for the machine it was measured on): CPU model, vCPUs, the instruction-set flags that change
# which kernels run (a leading '-' marks one the CPU lacks), kernel, load average. Reads
# /proc/cpuinfo and /proc/loadavg only; the kernels a program chose come from the program itself
# (codec_bench's and trainer_bench's Google Benchmark context: codec_kernels, cpu, gemm_kernels).
# usage: bench/machine.sh            one Markdown line, to paste above a new table
set -euo pipefail
model=$(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=" $(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | cut -d: -f2-) "
list=""
want="avx2 fma avx512f avx512bw avx512vl avx512vbmi avx512_bf16 amx_bf16 vpclmulqdq"
[ "$(uname -m)" = aarch64 ] && want="asimd sve bf16"
for f in $want; do
  case "$flags" in
    *" $f "*) list+=" $f" ;;
    *) list+=" -$f" ;;
  esac
done
echo "Machine: ${model:-unknown CPU}, $(nproc) vCPUs; flags:${list}; Linux $(uname -r);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +'%Y-%m-%d %H:%M UTC')" \
  "(bench/machine.sh)"
