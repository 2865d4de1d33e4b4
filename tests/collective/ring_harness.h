// Test support for the ring all-reduce over the in-process transport: inputs that make errors
// visible, a driver that runs one ring round on `world` threads, and exact reference sums.
// Not a benchmark harness (bench/ring_bench.cc times the ring on its own).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/collective/ring_allreduce.h"
#include "tests/collective/rank_threads.h"

namespace meridian::testing {

// Integer-valued, distinct per rank and element (within a period of 65521, a prime no share
// size used here is a multiple of), and small enough that every partial sum of up to 8 ranks is
// exact in fp32: |sum| <= 8 * (65520 * 8 + 7) < 2^24.
inline float integer_input(int rank, std::size_t i) {
  return static_cast<float>(static_cast<std::int64_t>(i % 65521) * 8 + rank);
}

inline std::vector<std::vector<float>> integer_inputs(int world, std::size_t count) {
  std::vector<std::vector<float>> v(world, std::vector<float>(count));
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < count; ++i) v[r][i] = integer_input(r, i);
  return v;
}

// Elementwise sum over ranks in double (exact for the integer inputs above).
inline std::vector<double> exact_sum(const std::vector<std::vector<float>>& inputs) {
  std::vector<double> sum(inputs.empty() ? 0 : inputs[0].size(), 0.0);
  for (const auto& in : inputs)
    for (std::size_t i = 0; i < in.size(); ++i) sum[i] += in[i];
  return sum;
}

struct RoundResult {
  std::vector<std::vector<float>> buffers;  // each rank's buffer after the round
  std::vector<RingStats> stats;
  std::vector<std::exception_ptr> errors;
};

// One all-reduce round over `transports` (one per rank), starting from `inputs`.
inline RoundResult run_round(std::vector<Transport*> transports,
                             const std::vector<std::vector<float>>& inputs,
                             const RingOptions& options, CodecId codec_id = CodecId::kFp32) {
  const int world = static_cast<int>(transports.size());
  RoundResult out;
  out.buffers = inputs;
  out.stats.resize(world);
  ThreadRuntime runtime;
  const auto codec = make_codec(codec_id);
  out.errors = run_ranks(world, [&](int r) {
    out.stats[r] =
        ring_all_reduce(*transports[r], runtime, *codec, ReduceBuffer::of(out.buffers[r]), options);
  });
  return out;
}

// A fresh hub of `world` in-process endpoints for `epoch`.
struct InProcRing {
  InProcRing(int world, std::uint64_t epoch) : hub(world, epoch) {
    for (int r = 0; r < world; ++r) owned.push_back(hub.endpoint(r));
  }
  std::vector<Transport*> transports() const {
    std::vector<Transport*> t;
    for (const auto& e : owned) t.push_back(e.get());
    return t;
  }
  InProcHub hub;
  std::vector<std::unique_ptr<Transport>> owned;
};

}  // namespace meridian::testing
