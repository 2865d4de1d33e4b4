// DiLoCo over the elastic mesh without faults: the outer parameters equal an independent
// reference computation exactly, on every node, for every outer step; local ranks; phantom mode.
#include <gtest/gtest.h>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

// The reference: W nodes with ids 1..W, no faults, dyadic lr and momentum so that every value
// is exact in fp32 and the summation order of the ring cannot matter.
std::map<std::int64_t, std::vector<double>> reference(const ClusterOptions& o) {
  const int w = o.initial;
  std::vector<double> theta(o.params), buf(o.params, 0.0);
  for (std::uint64_t i = 0; i < o.params; ++i) theta[i] = static_cast<double>(i);
  std::map<std::int64_t, std::vector<double>> out;
  for (std::int64_t s = 0; s < o.outer_steps; ++s) {
    std::vector<double> g(o.params, 0.0);
    for (std::int64_t id = 1; id <= w; ++id) {
      for (std::uint64_t i = 0; i < o.params; ++i) {
        double delta = 0;  // theta - local = sum of this outer step's inner updates
        for (int k = 1; k <= o.inner_steps; ++k) {
          const std::int64_t step = s * o.inner_steps + k;
          delta += static_cast<double>((id + step + static_cast<std::int64_t>(i)) % 5 - 2);
        }
        g[i] += delta / w;
      }
    }
    for (std::uint64_t i = 0; i < o.params; ++i) {
      buf[i] = o.outer.momentum * buf[i] + g[i];
      theta[i] -= o.outer.lr * (g[i] + o.outer.momentum * buf[i]);
    }
    out[s] = theta;
  }
  return out;
}

ClusterOptions exact_options() {
  ClusterOptions o;
  o.initial = 4;
  o.outer_steps = 5;
  o.outer = {0.5f, 0.5f};
  return o;
}

void expect_matches_reference(Cluster& c, const ClusterOptions& o) {
  const auto ref = reference(o);
  const auto recs = c.steps();
  ASSERT_EQ(recs.size(), ref.size());
  for (const auto& [step, by_node] : recs) {
    ASSERT_EQ(by_node.size(), static_cast<std::size_t>(o.initial)) << "step " << step;
    for (const auto& [id, rec] : by_node) {
      ASSERT_EQ(rec.params.size(), o.params);
      for (std::uint64_t i = 0; i < o.params; ++i)
        EXPECT_EQ(static_cast<double>(rec.params[i]), ref.at(step)[i])
            << "step " << step << " node " << id << " element " << i;
    }
  }
}

TEST(Diloco, FourNodesMatchTheReferenceExactly) {
  const ClusterOptions o = exact_options();
  Cluster c(o);
  c.start();
  c.join();
  c.check_invariants();
  expect_matches_reference(c, o);
  // One epoch throughout; one epoch_formed per node; an allreduce event per bucket and step.
  EXPECT_EQ(c.all_of_type("epoch_formed").size(), 4u);
  EXPECT_EQ(c.all_of_type("allreduce").size(), 4u * 5u * 3u);
  EXPECT_EQ(c.all_of_type("outer_step").size(), 4u * 5u);
  EXPECT_TRUE(c.all_of_type("retry").empty());
}

TEST(Diloco, LocalRanksRunOneRingPerShardWithTheSameResult) {
  ClusterOptions o = exact_options();
  o.local_ranks = 3;
  Cluster c(o);
  c.start();
  c.join();
  c.check_invariants();
  expect_matches_reference(c, o);
  std::set<std::string> shards;
  for (const Event& e : c.all_of_type("allreduce")) {
    const std::string f = e.fields.str();
    shards.insert(f.substr(f.find("\"local_rank\":"), 14));
  }
  EXPECT_EQ(shards, (std::set<std::string>{"\"local_rank\":0", "\"local_rank\":1",
                                           "\"local_rank\":2"}));
}

TEST(Diloco, PhantomWorkersRunTheWholeLoop) {
  ClusterOptions o = exact_options();
  o.phantom = true;
  o.outer_steps = 3;
  Cluster c(o);
  c.start();
  std::int64_t joiner = -1;
  c.at_step(0, [&] { joiner = c.add_joiner(); });
  c.join();
  c.check_invariants();
  ASSERT_GT(joiner, 0);
  EXPECT_EQ(c.result(joiner).exit, NodeExit::kFinished);
  ASSERT_EQ(c.all_of_type("recovery_finished").size(), 1u);
  for (const Event& e : c.all_of_type("allreduce"))
    EXPECT_NE(e.fields.str().find("\"bytes_sent\":"), std::string::npos);
}

TEST(Diloco, SingleNodeRunsAlone) {
  ClusterOptions o = exact_options();
  o.initial = 1;
  Cluster c(o);
  c.start();
  c.join();
  c.check_invariants();
  expect_matches_reference(c, o);
}

}  // namespace
}  // namespace meridian::testing
