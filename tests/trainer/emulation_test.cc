// TorchWorker under the engine's DiLoCo loop: real LibTorch nodes as threads over the
// in-process ring with the int8 codec, one node failing and a joiner recovering its state live.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/compose/thread_world.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "tests/mesh/data_records.h"
#include "trainer/diloco_emulation.h"

namespace meridian::trainer {
namespace {

TEST(DilocoEmulation, TinyNodesTrainThroughAFailureAndAJoin) {
  EmulationOptions o;
  o.worker.config = load_named_config("tiny");
  o.worker.data.files = {"fortunes", "literature", "riddles"};
  o.worker.data.cache_dir = MERIDIAN_TRAINER_CACHE_DIR;
  o.worker.validation_sequences = 8;
  o.nodes = 3;
  o.diloco.inner_steps = 4;
  o.diloco.outer_steps = 4;
  o.diloco.mesh.outer_steps = 4;
  o.diloco.codec = CodecId::kInt8Prime;
  o.diloco.mesh.heartbeat_interval_s = 0.2;
  o.diloco.mesh.dead_after_s = 2.0;  // generous: the machine is shared
  o.fail_after.emplace(1, 2);  // node 2 fails after outer step 1
  o.join_after = {2};          // a joiner arrives after outer step 2
  MemoryEventSink events;
  compose::ThreadWorld world;
  const auto r = run_emulation(o, world, events);

  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[0].members, 3u);
  EXPECT_EQ(r.steps[1].members, 2u);  // the failed node is gone
  EXPECT_EQ(r.steps[3].members, 3u);  // the joiner is a member
  for (const auto& s : r.steps) {
    EXPECT_FALSE(s.fallback) << "outer step " << s.outer_step;
    EXPECT_TRUE(std::isfinite(s.val_loss));
  }
  EXPECT_LT(r.steps.back().val_loss, std::log(512.0) - 0.3);  // it learned through the churn
  ASSERT_EQ(r.nodes.size(), 4u);
  int finished = 0, lost = 0;
  for (const auto& n : r.nodes) {
    finished += n.result.exit == NodeExit::kFinished;
    lost += n.result.exit == NodeExit::kLost;
    if (n.id >= 100) {
      EXPECT_EQ(n.result.outer_steps_applied, 1);  // the joiner
    }
  }
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(lost, 1);
  EXPECT_EQ(events.of_type("recovery_finished").size(), 1u);  // the joiner got real state
  // Elastic data: every position of the run's data order handed out was trained once, through
  // the failure and the join (the failed node's share by the others), and nothing is owed.
  testing::DataRecords data;
  for (const Event& e : events.of_type("data"))
    testing::add_data_record(data, nlohmann::json::parse(e.to_json()),
                             "node " + std::to_string(e.node));
  ASSERT_EQ(data.size(), 4u);
  testing::expect_every_position_trained_once(data);
  // Fresh shares of H x batch positions: 3 in step 0, 3 in step 1 (node 2's is lost), 1 in
  // step 2 beside node 2's owed share, 3 in step 3 with the joiner.
  EXPECT_EQ(data.rbegin()->second.at("next").get<std::int64_t>(),
            10 * 4 * o.worker.config.train.batch);
  EXPECT_FALSE(events.of_type("fail_detected").empty());
  const auto all = events.events();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().type, "config");  // SCHEMA: first record, run-level
  EXPECT_EQ(all.front().node, -1);
  EXPECT_NE(all.front().to_json().find("\"mode\":\"emulate\""), std::string::npos);
  // tiny has no bf16_autocast key: fp32 on every machine, and the record says so.
  EXPECT_NE(
      all.front().to_json().find("\"bf16_autocast\":false,\"bf16_autocast_setting\":\"false\""),
      std::string::npos);
  EXPECT_EQ(all.back().type, "run_finished");
}

// Regression (issue 21): `train-diloco --nodes 3 --fail 5@1` aborted with std::out_of_range
// (map::at) when the churn schedule fired. The schedule is now checked before any work.
TEST(DilocoEmulation, ChurnScheduleIsCheckedBeforeTheRun) {
  EmulationOptions o;
  o.nodes = 3;
  o.diloco.inner_steps = 4;
  o.diloco.outer_steps = 4;
  const auto message = [](const EmulationOptions& opts) {
    try {
      validate_emulation(opts);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(o), "");
  o.fail_after.emplace(1, 5);
  EXPECT_EQ(message(o), "--fail 5@1: no node 5 (the initial nodes are 1..3)");
  o.fail_after = {{4, 2}};
  EXPECT_EQ(message(o), "--fail 2@4: the outer step must be in [1, 3] (the run has 4 outer steps)");
  o.fail_after = {{1, 2}, {2, 2}};
  EXPECT_EQ(message(o), "--fail 2@2: node 2 fails twice");
  o.fail_after = {{1, 2}};
  o.join_after = {0};
  EXPECT_EQ(message(o), "--join 0: the outer step must be in [1, 3] (the run has 4 outer steps)");
  // run_emulation refuses the same schedule before it reads the corpus.
  o.join_after = {};
  o.fail_after = {{1, 7}};
  MemoryEventSink events;
  compose::ThreadWorld world;
  EXPECT_THROW(run_emulation(o, world, events), ConfigError);
}

}  // namespace
}  // namespace meridian::trainer
