// The statistics of analysis/summary.h against values computed by hand from
// data/small_run.jsonl (3 nodes, 3 outer steps, one joiner, one failure, one retry).
// Not a test of the reader's errors (events_test.cc) or of the plots.
#include "analysis/summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "analysis/events.h"
#include "engine/core/error.h"

namespace meridian::analysis {
namespace {

const std::string kData = MERIDIAN_ANALYSIS_TEST_DATA;

Summary small_run() { return summarize(read_events_file(kData + "/small_run.jsonl")); }

TEST(Percentile, LinearInterpolationBetweenOrderStatistics) {
  // x = {10, 20, 30, 40}; h = 3p. p=0.1: h=0.3 -> 10 + 0.3*10 = 13. p=0.5: h=1.5 -> 25.
  // p=0.9: h=2.7 -> 30 + 0.7*10 = 37. Input order does not matter.
  const std::vector<double> x = {40, 10, 30, 20};
  EXPECT_DOUBLE_EQ(percentile(x, 0.1), 13.0);
  EXPECT_DOUBLE_EQ(percentile(x, 0.5), 25.0);
  EXPECT_DOUBLE_EQ(percentile(x, 0.9), 37.0);
  EXPECT_DOUBLE_EQ(percentile(x, 0.0), 10.0);
  EXPECT_DOUBLE_EQ(percentile(x, 1.0), 40.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.9), 7.0);
  EXPECT_TRUE(std::isnan(percentile({}, 0.5)));
}

TEST(Summary, RunTotals) {
  const Summary s = small_run();
  EXPECT_EQ(s.mode, "simulate");
  EXPECT_DOUBLE_EQ(s.simulated_s, 30.0);
  EXPECT_EQ(s.outer_steps, 3);
  // Tokens: node 0 3 x 20, node 1 2 x 20, node 2 2 x 20 = 140.
  EXPECT_DOUBLE_EQ(s.tokens, 140.0);
  EXPECT_EQ(s.retries, 1);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.joins, 1);
}

// The non-finite guard's events: a node that sat a step out and a receiver's blame (reported
// twice by two shards: one line), listed by outer step.
TEST(Summary, NonFinitePseudoGradientsAreListed) {
  std::ifstream in(kData + "/small_run.jsonl");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string extra =
      "{\"t\":27,\"node\":0,\"type\":\"nonfinite\",\"outer_step\":2,\"faulty\":1,"
      "\"detected_by\":\"receiver\",\"action\":\"blame\"}\n"
      "{\"t\":27,\"node\":0,\"type\":\"nonfinite\",\"outer_step\":2,\"faulty\":1,"
      "\"detected_by\":\"receiver\",\"action\":\"blame\"}\n"
      "{\"t\":9,\"node\":2,\"type\":\"nonfinite\",\"outer_step\":0,\"faulty\":2,"
      "\"values\":1,\"elements\":8,\"detected_by\":\"self\",\"action\":\"abstain\"}\n";
  text.insert(text.find('\n') + 1, extra);  // after the config line
  const std::string path = ::testing::TempDir() + "/nonfinite_run.jsonl";
  std::ofstream(path) << text;
  const Summary s = summarize(read_events_file(path));
  EXPECT_EQ(s.non_finite, (std::vector<std::string>{"outer step 0: node 2 sat out",
                                                    "outer step 2: node 1 blamed by a receiver"}));
  EXPECT_TRUE(small_run().non_finite.empty());
}

TEST(Summary, AliveTimeAndComputeUtilization) {
  const Summary s = small_run();
  ASSERT_EQ(s.per_node.size(), 3u);
  // Alive: node 0 from node_started 0 to the run's end 30 = 30; node 1 from 0 to the
  // fail_detected naming it at 24 = 24; node 2 (a joiner) from its node_started at 5 (not its
  // admission at 10: waiting and recovering count as held, idle time) to 30 = 25.
  EXPECT_DOUBLE_EQ(s.per_node[0].alive_s, 30.0);
  EXPECT_DOUBLE_EQ(s.per_node[1].alive_s, 24.0);
  EXPECT_EQ(s.per_node[1].end_reason, "failed");
  EXPECT_DOUBLE_EQ(s.per_node[2].alive_s, 25.0);
  EXPECT_DOUBLE_EQ(s.per_node[2].start_s, 5.0);
  // Compute: node 0 8+8+6 = 22, node 1 6+6 = 12, node 2 4+6 = 10; total 44 over 79 alive.
  EXPECT_DOUBLE_EQ(s.per_node[0].compute_utilization, 22.0 / 30.0);
  EXPECT_DOUBLE_EQ(s.per_node[1].compute_utilization, 12.0 / 24.0);
  EXPECT_DOUBLE_EQ(s.per_node[2].compute_utilization, 10.0 / 25.0);
  EXPECT_DOUBLE_EQ(s.compute_utilization, 44.0 / 79.0);
}

TEST(Summary, OuterStepUtilization) {
  const Summary s = small_run();
  ASSERT_EQ(s.steps.size(), 3u);
  // Step 0: T_inner = mean(8, 6) = 7, T_allreduce = max(2, 3) = 3 -> 7/10 = 0.7.
  // Step 1: T_inner = mean(8, 6, 4) = 6, T_allreduce = 2 -> 6/8 = 0.75.
  // Step 2: T_inner = mean(6, 6) = 6, T_allreduce = max(4, 3) = 4 -> 6/10 = 0.6.
  EXPECT_DOUBLE_EQ(s.steps[0].utilization, 0.7);
  EXPECT_DOUBLE_EQ(s.steps[1].utilization, 0.75);
  EXPECT_DOUBLE_EQ(s.steps[2].utilization, 0.6);
  EXPECT_NEAR(s.outer_step_utilization, (0.7 + 0.75 + 0.6) / 3, 1e-15);
  EXPECT_EQ(s.steps[1].participants, 3);
  EXPECT_DOUBLE_EQ(s.steps[2].cumulative_tokens, 140.0);
}

TEST(Summary, Mfu) {
  const Summary s = small_run();
  // Mean nodes = 79 alive-seconds / 30 s; mean GPUs = that x 2; tokens/s = 140 / 30.
  // MFU = 100 FLOP/token x 140/30 / (79/30 x 2 x 500) = 14000 / 79000.
  EXPECT_NEAR(s.mfu, 14000.0 / 79000.0, 1e-15);
  // Step 2 alone: 100 x 40 tokens / (10 s x 2 participants x 2 GPUs x 500) = 4000/20000.
  EXPECT_DOUBLE_EQ(s.steps[2].mfu, 0.2);
}

TEST(Summary, AllreducePercentilesOfTheSlowestNode) {
  const Summary s = small_run();
  // Per step, the slowest node's allreduce_s: {3, 2, 4}; sorted {2, 3, 4}, h = 2p.
  // p10: h=0.2 -> 2.2; p50: h=1 -> 3; p90: h=1.8 -> 3 + 0.8 = 3.8; mean 9/3 = 3.
  EXPECT_DOUBLE_EQ(s.allreduce_s.p10, 2.2);
  EXPECT_DOUBLE_EQ(s.allreduce_s.p50, 3.0);
  EXPECT_DOUBLE_EQ(s.allreduce_s.p90, 3.8);
  EXPECT_DOUBLE_EQ(s.allreduce_s.mean, 3.0);
  EXPECT_EQ(s.allreduce_s.count, 3u);
  // p5: h=0.1 -> 2.1; p25: h=0.5 -> 2.5; p75: h=1.5 -> 3.5; p95: h=1.9 -> 3.9; IQR 1.
  EXPECT_DOUBLE_EQ(s.allreduce_s.p5, 2.1);
  EXPECT_DOUBLE_EQ(s.allreduce_s.p25, 2.5);
  EXPECT_DOUBLE_EQ(s.allreduce_s.p75, 3.5);
  EXPECT_DOUBLE_EQ(s.allreduce_s.p95, 3.9);
  EXPECT_DOUBLE_EQ(s.allreduce_s.iqr(), 1.0);
}

TEST(Summary, InnerStepTime) {
  // 44 s of compute over 14 inner steps (7 records x 2 steps).
  EXPECT_DOUBLE_EQ(small_run().inner_step_s, 44.0 / 14.0);
}

TEST(Summary, WireBytesAndReductionVersusDdp) {
  const Summary s = small_run();
  // (node, step) sums: (0,0) 1000, (1,0) 1000, (0,1) 600+600, (1,1) 1200, (2,1) 1200,
  // (0,2) 300 (aborted attempt) + 1000 (retry) = 1300, (2,2) 1000. Total 7900 over 7 pairs.
  EXPECT_DOUBLE_EQ(s.wire_bytes_per_node_per_outer_step, 7900.0 / 7.0);
  // fp32 ring DDP per pair: 2(N-1)/N x 4 x 1000 params x H=2. N=2: 8000; N=3: 32000/3.
  // Steps 0 and 2 have 2 pairs at N=2, step 1 has 3 pairs at N=3: 4 x 8000 + 32000 = 64000.
  ASSERT_TRUE(s.bandwidth_reduction_vs_ddp.has_value());
  EXPECT_NEAR(*s.bandwidth_reduction_vs_ddp, 64000.0 / 7900.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.per_node[0].bytes_sent, 1000.0 + 1200.0 + 1300.0);
}

TEST(Summary, NodeCountTimeWeighted) {
  const Summary s = small_run();
  // 2 nodes on [0,5), 3 on [5,24), 2 on [24,30]: mean = (10 + 57 + 12) / 30 = 79/30.
  EXPECT_EQ(s.nodes.min, 2);
  EXPECT_EQ(s.nodes.max, 3);
  EXPECT_DOUBLE_EQ(s.nodes.alive_mean, 79.0 / 30.0);
  // The participants of the steps, weighted by their wall time, lie between min and max.
  double weighted = 0, total_s = 0;
  for (const auto& st : s.steps) weighted += double(st.participants) * st.duration_s;
  for (const auto& st : s.steps) total_s += st.duration_s;
  EXPECT_DOUBLE_EQ(s.nodes.mean, weighted / total_s);
  EXPECT_GE(s.nodes.mean, 2.0);
  EXPECT_LE(s.nodes.mean, 3.0);
  ASSERT_EQ(s.node_count.size(), 4u);
  EXPECT_EQ(s.node_count[1], (std::pair<double, std::int64_t>{5.0, 3}));
  EXPECT_EQ(s.node_count[2], (std::pair<double, std::int64_t>{24.0, 2}));
}

TEST(Summary, RecoveryAndIdle) {
  const Summary s = small_run();
  EXPECT_EQ(s.recovery.count, 1);
  EXPECT_DOUBLE_EQ(s.recovery.total_s, 4.0);
  EXPECT_DOUBLE_EQ(s.recovery.bytes, 4000.0);
  // Idle = alive - compute - allreduce_s - outer_opt_s - recovery:
  // node 0: 30 - 22 - (2+2+4) = 0; node 1: 24 - 12 - (3+2) = 7;
  // node 2: 25 - 10 - (2+3) - 4 = 6 (5 s of it waiting for admission).
  EXPECT_DOUBLE_EQ(s.per_node[0].idle_s, 0.0);
  EXPECT_DOUBLE_EQ(s.per_node[1].idle_s, 7.0);
  EXPECT_DOUBLE_EQ(s.per_node[2].idle_s, 6.0);
  EXPECT_DOUBLE_EQ(s.idle_s, 13.0);
}

TEST(Summary, LossAndPerplexityFromTheLastStepWithLosses) {
  const Summary s = small_run();
  // Step 2: mean(2.0, 3.0) = 2.5; steps 0 and 1 have none.
  ASSERT_TRUE(s.loss.has_value());
  EXPECT_DOUBLE_EQ(*s.loss, 2.5);
  EXPECT_DOUBLE_EQ(*s.perplexity, std::exp(2.5));
  EXPECT_FALSE(s.steps[0].loss.has_value());
}

TEST(Summary, JsonHasTheSchemaKeys) {
  const nlohmann::ordered_json j = to_json(small_run());
  for (const char* key :
       {"compute_utilization", "outer_step_utilization", "mfu", "allreduce_s", "inner_step_s",
        "wire_bytes_per_node_per_outer_step", "bandwidth_reduction_vs_ddp", "tokens", "simulated_s",
        "nodes", "outer_steps", "recovery", "idle_s", "loss", "perplexity"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_DOUBLE_EQ(j["allreduce_s"]["p90"].get<double>(), 3.8);
  EXPECT_DOUBLE_EQ(j["allreduce_s"]["p5"].get<double>(), 2.1);
  EXPECT_DOUBLE_EQ(j["allreduce_s"]["p25"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["allreduce_s"]["p75"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(j["allreduce_s"]["p95"].get<double>(), 3.9);
  EXPECT_DOUBLE_EQ(j["compute_utilization_per_node"]["1"].get<double>(), 0.5);
  EXPECT_EQ(j["nodes"]["max"].get<int>(), 3);
}

TEST(Summary, ACrashReportedByTheNodeItselfIsAFailure) {
  // node_left with graceful = false (a crash the writer knows of) ends the node's life as a
  // failure even before anyone detects it.
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  EventRecord crash;
  crash.t_s = 22;
  crash.node = 1;
  crash.type = "node_left";
  crash.body = NodeLeftRecord{false};
  events.insert(events.end() - 1, crash);
  const Summary s = summarize(events);
  EXPECT_EQ(s.per_node[1].end_reason, "failed");
  EXPECT_DOUBLE_EQ(s.per_node[1].alive_s, 22.0);
  EXPECT_EQ(s.failures, 1);
}

EventRecord record(double t_s, std::int64_t node, const std::string& type, EventBody body) {
  EventRecord e;
  e.t_s = t_s;
  e.node = node;
  e.type = type;
  e.body = std::move(body);
  return e;
}

// A real run of two nodes stopped at t = 10 (both killed after outer step 4) and resumed at
// t = 50 from the checkpoint of 3 outer steps: the whole history in one summary.
TEST(Summary, AResumedRunIsOneHistoryWithItsStopAndItsRedoneSteps) {
  std::vector<EventRecord> events = {record(0, -1, "config", ConfigRecord{"real"})};
  const auto step = [](std::int64_t k) {
    OuterStepRecord r;
    r.outer_step = k;
    r.participants = 2;
    r.inner_s = 1.5;
    r.allreduce_s = 0.5;
    return r;
  };
  for (std::int64_t node : {1, 2})
    events.push_back(record(0, node, "node_started", NodeStartedRecord{true}));
  for (std::int64_t k = 0; k <= 4; ++k)
    for (std::int64_t node : {1, 2})
      events.push_back(record(2.0 * (k + 1), node, "outer_step", step(k)));
  for (std::int64_t node : {1, 2})
    events.push_back(record(50, node, "run_resumed", RunResumedRecord{2, "checkpoint", 3}));
  for (std::int64_t node : {1, 2})
    events.push_back(record(50.5, node, "node_started", NodeStartedRecord{true}));
  for (std::int64_t k = 3; k <= 5; ++k)
    for (std::int64_t node : {1, 2})
      events.push_back(record(46.0 + 2 * k, node, "outer_step", step(k)));
  events.push_back(record(57, -1, "run_finished", RunFinishedRecord{57, 6, 6}));

  const Summary s = summarize(events);
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(outer_steps_text(s), "6 of 6 planned");
  ASSERT_EQ(s.resumes.size(), 2u);
  EXPECT_EQ(s.resumes[0].from_outer_step, 3);
  EXPECT_EQ(s.resumes[1].via, "checkpoint");
  EXPECT_DOUBLE_EQ(s.stopped_s, 40.5);  // from the last record of the first lives to the restart
  EXPECT_EQ(s.outer_steps_redone, 2);   // steps 3 and 4, applied before and trained again
  ASSERT_EQ(s.per_node.size(), 2u);
  for (const NodeStats& n : s.per_node) {
    EXPECT_DOUBLE_EQ(n.alive_s, 10 + 6.5) << n.node;  // both lives, not the stop between them
    EXPECT_DOUBLE_EQ(n.start_s, 0);
    EXPECT_DOUBLE_EQ(n.end_s, 57);
    EXPECT_EQ(n.end_reason, "run_end");
  }
  EXPECT_EQ(s.failures, 0);
  // The alive-node count: 2, none during the stop, 2 again.
  const std::vector<std::pair<double, std::int64_t>> count = {{0, 2}, {10, 0}, {50.5, 2}, {57, 0}};
  EXPECT_EQ(s.node_count, count);
  EXPECT_EQ(
      resumes_text(s),
      "after outer step 3 (2 node restart(s); 40.5 s with no node alive; 2 outer step(s) redone)");
  const auto j = to_json(s);
  EXPECT_EQ(j["outer_steps_redone"], 2);
  EXPECT_DOUBLE_EQ(j["stopped_s"].get<double>(), 40.5);
  ASSERT_EQ(j["resumes"].size(), 2u);
  EXPECT_EQ(j["resumes"][0]["from_outer_step"], 3);
  EXPECT_NE(summary_table(s).find("resumed"), std::string::npos);
}

TEST(Summary, NoConfigRecordIsAnError) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  events.erase(events.begin());
  EXPECT_THROW(summarize(events), ConfigError);
}

TEST(Summary, UnfinishedRunEndsAtItsLastEvent) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  events.pop_back();  // no run_finished: the run ends at the last event, t = 30
  const Summary s = summarize(events);
  EXPECT_DOUBLE_EQ(s.simulated_s, 30.0);
  EXPECT_EQ(s.outer_steps, 3);  // counted from the outer_step records
}

// data/interrupted_run: the synthetic run stopped by SIGINT after its fifth outer step (every
// record up to that step's last outer_step record, then run_interrupted, 12 planned).
TEST(Summary, AnInterruptedRunSaysHowFarItGot) {
  const Summary s = summarize(read_events_file(kData + "/interrupted_run"));
  EXPECT_FALSE(s.complete);
  EXPECT_TRUE(s.interrupted);
  EXPECT_EQ(s.interrupted_reason, "SIGINT");
  EXPECT_EQ(s.outer_steps, 5);
  ASSERT_TRUE(s.outer_steps_planned.has_value());
  EXPECT_EQ(*s.outer_steps_planned, 12);
  EXPECT_NEAR(s.simulated_s, 672.6966609032553, 1e-9);  // run_interrupted.simulated_s
  EXPECT_EQ(outer_steps_text(s), "5 of 12 planned");
  EXPECT_EQ(run_end_text(s), "Interrupted (SIGINT) after 5 of 12 planned outer steps");
  const auto j = to_json(s);
  EXPECT_EQ(j["interrupted"], true);
  EXPECT_EQ(j["interrupted_reason"], "SIGINT");
  EXPECT_EQ(j["outer_steps_planned"], 12);
  EXPECT_EQ(j["complete"], false);
  const std::string table = summary_table(s);
  EXPECT_NE(table.find("Interrupted (SIGINT) after 5 of 12 planned outer steps"), std::string::npos)
      << table;
  EXPECT_NE(table.find(" 5 of 12 planned\n"), std::string::npos) << table;
}

TEST(Summary, AFinishedRunWithItsPlanAndAnOldOneWithout) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  {
    const Summary old = summarize(events);  // run_finished without outer_steps_planned
    EXPECT_TRUE(old.complete);
    EXPECT_FALSE(old.interrupted);
    EXPECT_FALSE(old.outer_steps_planned.has_value());
    EXPECT_EQ(run_end_text(old), "");
    EXPECT_EQ(outer_steps_text(old), "3");
    EXPECT_TRUE(to_json(old)["outer_steps_planned"].is_null());
    EXPECT_TRUE(to_json(old)["interrupted_reason"].is_null());
  }
  events.back() = parse_event_line(
      R"({"t":30,"node":-1,"type":"run_finished","simulated_s":30,"outer_steps":3,)"
      R"("outer_steps_planned":3})",
      "test");
  const Summary s = summarize(events);
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(outer_steps_text(s), "3 of 3 planned");
  EXPECT_EQ(run_end_text(s), "");
}

// Events that simply stop (a crash, kill -9) are neither finished nor interrupted: incomplete.
TEST(Summary, EventsWithoutAFinalRecordAreAnIncompleteRun) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  events.pop_back();
  const Summary s = summarize(events);
  EXPECT_FALSE(s.complete);
  EXPECT_FALSE(s.interrupted);
  EXPECT_EQ(run_end_text(s).rfind("Incomplete: the events stop after 3 outer steps", 0), 0u)
      << run_end_text(s);
  EXPECT_EQ(to_json(s)["complete"], false);
  EXPECT_NE(summary_table(s).find("Incomplete"), std::string::npos);
}

// A real node that gave up as lost ends its file with `node_lost` instead of run_finished: the
// run is incomplete, and the summary says which node was lost, after how many steps and why.
TEST(Summary, ANodeLostRecordEndsTheFileWithWhatHappened) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  events.back() = parse_event_line(
      R"({"t":30,"node":2,"type":"node_lost","exit":"lost","reason":"store: connection )"
      R"(refused","outer_steps":3,"elapsed_s":29.5})",
      "test");
  const auto* lost = events.back().as<NodeLostRecord>();
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->exit, "lost");
  EXPECT_EQ(lost->outer_steps, 3);
  const Summary s = summarize(events);
  EXPECT_FALSE(s.complete);
  ASSERT_EQ(s.lost.size(), 1u);
  EXPECT_EQ(s.lost[0], "node 2 lost after 3 outer steps: store: connection refused");
  EXPECT_EQ(run_end_text(s),
            "Incomplete: no node finished the run after 3 outer steps (node 2 lost after 3 outer "
            "steps: store: connection refused)");
  EXPECT_EQ(to_json(s)["lost"][0], s.lost[0]);
  EXPECT_NE(summary_table(s).find("node lost"), std::string::npos);
  // A record without its reason is refused, naming the field.
  EXPECT_THROW(parse_event_line(R"({"t":1,"node":2,"type":"node_lost","exit":"lost",)"
                                R"("outer_steps":3})",
                                "test"),
               ConfigError);
}

// A run written by the simulator (data/netsim_churn: a join with recovery, a crash during an
// all-reduce, a graceful leave) and the summary.json that an earlier, independent implementation
// in netsim/ computed from it (retired since: `meridian sim` now writes summary.json through
// analysis/). The fixture pins SCHEMA.md's metrics to that second derivation.
TEST(Summary, AgreesWithTheSimulatorsOwnSummary) {
  const Summary s = summarize(read_events_file(kData + "/netsim_churn"));
  std::ifstream in(kData + "/netsim_churn/summary.json");
  const nlohmann::json sim = nlohmann::json::parse(in);
  auto near = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
  };
  EXPECT_TRUE(near(s.compute_utilization, sim["compute_utilization"])) << s.compute_utilization;
  EXPECT_TRUE(near(s.outer_step_utilization, sim["outer_step_utilization"]));
  EXPECT_TRUE(near(s.mfu, sim["mfu"])) << s.mfu;
  EXPECT_TRUE(near(s.allreduce_s.p10, sim["allreduce_s"]["p10"]));
  EXPECT_TRUE(near(s.allreduce_s.p50, sim["allreduce_s"]["p50"]));
  EXPECT_TRUE(near(s.allreduce_s.p90, sim["allreduce_s"]["p90"]));
  EXPECT_TRUE(near(s.allreduce_s.mean, sim["allreduce_s"]["mean"]));
  EXPECT_TRUE(near(s.inner_step_s, sim["inner_step_s"]));
  EXPECT_TRUE(
      near(s.wire_bytes_per_node_per_outer_step, sim["wire_bytes_per_node_per_outer_step"]));
  EXPECT_TRUE(near(*s.bandwidth_reduction_vs_ddp, sim["bandwidth_reduction_vs_ddp"]));
  EXPECT_TRUE(near(s.tokens, sim["tokens"]));
  EXPECT_TRUE(near(s.simulated_s, sim["simulated_s"]));
  EXPECT_TRUE(near(s.nodes.alive_mean, sim["nodes"]["time_averaged_alive"])) << s.nodes.alive_mean;
  EXPECT_EQ(s.outer_steps, sim["outer_steps"].get<std::int64_t>());
  EXPECT_EQ(s.recovery.count, 1);
  EXPECT_EQ(s.failures, 1);  // the crash (the graceful leave is not a failure)
}

TEST(Summary, ValidationLossFromTheLastStepsEvaluationsAndTheTableShowsTheLosses) {
  std::vector<EventRecord> events = read_events_file(kData + "/small_run.jsonl");
  EXPECT_FALSE(summarize(events).val_loss.has_value());
  EXPECT_EQ(summary_table(summarize(events)).find("validation loss"), std::string::npos);
  auto evaluation = [](std::int64_t node, std::int64_t step, std::optional<double> v) {
    EventRecord e;
    e.node = node;
    e.type = "evaluation";
    e.body = EvaluationRecord{step, v};
    return e;
  };
  events.insert(events.end() - 1, evaluation(0, 1, 9.0));
  events.insert(events.end() - 1, evaluation(0, 2, 3.0));
  events.insert(events.end() - 1, evaluation(1, 2, 3.5));
  events.insert(events.end() - 1, evaluation(2, 2, std::nullopt));
  const Summary s = summarize(events);
  ASSERT_TRUE(s.val_loss.has_value());
  EXPECT_DOUBLE_EQ(*s.val_loss, 3.25);
  EXPECT_DOUBLE_EQ(to_json(s)["val_loss"].get<double>(), 3.25);
  const std::string table = summary_table(s);
  EXPECT_NE(table.find("final loss (train, mean over nodes)  2.5000"), std::string::npos) << table;
  EXPECT_NE(table.find("final validation loss                3.2500"), std::string::npos) << table;
  // The reader parses the record as written by engine/core/events.
  const EventRecord r = parse_event_line(
      R"({"t":1,"node":2,"type":"evaluation","outer_step":4,"val_loss":2.75,"sequences":16,)"
      R"("params_crc32c":"0a1b2c3d"})",
      "x:1");
  ASSERT_NE(r.as<EvaluationRecord>(), nullptr);
  EXPECT_EQ(r.as<EvaluationRecord>()->outer_step, 4);
  EXPECT_DOUBLE_EQ(*r.as<EvaluationRecord>()->val_loss, 2.75);
}

}  // namespace
}  // namespace meridian::analysis
