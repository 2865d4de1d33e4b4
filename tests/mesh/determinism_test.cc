// Determinism: the same seed and the same churn give bit-identical outer parameters and the same
// event streams. With threads and the in-process transport, determinism is defined over the
// data, not the timing: per node, the sequence of events with every time field (`t` and the
// *_s fields) removed; `fail_detected` and `silent` are written by whichever node holds the
// coordinator role (a race at start-up, and a holder whose lease the store ended while its
// thread was starved hands it over), so they are compared as a multiset over all nodes instead.
// Not `timing`: the leave is honoured at the next record whatever the interleaving (the report
// says `;leave`), and liveness is generous (a node looks dead after 2 s without a keepalive, a
// ring waits 20 s), so only a thread starved for seconds could change the outcome.
#include <gtest/gtest.h>

#include <regex>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

struct RunData {
  std::map<std::int64_t, std::vector<std::string>> streams;  // node -> normalised events
  std::multiset<std::string> fail_detected;
  std::map<std::int64_t, std::map<std::int64_t, StepRecord>> steps;
};

RunData run_scripted_churn() {
  ClusterOptions o;
  o.initial = 4;
  o.outer_steps = 7;
  o.dead_after_s = 2.0 * kDeathSlack;  // the crash of node 3 costs this, twice per test
  o.allreduce_timeout_s = 20.0;
  // Node 3 crashes in the inner steps of step 2; a joiner arrives after step 3 (admitted at
  // the boundary of step 5); node 2 asks to leave during step 5 and leaves gracefully after it.
  // The crash and the leave are armed at launch and counted on the node's own activity (inner
  // steps run once per outer step; retries skip them). Arming them from another node's at_step
  // callback raced the node: the crash could land in step 3, the leave after step 6's round
  // had formed (costing a retry).
  Cluster* cluster = nullptr;
  int calls3 = 0, calls2 = 0;
  o.on_launch = [&](std::int64_t id, SyntheticWorker& w) {
    if (id == 3) w.set_before_inner([&] {
        if (++calls3 == 3) cluster->kill(3);
      });
    if (id == 2) w.set_before_inner([&] {
        if (++calls2 == 6) cluster->leave(2);
      });
  };
  Cluster c(o);
  cluster = &c;
  c.at_step(3, [&] { c.add_joiner(); });
  c.start();
  c.join();
  c.check_invariants();
  RunData d;
  const std::regex time_field(R"(,?"[a-z_]+_s":[^,}]*)");
  for (std::int64_t id : c.ids()) {
    for (const Event& e : c.events(id)) {
      std::string f = std::regex_replace(e.fields.str(), time_field, "");
      if (f.size() > 1 && f[1] == ',') f.erase(1, 1);
      const std::string line = e.type + " " + f;
      if (e.type == "fail_detected" || e.type == "silent")
        d.fail_detected.insert(line);
      else
        d.streams[id].push_back(line);
    }
  }
  d.steps = c.steps();
  return d;
}

TEST(Determinism, SameChurnGivesTheSameParametersAndEventStreams) {
  const RunData a = run_scripted_churn();
  const RunData b = run_scripted_churn();
  ASSERT_EQ(a.streams.size(), 5u);
  EXPECT_EQ(a.streams, b.streams);
  EXPECT_EQ(a.fail_detected, b.fail_detected);
  // node 3 (allreduce) and node 2 (deathrattle), and node 3's silence
  EXPECT_EQ(a.fail_detected.size(), 3u);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (const auto& [step, by_node] : a.steps) {
    ASSERT_EQ(b.steps.at(step).size(), by_node.size()) << "step " << step;
    for (const auto& [id, rec] : by_node) {
      const StepRecord& other = b.steps.at(step).at(id);
      EXPECT_EQ(rec.params, other.params) << "step " << step << " node " << id;
      EXPECT_EQ(rec.momentum, other.momentum);
      EXPECT_EQ(rec.epoch, other.epoch);
      EXPECT_EQ(rec.members, other.members);
    }
  }
  // The streams hold what they should: the joiner recovered, node 2 left, the others retried.
  const auto& joiner = a.streams.at(5);
  EXPECT_NE(std::find(joiner.begin(), joiner.end(), "admitted {\"epoch\":2,\"outer_step\":5}"),
            joiner.end());
}

}  // namespace
}  // namespace meridian::testing
