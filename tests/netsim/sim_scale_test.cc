// Membership at scale (issue 23): 112 simulated nodes on four continents, no failures, the
// default heartbeat settings. A beat used to read every node's counter one by one (N + 4 store
// round trips), so beats from far sites came later than dead_after_s and half the nodes were
// evicted in the first all-reduce; now a beat is a constant number of round trips.
#include <gtest/gtest.h>

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

// scenarios/intellect1-scale.yaml at 112 nodes (7 x its 16-node proportions), 2 outer steps.
const std::vector<std::string> k112 = {
    "network.nodes=[{site: us-east, count: 21}, {site: us-west, count: 14}, "
    "{site: us-nw, count: 14}, {site: eu-west, count: 21}, {site: eu-cent, count: 14}, "
    "{site: ap-tokyo, count: 7}, {site: ap-seoul, count: 7}, {site: ap-sydney, count: 14}]",
    "run.outer_steps=2"};

analysis::Summary simulate(const std::string& tag, std::vector<std::string> overrides) {
  const std::string out = testing::temp_path(tag + ".jsonl");
  const int rc = testing::run_in_child([&] {
    Scenario sc = load_scenario(
        std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-scale.yaml", overrides);
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    run_simulation(sc, sink, compose::simulation_options(sc));
  });
  EXPECT_EQ(rc, 0) << tag;
  return analysis::summarize(analysis::read_events_file(out));
}

TEST(SimScale, HundredTwelveHealthyNodesStayMembersWithDefaultHeartbeats) {
  const analysis::Summary fast = simulate("scale112", k112);
  auto relaxed_overrides = k112;
  relaxed_overrides.push_back("diloco.dead_after_s=60");
  const analysis::Summary relaxed = simulate("scale112_relaxed", relaxed_overrides);

  for (const analysis::Summary* s : {&fast, &relaxed}) {
    EXPECT_EQ(s->outer_steps, 2);
    EXPECT_EQ(s->failures, 0);
    EXPECT_EQ(s->nodes.min, 112);  // every outer step had all 112 participants
    EXPECT_EQ(s->nodes.max, 112);
  }
  // dead_after_s changes nothing when nobody is silent: the same utilization.
  ASSERT_GT(relaxed.compute_utilization, 0.0);
  EXPECT_NEAR(fast.compute_utilization / relaxed.compute_utilization, 1.0, 0.01);
  EXPECT_NEAR(fast.outer_step_utilization / relaxed.outer_step_utilization, 1.0, 0.01);
}

}  // namespace
}  // namespace meridian::netsim
