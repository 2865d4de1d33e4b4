// Google Benchmark of the ring all-reduce over the in-process transport: 2/4/8 ranks as threads,
// 1 MiB to 256 MiB of fp32 per rank, every codec built into the engine. Reports nccl-tests'
// algbw = bytes / time and busbw = algbw * 2(n-1)/n. Not a network benchmark: in-process
// "wire" transfers are memcpy between threads that share this machine's cores.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/collective/ring_allreduce.h"

namespace meridian {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
// Largest size x ranks held at once: each rank holds its buffer, the ring's working copy and
// its receive slots, so 1 GiB of buffers costs about 2.2 GiB (a shared machine).
constexpr std::size_t kMaxTotalBytes = std::size_t{1} << 30;

// Smooth pseudo-random values in [-1, 1) (an LCG; the data only needs to look like gradients
// to the codecs, not to be statistically good).
std::vector<float> make_input(std::size_t count) {
  std::vector<float> v(count);
  std::uint32_t x = 12345;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return v;
}

// args: codec id, ranks, MiB per rank.
void BM_RingAllReduce(benchmark::State& state) {
  const auto codec = static_cast<CodecId>(state.range(0));
  const int world = static_cast<int>(state.range(1));
  const std::size_t bytes = static_cast<std::size_t>(state.range(2)) * kMiB;
  const std::size_t count = bytes / sizeof(float);

  // Every rank starts each iteration from the same values (sums would otherwise grow without
  // bound across iterations); the reset is outside the timed region.
  const std::vector<float> input = make_input(count);
  std::vector<std::vector<float>> buffers(world, std::vector<float>(count));
  InProcHub hub(world, 1);
  std::vector<std::unique_ptr<Transport>> ends;
  for (int r = 0; r < world; ++r) ends.push_back(hub.endpoint(r));
  ThreadRuntime runtime;
  const auto ring_codec = make_codec(codec);
  RingOptions options;
  options.timeout_s = 600;

  std::vector<double> start_s(world), end_s(world);
  std::vector<RingStats> stats(world);
  std::vector<RingWorkspace> workspaces(world);  // as a training loop would keep them
  std::vector<std::exception_ptr> errors(world);
  double total_s = 0;
  std::uint64_t step = 0;
  // Round 0 is an untimed warm-up: it sizes the workspaces and the transport's message pool,
  // so the timed rounds see the steady state of a training loop (no first-touch page faults).
  const auto round = [&] {
    options.outer_step = step++;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          std::memcpy(buffers[r].data(), input.data(), bytes);
          start_s[r] = runtime.now_s();
          stats[r] = ring_all_reduce(*ends[r], runtime, *ring_codec, ReduceBuffer::of(buffers[r]),
                                     options, &workspaces[r]);
          end_s[r] = runtime.now_s();
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        state.SkipWithError(x.what());
      }
      return false;
    }
    return true;
  };
  if (!round()) return;
  for (auto _ : state) {
    if (!round()) return;
    // The collective's time: first rank in to last rank out, on one clock.
    const double elapsed = *std::max_element(end_s.begin(), end_s.end()) -
                           *std::min_element(start_s.begin(), start_s.end());
    state.SetIterationTime(elapsed);
    total_s += elapsed;
  }
  const double mean_s = total_s / static_cast<double>(state.iterations());
  const double algbw = static_cast<double>(bytes) / mean_s / 1e9;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
  state.counters["wire_MB_per_rank"] = static_cast<double>(stats[0].bytes_sent) / 1e6;
  state.SetLabel(std::string(codec_name(codec)));
}

void ring_arguments(benchmark::internal::Benchmark* b) {
  for (CodecId codec : kRingCodecIds) {
    for (int world : {2, 4, 8}) {
      for (std::int64_t mib = 1; mib <= 256; mib *= 4) {
        if (static_cast<std::size_t>(mib) * kMiB * world > kMaxTotalBytes) continue;
        b->Args({static_cast<std::int64_t>(codec), world, mib});
      }
    }
  }
}

BENCHMARK(BM_RingAllReduce)
    ->ArgNames({"codec", "ranks", "MiB"})
    ->Apply(ring_arguments)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

}  // namespace
}  // namespace meridian

BENCHMARK_MAIN();
