// Training throughput of TorchWorker: whole inner steps (batch, forward, backward, clipping,
// AdamW) of a model config on one thread, fp32 and bf16 autocast, in tokens/s. Random tokens
// (speed does not depend on the text). Not a convergence measurement.
// Config: MERIDIAN_BENCH_MODEL (default small); steps per iteration: MERIDIAN_BENCH_STEPS.
#include <benchmark/benchmark.h>
#include <time.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "trainer/precision.h"
#include "trainer/torch_worker.h"

namespace meridian::trainer {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);  // benchmark main only: configuration of the run
  return v ? v : fallback;
}

TokenizedCorpus random_corpus(int vocab, std::size_t tokens) {
  std::mt19937 gen(1);
  auto make = [&](std::size_t n) {
    auto v = std::make_shared<std::vector<std::int32_t>>(n);
    for (auto& t : *v) t = static_cast<std::int32_t>(gen() % static_cast<unsigned>(vocab));
    return v;
  };
  TokenizedCorpus c;
  c.vocab = vocab;
  c.train = make(tokens);
  c.validation = make(tokens / 10);
  c.corpus_checksum = "random";
  return c;
}

void BM_TrainSteps(benchmark::State& state) {
  TorchWorkerOptions o;
  o.config = load_named_config(env_or("MERIDIAN_BENCH_MODEL", "small"));
  o.config.train.bf16_autocast = state.range(0) != 0 ? Bf16Autocast::kOn : Bf16Autocast::kOff;
  o.validation_sequences = 1;
  const int steps = std::stoi(env_or("MERIDIAN_BENCH_STEPS", "5"));
  const auto& m = o.config.model;
  TorchWorker w(
      o, random_corpus(m.vocab, 64 * static_cast<std::size_t>(m.seq_len) * o.config.train.batch));
  w.run_inner_steps(2);  // warm-up: allocator, oneDNN kernels
  std::int64_t tokens = 0;
  // CPU time of this (single-threaded) process as well as wall time: on a shared machine the
  // wall clock also counts time spent waiting for the core.
  auto cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double cpu = 0;
  for (auto _ : state) {
    const double c0 = cpu_s();
    const auto r = w.run_inner_steps(steps);
    cpu += cpu_s() - c0;
    tokens += r.tokens;
    benchmark::DoNotOptimize(r.loss);
  }
  state.counters["tokens_per_cpu_s"] = static_cast<double>(tokens) / cpu;
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["batch"] = o.config.train.batch;
  state.counters["seq_len"] = m.seq_len;
  state.counters["params"] = static_cast<double>(parameter_count(m));
  state.SetLabel(m.name + (state.range(0) ? " bf16-autocast" : " fp32"));
}
BENCHMARK(BM_TrainSteps)
    ->ArgName("bf16")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace meridian::trainer

// The machine and the kernels go into the benchmark's context (the console header and the JSON):
// a tokens/s figure means little without them (issue 23).
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu",
                              meridian::trainer::describe(meridian::trainer::host_cpu_features()));
  benchmark::AddCustomContext("gemm_kernels", meridian::trainer::gemm_kernels());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
