#!/usr/bin/env bash
# On a lent GPU machine (H100/H200, PyTorch 2.x with CUDA in python3): configure Meridian against
# the LibTorch and NCCL that python3 carries (SimGrid and Gloo off), build, run the `gpu` ctest
# label and the CPU benchmarks, and write everything under $OUT (default ./gpu-out).
#
#   here:   scripts/gpu/fetch_deps.sh
#   device: run(command="bash scripts/gpu/run.sh", carry=[".gpudeps"])
#
# First run on a lent H200 on 2026-11-26: results/gpu/README.md. Each step logs to $OUT/<step>.log
# and the script goes on after a failed step, so one run shows every problem.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=build-gpu
DEPS=/tmp/meridian-gpudeps
status=0
step() {  # step NAME CMD...: run, log, record the outcome in $OUT/steps.txt
  local name=$1; shift
  echo "== $name: $*"
  if "$@" >"$OUT/$name.log" 2>&1; then echo "$name ok" | tee -a "$OUT/steps.txt"
  else echo "$name FAILED (rc $?)" | tee -a "$OUT/steps.txt"; tail -30 "$OUT/$name.log"; status=1; fi
}

{ nvidia-smi; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'; lscpu | head -20; } >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" | head -25

# Debian packages carried as .deb (see fetch_deps.sh), unpacked into a private prefix.
mkdir -p "$DEPS"
for f in .gpudeps/*.deb; do dpkg -x "$f" "$DEPS"; done
export PATH="$DEPS/usr/bin:$PATH"
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
# The trainer tests read Debian's fortunes at their packaged path.
if [ ! -d /usr/share/games/fortunes ] && [ -d "$DEPS/usr/share/games/fortunes" ]; then
  mkdir -p /usr/share/games && ln -s "$DEPS/usr/share/games/fortunes" /usr/share/games/fortunes
fi

TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
NCCL_ROOT=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
# The wheel ships libnccl.so.2 only; give CMake the unversioned name it looks for.
if [ -n "$NCCL_ROOT" ] && [ ! -e "$NCCL_ROOT/lib/libnccl.so" ] && [ -e "$NCCL_ROOT/lib/libnccl.so.2" ]; then
  mkdir -p /tmp/meridian-nccl/lib && ln -sf "$NCCL_ROOT/lib/libnccl.so.2" /tmp/meridian-nccl/lib/libnccl.so
  ln -sfn "$NCCL_ROOT/include" /tmp/meridian-nccl/include; NCCL_ROOT=/tmp/meridian-nccl
fi
echo "torch prefix: $TORCH_PREFIX; nccl: $NCCL_ROOT" | tee -a "$OUT/machine.txt"

step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMERIDIAN_WITH_SIMGRID=OFF -DMERIDIAN_WITH_GLOO=OFF -DMERIDIAN_WITH_TORCH=ON \
  -DMERIDIAN_WITH_NCCL=ON -DNCCL_ROOT="$NCCL_ROOT" -DMERIDIAN_SANITIZE_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$DEPS/usr" -DBoost_ROOT="$DEPS/usr" -DBoost_NO_SYSTEM_PATHS=ON
# The GPU test and the binary first, so a run cut short by its time limit still reports them.
step build-gpu cmake --build "$BUILD" -j "$(nproc)" --target gpu_nccl_transport_test meridian -- -k 0
step test-gpu bash -c "cd $BUILD && ctest -L gpu --output-on-failure"
step version "$BUILD/bin/meridian" --version
step build cmake --build "$BUILD" -j "$(nproc)" -- -k 0
step test-cpu bash -c "cd $BUILD && OMP_NUM_THREADS=1 ctest -j 4 -L 'unit|collective|mesh|trainer' --output-on-failure"
# The foundation benchmarks on this machine's CPU, for comparison with results/bench/.
step bench-codec "$BUILD/bench/codec_bench" --benchmark_min_time=0.2 --benchmark_format=json --benchmark_out="$OUT/codec_bench.json"
step bench-ring "$BUILD/bench/ring_bench" --benchmark_filter='MiB:(1|16|64)/' --benchmark_format=json --benchmark_out="$OUT/ring_bench.json"
cat "$OUT/steps.txt"
# The device tool brings back only a few files: the logs travel as one archive.
tar -C "$OUT" -czf "$OUT/logs.tar.gz" $(cd "$OUT" && ls *.log steps.txt machine.txt) && (cd "$OUT" && rm -f *.log)
exit $status
