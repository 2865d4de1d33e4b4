// Aggregated local ranks against the message-level rings (issue 23), under the WAN model: `diloco.aggregate: true` simulates a node's L identical rings as one ring of
// L× bytes, window and per-flow bound; `false` runs the L rings, one SimGrid flow per message
// and lane, each lane its own TCP connection (own slow start and idle restart). The two must
// give the same all-reduce times and utilization within 1 %, at 14 and 56 nodes on
// intellect1-global's sites (RTTs up to 265 ms, CUBIC, the 5 Gb/s per-flow cap, path changes).
// tests/netsim/wan_test.cc (WanFlow.AggregatedConnections...) checks the same per connection on
// a path where slow start is most of the time.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/events.h"
#include "analysis/summary.h"
#include "cli/compose/simulation.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"
#include "tests/netsim/sim_test_util.h"

namespace meridian::netsim {
namespace {

struct SimResult {
  analysis::Summary summary;
  std::uint64_t messages = 0;
};

// scenarios/intellect1-global.yaml with its node counts times `k` (14 nodes at k = 1), two
// outer steps (the second all-reduce follows ~2,900 s of idle: every connection restarts its
// window) and the model's parameters in 8 equal buckets (44 layer buckets cost 5.5× the
// simulation time and test nothing more).
SimResult simulate(int k, bool aggregate) {
  const std::string tag = "agg" + std::to_string(k) + (aggregate ? "a" : "m");
  const std::string out = testing::temp_path(tag + ".jsonl");
  const std::string counts = testing::temp_path(tag + ".messages");
  auto n = [k](int c) { return std::to_string(c * k); };
  std::vector<std::string> overrides = {
      "network.nodes=[{site: us-east, count: " + n(3) + "}, {site: us-west, count: " + n(2) +
          "}, {site: us-nw, count: " + n(2) + "}, {site: eu-west, count: " + n(3) +
          "}, {site: eu-cent, count: " + n(2) + "}, {site: ap-tokyo, count: " + n(1) +
          "}, {site: ap-seoul, count: " + n(1) + "}]",
      "run.outer_steps=2", "diloco.buckets=8",
      std::string("diloco.aggregate=") + (aggregate ? "true" : "false")};
  const int rc = testing::run_in_child([&] {
    Scenario sc = load_scenario(
        std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-global.yaml", overrides);
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    const SimOutcome o = run_simulation(sc, sink, compose::simulation_options(sc));
    std::ofstream(counts) << o.messages;
  });
  EXPECT_EQ(rc, 0) << tag;
  SimResult r;
  r.summary = analysis::summarize(analysis::read_events_file(out));
  std::ifstream(counts) >> r.messages;
  return r;
}

void expect_same(const SimResult& agg, const SimResult& msg, int nodes) {
  const analysis::Summary &a = agg.summary, &m = msg.summary;
  for (const analysis::Summary* s : {&a, &m}) {
    EXPECT_EQ(s->outer_steps, 2);
    EXPECT_EQ(s->retries, 0);
    EXPECT_EQ(s->nodes.min, nodes);
  }
  std::printf(
      "%d nodes: all-reduce p50 %.2f s aggregated, %.2f s message level; compute "
      "utilization %.4f vs %.4f; messages %llu vs %llu\n",
      nodes, a.allreduce_s.p50, m.allreduce_s.p50, a.compute_utilization, m.compute_utilization,
      static_cast<unsigned long long>(agg.messages), static_cast<unsigned long long>(msg.messages));
  // The message-level run did simulate the L = 8 rings: 8× the ring's messages.
  EXPECT_GT(msg.messages, 7 * agg.messages) << agg.messages << " vs " << msg.messages;
  ASSERT_GT(m.allreduce_s.p50, 0.0);
  EXPECT_NEAR(a.allreduce_s.p50 / m.allreduce_s.p50, 1.0, 0.01)
      << "all-reduce p50: aggregated " << a.allreduce_s.p50 << " s, message level "
      << m.allreduce_s.p50 << " s";
  EXPECT_NEAR(a.allreduce_s.max / m.allreduce_s.max, 1.0, 0.01)
      << "all-reduce max: aggregated " << a.allreduce_s.max << " s, message level "
      << m.allreduce_s.max << " s";
  EXPECT_NEAR(a.compute_utilization / m.compute_utilization, 1.0, 0.01);
  EXPECT_NEAR(a.outer_step_utilization / m.outer_step_utilization, 1.0, 0.01);
  EXPECT_NEAR(a.simulated_s / m.simulated_s, 1.0, 0.01);
  // Same payload; the message-level rings carry L times more chunk headers.
  EXPECT_NEAR(a.wire_bytes_per_node_per_outer_step / m.wire_bytes_per_node_per_outer_step, 1.0,
              0.001);
}

TEST(Aggregation, LocalRanksAsOneFlowMatchMessageLevelAt14NodesWithTheWanModel) {
  const SimResult agg = simulate(1, true), msg = simulate(1, false);
  expect_same(agg, msg, 14);
}

TEST(Aggregation, LocalRanksAsOneFlowMatchMessageLevelAt56NodesWithTheWanModel) {
  const SimResult agg = simulate(4, true), msg = simulate(4, false);
  expect_same(agg, msg, 56);
}

}  // namespace
}  // namespace meridian::netsim
