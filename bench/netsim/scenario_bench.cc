// End-to-end wall time of whole scenarios (intellect1-global, intellect1-full), the way
// `meridian sim` runs them, minus the summary. Each iteration runs in a forked child (SimGrid's
// engine is a process singleton); the child reports simulated seconds and messages through a
// pipe. Counters: simulated_s, messages, sim_per_wall (simulated seconds per wall second), and
// store_<kind>: the simulated store's calls by kind (the membership protocol's share).
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/compose/simulation.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"

namespace {

struct ChildResult {
  double simulated_s = 0;
  double messages = 0;
  bool ok = false;
  char store_calls[1024] = {};  // "kind count kind count ..."
};

ChildResult run_scenario_in_child(const std::string& name) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ChildResult r;
    try {
      auto sc = meridian::netsim::load_scenario(std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/" +
                                                name + ".yaml");
      std::ofstream events("/dev/null");
      meridian::JsonlEventSink sink(events);  // events are written, as by `meridian sim`
      auto out = meridian::netsim::run_simulation(sc, sink, meridian::compose::simulation_options(sc));
      r.simulated_s = out.simulated_s;
      r.messages = double(out.messages);
      r.ok = true;
      std::string calls;
      for (const auto& [kind, n] : out.store_calls) calls += kind + " " + std::to_string(n) + " ";
      std::snprintf(r.store_calls, sizeof r.store_calls, "%s", calls.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    }
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  ChildResult r;
  if (read(fds[0], &r, sizeof r) != sizeof r) r.ok = false;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return r;
}

void BM_Scenario(benchmark::State& state, const std::string& name) {
  ChildResult last;
  double wall_total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    last = run_scenario_in_child(name);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wall_total += wall;
    state.SetIterationTime(wall);
    if (!last.ok) state.SkipWithError("simulation failed");
  }
  state.counters["simulated_s"] = last.simulated_s;
  state.counters["messages"] = last.messages;
  std::istringstream calls(last.store_calls);
  std::string kind;
  double n = 0;
  while (calls >> kind >> n) state.counters["store_" + kind] = n;
  state.counters["sim_per_wall"] =
      wall_total > 0 ? last.simulated_s * double(state.iterations()) / wall_total : 0;
}

// The names keep their former `_engine` suffix (the engine driver is the only one since issue
// 20), so the filters in results/bench/netsim.md still select them.
BENCHMARK_CAPTURE(BM_Scenario, intellect1_global_engine, std::string("intellect1-global"))
    ->UseManualTime()
    ->Unit(benchmark::kSecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_Scenario, intellect1_full_engine, std::string("intellect1-full"))
    ->UseManualTime()
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
