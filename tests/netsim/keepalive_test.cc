// Liveness leases under simulation: the simulated store accounts for a node's keepalives
// analytically (one call stands for all of them while its host is up) instead of simulating each
// one. These tests hold that accounting to the message-level reference (every keepalive a store
// call, SimOptions::message_level_keepalives): crash detection (`silent`), removal
// (`fail_detected`) and eviction at the same simulated times, and the same events for a run
// with stable membership. They do not time the simulator (bench/netsim does).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cli/compose/simulation.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"
#include "tests/netsim/sim_test_util.h"

namespace meridian::netsim {
namespace {

using nlohmann::json;

// Seven members on three sites (RTT 80-220 ms to each other; the store sits with the first),
// 12 outer steps of about 20 s. `churn` is a time-based trace (CSV text), "" for none.
std::string three_sites(const std::string& trace_path) {
  std::string yaml =
      "run: {name: keepalive, outer_steps: 12}\n"
      "model: {layers: 2, hidden: 256, heads: 4, kv_heads: 4, ffn: 512, vocab: 1000, "
      "seq_len: 128}\n"
      "hardware: {step_time_s: 1}\n"
      "network:\n"
      "  sites: [{name: us}, {name: eu}, {name: asia}]\n"
      "  rtt: [{a: us, b: eu, ms: 80, source: test}, {a: us, b: asia, ms: 150, source: test},\n"
      "        {a: eu, b: asia, ms: 220, source: test}]\n"
      "  nodes: [{site: us, count: 3, bandwidth_gbps: 1}, {site: eu, count: 2, bandwidth_gbps: "
      "1},\n"
      "          {site: asia, count: 2, bandwidth_gbps: 1}]\n"
      "diloco: {H: 20, buckets: \"1\", local_ranks: 1, checkpoint_s: 0, heartbeat_s: 2, "
      "dead_after_s: 6}\n";
  if (!trace_path.empty()) yaml += "churn: {trace: " + trace_path + "}\n";
  return yaml;
}

struct SimRun {
  int rc = -1;
  std::vector<json> events;
};

SimRun simulate(const std::string& yaml, const std::string& tag, bool message_level) {
  const std::string out = testing::temp_path(tag + (message_level ? "-msg" : "-ana") + ".jsonl");
  SimRun r;
  r.rc = testing::run_in_child([&] {
    Scenario sc = parse_scenario(yaml, "scenario.yaml", {});
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    SimOptions o = compose::simulation_options(sc);
    o.message_level_keepalives = message_level;
    run_simulation(sc, sink, o);
  });
  r.events = testing::read_events(out);
  return r;
}

// The events but the config record (which names the keepalive mode), in time order. Events that several actors emit at one
// simulated time come in the order SimGrid happens to wake them, which differs between the two
// accountings (e.g. the `allreduce` records of two ranks whose buckets end together): they are
// ordered by node and type (one node's records keep their order).
std::vector<json> without_config(const std::vector<json>& events) {
  std::vector<json> out;
  for (const json& e : events)
    if (e["type"] != "config") out.push_back(e);
  auto key = [](const json& e) {
    return std::make_tuple(std::llround(e["t"].get<double>() * 1e6), e.value("node", -1),
                           e["type"].get<std::string>());
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const json& a, const json& b) { return key(a) < key(b); });
  return out;
}

// Every number in `a` and `b` within `tolerance`, everything else equal.
void expect_same(const json& a, const json& b, double tolerance, const std::string& where) {
  if (a.is_number() && b.is_number()) {
    EXPECT_NEAR(a.get<double>(), b.get<double>(), tolerance) << where;
    return;
  }
  ASSERT_EQ(a.type(), b.type()) << where << ": " << a.dump() << " vs " << b.dump();
  if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << where << ": " << a.dump() << " vs " << b.dump();
    for (auto it = a.begin(); it != a.end(); ++it) {
      ASSERT_TRUE(b.contains(it.key())) << where << ": " << it.key();
      expect_same(it.value(), b[it.key()], tolerance, where + "." + it.key());
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where << ": " << a.dump() << " vs " << b.dump();
    for (std::size_t i = 0; i < a.size(); ++i)
      expect_same(a[i], b[i], tolerance, where + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

// The analytic accounting and the message-level reference agree event for event, times
// included. Stated tolerance: 1 ms of simulated time (the two only differ in floating-point
// rounding: the analytic lease ends at start + k·interval + ttl, the reference at the k-th
// keepalive's clock + ttl).
constexpr double kToleranceS = 1e-3;

void expect_same_runs(const SimRun& analytic, const SimRun& message, const std::string& what) {
  ASSERT_EQ(analytic.rc, 0) << what;
  ASSERT_EQ(message.rc, 0) << what;
  const auto a = without_config(analytic.events);
  const auto m = without_config(message.events);
  ASSERT_EQ(a.size(), m.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    expect_same(a[i], m[i], kToleranceS, what + " event " + std::to_string(i));
}

// Crashes at varied phases of the heartbeat schedule and of the outer step (inner steps, the
// all-reduce, near a boundary), on every site: the coordinator's `silent` and the removing
// round's `fail_detected` come at the same times, and the same members are evicted.
TEST(Keepalive, CrashDetectionMatchesMessageLevel) {
  const std::string trace = testing::temp_path("crashes.csv");
  std::ofstream(trace) << "time_s,node,event\n31.7,us-1,fail\n77.2,eu-1,fail\n"
                          "118.9,asia-0,fail\n163.3,us-2,fail\n";
  const SimRun analytic = simulate(three_sites(trace), "crashes", false);
  const SimRun message = simulate(three_sites(trace), "crashes", true);
  expect_same_runs(analytic, message, "crashes");

  // And the lease rule itself: a crash is seen silent within (dead_after_s - heartbeat_s,
  // dead_after_s] of it (its last keepalive came up to one beat before it, and the lease ends
  // dead_after_s after that), plus the store's round trip to the coordinator; the round that
  // removes it comes after.
  std::map<json, double> crashed, silent, removed;
  for (const json& e : analytic.events) {
    if (e["type"] == "node_left" && e["graceful"] == false) crashed[e["node"]] = e["t"];
    if (e["type"] == "silent") silent[e["node_silent"]] = e["t"];
    if (e["type"] == "fail_detected") removed[e["failed"]] = e["t"];
  }
  ASSERT_EQ(crashed.size(), 4u);
  for (const auto& [node, t] : crashed) {
    ASSERT_TRUE(silent.count(node)) << "node " << node;
    EXPECT_GT(silent[node] - t, 6.0 - 2.0) << "node " << node;
    EXPECT_LE(silent[node] - t, 6.0 + 0.3) << "node " << node;
    ASSERT_TRUE(removed.count(node)) << "node " << node;
    EXPECT_GE(removed[node], silent[node]) << "node " << node;
  }
  // Four crashes of seven: the last epoch has three members.
  std::vector<json> last_members;
  for (const json& e : analytic.events)
    if (e["type"] == "epoch_formed") last_members = e["members"];
  EXPECT_EQ(last_members.size(), 3u);
}

// Stable membership: the same events as the reference, and what a run without churn always
// produced: one epoch, no `silent`, no removal, no retry, every node through every step.
TEST(Keepalive, StableMembershipMatchesMessageLevel) {
  const SimRun analytic = simulate(three_sites(""), "stable", false);
  const SimRun message = simulate(three_sites(""), "stable", true);
  expect_same_runs(analytic, message, "stable");
  std::map<std::string, int> count;
  for (const json& e : analytic.events) ++count[e["type"].get<std::string>()];
  EXPECT_EQ(count["epoch_formed"], 7);
  EXPECT_EQ(count["outer_step"], 7 * 12);
  EXPECT_EQ(count["silent"], 0);
  EXPECT_EQ(count["fail_detected"], 0);
  EXPECT_EQ(count["retry"], 0);
  EXPECT_EQ(count["node_left"], 7);
}

}  // namespace
}  // namespace meridian::netsim
