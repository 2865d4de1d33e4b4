// How a simulated run ends: with churn at every step of a short run (a join in the last outer
// step used to keep the engine driver's simulation alive forever), with churn events due after
// the run (simulated time used to run on to them), and when it is interrupted; and how a short
// run draws its hosts' bandwidths.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
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

using nlohmann::json;

// Three members and one spare host on two sites; a small model and one bucket, so that a run of
// 4 outer steps (H = 4) simulates in milliseconds. The trace is CSV text (step-based).
std::string small_run(const std::string& trace_path) {
  return "run: {name: end, outer_steps: 4}\n"
         "model: {layers: 2, hidden: 256, heads: 4, kv_heads: 4, ffn: 512, vocab: 1000, "
         "seq_len: 128}\n"
         "hardware: {step_time_s: 1}\n"
         "network:\n"
         "  sites: [{name: us}, {name: eu}]\n"
         "  rtt: [{a: us, b: eu, ms: 80, source: test}]\n"
         "  nodes: [{site: us, count: 2, bandwidth_gbps: 1}, {site: eu, count: 1, bandwidth_gbps: "
         "1},\n"
         "          {site: eu, count: 1, start: false, bandwidth_gbps: 1}]\n"
         "diloco: {H: 4, buckets: \"1\", local_ranks: 1, checkpoint_s: 0, heartbeat_s: 2, "
         "dead_after_s: 6}\n"
         "churn: {trace: " +
         trace_path + "}\n";
}

struct Ended {
  int rc = -1;
  std::vector<json> events;
};

// Simulates in a child that SIGALRM ends after `limit_s` of wall time, so that a run that never
// ends fails the test (rc 128 + SIGALRM) instead of hanging the suite.
Ended simulate(const std::string& yaml, const std::string& tag,
               const std::vector<std::string>& overrides = {}, unsigned limit_s = 60) {
  const std::string out = testing::temp_path(tag + ".jsonl");
  Ended r;
  r.rc = testing::run_in_child([&] {
    ::alarm(limit_s);
    Scenario sc = parse_scenario(yaml, "scenario.yaml", overrides);
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    run_simulation(sc, sink, compose::simulation_options(sc));
  });
  r.events = testing::read_events(out);
  return r;
}

std::string write_trace(const std::string& name, const std::string& rows) {
  const std::string p = testing::temp_path(name);
  std::ofstream(p) << rows;
  return p;
}

// The run-level record that closes the file, and the latest time of any node's event.
void expect_ends_with_its_last_node(const Ended& r, const std::string& what, int outer_steps) {
  ASSERT_EQ(r.rc, 0) << what << ": the simulation did not end (or failed)";
  ASSERT_FALSE(r.events.empty()) << what;
  const json& last = r.events.back();
  ASSERT_EQ(last["type"], "run_finished") << what;
  EXPECT_EQ(last["outer_steps"], outer_steps) << what;
  EXPECT_EQ(last["outer_steps_planned"], outer_steps) << what;
  double last_node_t = 0;
  for (const json& e : r.events)
    if (e["node"] != -1) last_node_t = std::max(last_node_t, e["t"].get<double>());
  // The run ends when its last node's process does: after its last event only its deathrattle
  // and the end of a heartbeat in flight (store round trips), well within one beat (2 s).
  EXPECT_GE(last["t"].get<double>(), last_node_t) << what;
  EXPECT_LT(last["t"].get<double>(), last_node_t + 2.0) << what;
}

// Regression (issue 21): a join in the last outer step or two never ended under the engine
// driver (the joiner waited for a round record that is never written). Every step of the run,
// for a join alone and for a join after a failure of another host.
TEST(SimRunEnd, JoinsAndFailsAtEveryStepEnd) {
  for (int step = 0; step <= 16; ++step) {
    const std::string at = std::to_string(step);
    for (const bool with_fail : {false, true}) {
      const std::string rows =
          "step,node,event\n" + std::string(with_fail ? "2,us-1,fail\n" : "") + at + ",eu-1,join\n";
      const std::string tag = "join" + at + (with_fail ? "f" : "");
      const Ended r = simulate(small_run(write_trace(tag + ".csv", rows)), tag);
      const std::string what = (with_fail ? "fail at 2, join at step " : "join at step ") + at;
      expect_ends_with_its_last_node(r, what, 4);
      // A joiner (none when the join falls after the run's last step) took part (admitted, or
      // a founder of round 0 when it came before the first record) or was told the run had
      // ended, and it left gracefully: it never just disappears.
      const auto requested = testing::of_type(r.events, "join_requested");
      ASSERT_LE(requested.size(), 1u) << what;
      if (step < 16) {
        EXPECT_EQ(requested.size(), 1u) << what;
      }
      if (requested.empty()) continue;
      const json joiner = requested[0]["node"];
      int took_part = 0, told = 0, left_gracefully = 0;
      for (const json& e : r.events) {
        if (e["node"] != joiner) continue;
        took_part += e["type"] == "epoch_formed";
        told += e["type"] == "not_admitted";
        left_gracefully += e["type"] == "node_left" && e["graceful"] == true;
      }
      EXPECT_TRUE((took_part > 0) != (told > 0)) << what;
      EXPECT_EQ(left_gracefully, 1) << what;
    }
  }
  // A failure alone, at every step.
  for (int step = 0; step <= 16; ++step) {
    const std::string at = std::to_string(step);
    const std::string tag = "fail" + at;
    const Ended r = simulate(
        small_run(write_trace(tag + ".csv", "step,node,event\n" + at + ",eu-0,fail\n")), tag);
    expect_ends_with_its_last_node(r, "fail at step " + at, 4);
    // The coordinator's heartbeat rule fires dead_after_s (6 s) after the last change it saw,
    // which can be up to one beat (2 s) before the crash, and it looks once a beat: so between
    // 4 s and 6 s + two beats (plus the reads' round trips) after the crash. The round that
    // removes the node comes later (fail_detected). eu-0 is the third slot: node id 2.
    double crash_t = -1, silent_t = -1, removed_t = -1;
    for (const json& e : r.events) {
      if (e["type"] == "node_left" && e["node"] == 2 && e["graceful"] == false && crash_t < 0)
        crash_t = e["t"].get<double>();
      if (e["type"] == "silent" && e["node_silent"] == 2 && silent_t < 0) {
        silent_t = e["t"].get<double>();
        EXPECT_GE(e["silent_s"].get<double>(), 6.0) << "fail at step " << at;
      }
      if (e["type"] == "fail_detected" && e["failed"] == 2 && removed_t < 0)
        removed_t = e["t"].get<double>();
    }
    if (removed_t < 0) continue;  // the run ended before a round removed it
    ASSERT_GE(silent_t, 0) << "fail at step " << at << ": removed but never reported silent";
    EXPECT_GE(silent_t - crash_t, 4.0) << "fail at step " << at;
    EXPECT_LE(silent_t - crash_t, 12.0) << "fail at step " << at;
    EXPECT_LE(silent_t, removed_t) << "fail at step " << at;
  }
}

// Regression (issue 21): a churn event due long after the run's end stretched the run to it
// (a time-based join at 999,999 s gave an 11.6-day run), since a pending timer kept SimGrid's
// clock going; the summary then averaged nodes over the empty days.
TEST(SimRunEnd, ChurnDueAfterTheEndDoesNotStretchTheRun) {
  const std::string trace = write_trace("late.csv", "time_s,node,event\n999999,eu-1,join\n");
  const Ended r = simulate(small_run(trace), "late");
  expect_ends_with_its_last_node(r, "join at 999,999 s", 4);
  EXPECT_LT(r.events.back()["t"].get<double>(), 1000.0);
  const analysis::Summary s =
      analysis::summarize(analysis::read_events_file(testing::temp_path("late.jsonl")));
  // A time-weighted mean of a constant count is that count up to rounding.
  EXPECT_GE(s.nodes.mean, s.nodes.min - 1e-9);
  EXPECT_GT(s.nodes.mean, 2.9);  // three nodes from start to end (was 0.01 over 11.6 days)
}

// An interrupted run ends with `run_interrupted` (how far it got, what was planned) instead of
// `run_finished`: here the reason is given at once, so it stops in its first outer step.
TEST(SimRunEnd, InterruptedRunSaysSoAndHowFarItGot) {
  const std::string trace = write_trace("none.csv", "step,node,event\n");
  const std::string out = testing::temp_path("interrupted.jsonl");
  const int rc = testing::run_in_child([&] {
    ::alarm(60);
    Scenario sc = parse_scenario(small_run(trace), "scenario.yaml", {"run.outer_steps=400"});
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    SimOptions o = compose::simulation_options(sc);
    o.interrupt_reason = [] { return std::string("SIGINT"); };
    const SimOutcome res = run_simulation(sc, sink, o);
    if (res.interrupted != "SIGINT" || res.outer_steps_planned != 400) std::_Exit(5);
  });
  ASSERT_EQ(rc, 0);
  const auto events = testing::read_events(out);
  ASSERT_FALSE(events.empty());
  const json& last = events.back();
  EXPECT_EQ(last["type"], "run_interrupted");
  EXPECT_EQ(last["reason"], "SIGINT");
  EXPECT_EQ(last["outer_steps_planned"], 400);
  EXPECT_LT(last["outer_steps"].get<int>(), 400);
  EXPECT_TRUE(testing::of_type(events, "run_finished").empty());
}

// Issue 18: access bandwidths are drawn per host identity, not per slot. Two scenarios that
// share sites but not nodes (us-0..3 against eu-0..3) drew the same four bandwidths in slot
// order; now they are independent, and a host keeps its draw in any scenario that has it.
std::vector<json> platform_hosts(const std::string& nodes, const std::string& tag) {
  const std::string yaml =
      "run: {name: draws, outer_steps: 1, seed: 7}\n"
      "model: {layers: 2, hidden: 256, heads: 4, kv_heads: 4, ffn: 512, vocab: 1000, "
      "seq_len: 128}\n"
      "hardware: {step_time_s: 1}\n"
      "network:\n"
      "  access_bandwidth_gbps: [0.5, 4.0]\n"
      "  sites: [{name: us}, {name: eu}]\n"
      "  rtt: [{a: us, b: eu, ms: 80, source: test}]\n"
      "  nodes: " +
      nodes +
      "\n"
      "diloco: {H: 1, buckets: \"1\", local_ranks: 1, checkpoint_s: 0}\n";
  const Ended r = simulate(yaml, tag);
  EXPECT_EQ(r.rc, 0);
  if (r.events.empty()) return {};
  return r.events.front()["config"]["platform"]["hosts"].get<std::vector<json>>();
}

TEST(SimRunEnd, BandwidthDrawsBelongToTheHostNotItsSlot) {
  const auto us = platform_hosts("[{site: us, count: 4}]", "draws_us");
  const auto eu = platform_hosts("[{site: eu, count: 4}]", "draws_eu");
  const auto both = platform_hosts("[{site: eu, count: 4}, {site: us, count: 4}]", "draws_both");
  ASSERT_EQ(us.size(), 4u);
  ASSERT_EQ(eu.size(), 4u);
  ASSERT_EQ(both.size(), 8u);
  std::set<double> us_draws, eu_draws;
  for (const json& h : us) us_draws.insert(h["access_gbps"].get<double>());
  for (const json& h : eu) eu_draws.insert(h["access_gbps"].get<double>());
  EXPECT_EQ(us_draws.size(), 4u);
  for (double d : eu_draws) EXPECT_EQ(us_draws.count(d), 0u) << d;  // independent draws
  // Identity: eu-i and us-i draw what they drew alone, whatever their slot.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(both[i]["host"], eu[i]["host"]);
    EXPECT_EQ(both[i]["access_gbps"], eu[i]["access_gbps"]);
    EXPECT_EQ(both[4 + i]["host"], us[i]["host"]);
    EXPECT_EQ(both[4 + i]["access_gbps"], us[i]["access_gbps"]);
  }
  for (const json& h : both) {
    EXPECT_GE(h["access_gbps"].get<double>(), 0.5);
    EXPECT_LE(h["access_gbps"].get<double>(), 4.0);
  }
}

}  // namespace
}  // namespace meridian::netsim
