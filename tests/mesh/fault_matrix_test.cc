// The fault matrix: each case its own test, 4 nodes over the in-process transport. In every
// case no node hangs (each run returns; every wait is bounded), survivors agree on epoch, members
// and outer step, and their outer parameters and momentum are bit-identical after every step.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

ClusterOptions matrix_options() {
  ClusterOptions o;
  o.initial = 4;
  o.outer_steps = 5;
  return o;
}

// The members of the round that committed `step` (every node agrees: check_invariants).
std::vector<std::int64_t> members_at(Cluster& c, std::int64_t step) {
  return c.steps().at(step).begin()->second.members;
}

void expect_removed(Cluster& c, std::int64_t victim, const std::string& by) {
  bool found = false;
  for (const Event& e : c.all_of_type("fail_detected"))
    if (field(e, "failed") == std::to_string(victim)) {
      found = true;
      EXPECT_EQ(field(e, "by"), "\"" + by + "\"") << "node " << victim;
    }
  EXPECT_TRUE(found) << "no fail_detected for node " << victim;
  const auto last = members_at(c, 4);
  EXPECT_EQ(std::count(last.begin(), last.end(), victim), 0);
}

TEST(FaultMatrix, NodeFailsDuringInnerSteps) {
  Cluster c(matrix_options());
  c.at_step(1, [&] { c.worker(3).set_before_inner([&] { c.kill(3); }); });
  c.run_and_check();
  expect_removed(c, 3, "allreduce");
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_FALSE(c.all_of_type("retry").empty());
}

TEST(FaultMatrix, NodeFailsBeforeTheAllReduce) {
  Cluster c(matrix_options());
  c.at_step(1, [&] { c.worker(2).set_after_inner([&] { c.kill(2); }); });
  c.run_and_check();
  expect_removed(c, 2, "allreduce");
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{1, 3, 4}));
}

// Collective messages one node sends in one clean outer step of this configuration.
std::uint64_t messages_per_step(const ClusterOptions& o) {
  ClusterOptions one = o;
  one.outer_steps = 1;
  Cluster c(one);
  c.start();
  c.join();
  return c.sends(1);
}

TEST(FaultMatrix, NodeFailsDuringReduceScatter) {
  ClusterOptions o = matrix_options();
  o.boundaries = {0, o.params};  // one bucket: the first half of the messages is reduce-scatter
  const std::uint64_t m = messages_per_step(o);
  ASSERT_GE(m, 4u);
  Cluster c(o);
  c.at_step(1, [&] { c.on_send(4, 2, false, [&] { c.kill(4); }); });
  c.run_and_check();
  expect_removed(c, 4, "allreduce");
  EXPECT_EQ(c.sends(4), 2 * m + 2);  // died at (and counted) its second message of step 2
}

TEST(FaultMatrix, NodeFailsDuringAllGather) {
  ClusterOptions o = matrix_options();
  o.boundaries = {0, o.params};
  const std::uint64_t m = messages_per_step(o);
  ASSERT_EQ(m % 2, 0u);
  Cluster c(o);
  c.at_step(1, [&] { c.on_send(4, m / 2 + 1, false, [&] { c.kill(4); }); });
  c.run_and_check();
  expect_removed(c, 4, "allreduce");
  EXPECT_EQ(c.sends(4), 2 * m + m / 2 + 1);  // the first all-gather message of step 2
}

TEST(FaultMatrix, SourceFailsWhileServingARecovery) {
  Cluster c(matrix_options());
  std::int64_t joiner = -1;
  c.at_step(1, [&] {
    // Node 1 is the joiner's first source (sources = survivors in ring order). It serves the
    // layout, the private part (48 + 6 bytes: 4 chunks of 16) and its first shared chunk, then
    // dies at its 7th message; the joiner resumes node 1's remaining chunks from node 2.
    c.on_send(1, 7, true, [&] { c.kill(1); });
    joiner = c.add_joiner();
  });
  c.run_and_check();
  ASSERT_GT(joiner, 0);
  EXPECT_EQ(c.result(joiner).exit, NodeExit::kFinished);
  const auto done = c.all_of_type("recovery_finished");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(field(done[0], "resumed"), "1");
  EXPECT_EQ(field(done[0], "sources"), "[1,2]");  // both delivered chunks
  expect_removed(c, 1, "allreduce");
  // After recovery the joiner's outer state is bit-identical to its peers' (check_invariants
  // compares every step's parameters and momentum; the joiner recorded the later steps).
  EXPECT_TRUE(c.steps().at(4).count(joiner));
}

TEST(FaultMatrix, CoordinatorFails) {
  Cluster c(matrix_options());
  std::int64_t old_leader = -1;
  c.at_step(1, [&] {
    old_leader = c.leader();
    c.kill(old_leader);
  });
  c.run_and_check();
  ASSERT_GT(old_leader, 0);
  expect_removed(c, old_leader, "allreduce");
  EXPECT_NE(c.leader(), old_leader);
  EXPECT_EQ(members_at(c, 4).size(), 3u);
}

TEST(FaultMatrix, JoinerArrivesDuringInnerSteps) {
  Cluster c(matrix_options());
  c.join_at(1);
  c.run_and_check();
  const std::int64_t joiner = c.joiner_of(1);
  ASSERT_GT(joiner, 0);
  EXPECT_EQ(c.result(joiner).exit, NodeExit::kFinished);
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{1, 2, 3, 4, joiner}));
  EXPECT_EQ(c.all_of_type("admitted").size(), 1u);
  EXPECT_EQ(c.all_of_type("recovery_finished").size(), 1u);
  EXPECT_TRUE(c.all_of_type("retry").empty());
}

TEST(FaultMatrix, JoinerArrivesDuringAnAllReduce) {
  Cluster c(matrix_options());
  std::int64_t joiner = -1;
  c.at_step(1, [&] { c.on_send(2, 2, false, [&] { joiner = c.add_joiner(); }); });
  c.run_and_check();
  ASSERT_GT(joiner, 0);
  EXPECT_EQ(c.result(joiner).exit, NodeExit::kFinished);
  const auto last = members_at(c, 4);
  EXPECT_EQ(last.size(), 5u);
  EXPECT_TRUE(c.all_of_type("retry").empty());
}

TEST(FaultMatrix, TwoOfFourFailAtOnce) {
  Cluster c(matrix_options());
  c.at_step(1, [&] {
    c.kill(2);
    c.kill(4);
  });
  c.run_and_check();
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{1, 3}));
}

TEST(FaultMatrix, AllButOneFail) {
  Cluster c(matrix_options());
  c.at_step(1, [&] {
    c.kill(1);
    c.kill(2);
    c.kill(4);
  });
  c.run_and_check();
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(c.result(3).exit, NodeExit::kFinished);
}

TEST(FaultMatrix, NodeLeavesGracefully) {
  ClusterOptions o = matrix_options();
  o.dead_after_s = 5.0;  // nobody dies here: a starved heartbeat must not look like a death
  Cluster c(o);
  c.at_step(1, [&] { c.leave(3); });
  c.run_and_check();
  EXPECT_EQ(c.result(3).exit, NodeExit::kLeft);
  expect_removed(c, 3, "deathrattle");
  EXPECT_TRUE(c.all_of_type("retry").empty());  // a graceful leave costs no retry
  EXPECT_EQ(members_at(c, 2), (std::vector<std::int64_t>{1, 2, 3, 4}));  // it finished step 2
  EXPECT_EQ(members_at(c, 3), (std::vector<std::int64_t>{1, 2, 4}));
}

TEST(FaultMatrix, ANodeDeclaredDeadWhileAliveIsEvicted) {
  ClusterOptions o = matrix_options();
  // Long enough that the live nodes' heartbeats are not starved into a death on a loaded
  // machine; the muted node is still declared dead within a second.
  o.dead_after_s = 1.0;
  // A member that is not the coordinator stalls in its inner steps of step 2 with its heartbeat
  // silent: the others' rings time out, the coordinator declares it dead and retries without it
  // (round 3). When the node wakes up, the next record does not name it: it stops as evicted.
  // The hooks are installed at launch and act on the worker's own step count: installed from
  // an outer-step callback (another node's activity), they raced the node, which could already
  // be in the inner steps of step 2 (a timing-dependent failure, more frequent once a heartbeat
  // became one store read).
  std::atomic<Cluster*> cluster{nullptr};
  std::atomic<std::int64_t> victim{-1};
  std::mutex pick;
  o.on_launch = [&](std::int64_t id, SyntheticWorker& worker) {
    if (id != 3 && id != 4) return;
    worker.set_before_inner([&, id, &w = worker, inner = o.inner_steps] {
      if (w.inner_steps_done() != 2 * static_cast<std::int64_t>(inner)) return;  // not step 2
      Cluster& c = *cluster.load();
      {
        std::lock_guard<std::mutex> lock(pick);
        if (victim.load() < 0) victim = c.leader() == 4 ? 3 : 4;
      }
      if (id != victim.load()) return;
      c.allow_eviction(id);
      c.mute_heartbeat(id, true);
      const std::string removed = "removed=" + std::to_string(id);
      c.store().wait({"mesh/round/000000000003"}, 20.0);
      ASSERT_NE(c.store().try_get("mesh/round/000000000003")->find(removed), std::string::npos);
    });
  };
  Cluster c(o);
  cluster = &c;
  c.run_and_check();
  const std::int64_t v = victim.load();
  ASSERT_GT(v, 0);
  EXPECT_EQ(c.result(v).exit, NodeExit::kEvicted);
  expect_removed(c, v, "allreduce");
  EXPECT_EQ(members_at(c, 4).size(), 3u);
}

TEST(FaultMatrix, ANodeSendingCorruptChunksIsEvicted) {
  Cluster c(matrix_options());
  // From step 2 on node 3 corrupts every ring message it sends. Its successor rejects the first
  // one (ProtocolError: the checksum), blames it in its report, and the coordinator retries
  // without it: the liar is cut off at once, like a dead node, and stops as evicted.
  c.at_step(1, [&] {
    c.allow_eviction(3);
    c.corrupt_sends(3);
  });
  c.run_and_check();
  EXPECT_EQ(c.result(3).exit, NodeExit::kEvicted);
  expect_removed(c, 3, "protocol");
  EXPECT_EQ(members_at(c, 2), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(c.all_of_type("retry").size(), 3u);  // one retry of step 2, seen by 3 survivors
  EXPECT_TRUE(c.all_of_type("fallback").empty());
}

// A straggler: node 2's inner steps of step 2 take 0.5 s of (modelled) compute, more than the
// ring's 0.2 s timeout. With the ready barrier the others wait for it (it is alive) and nothing
// fails; without it their rings time out and the step is retried.
std::size_t retries_with_a_straggler(bool barrier) {
  ClusterOptions o = matrix_options();
  o.allreduce_timeout_s = 0.2;
  o.barrier = barrier;
  Cluster c(o);
  c.at_step(1, [&] {
    c.worker(2).set_before_inner([&c] {
      c.worker(2).set_before_inner(nullptr);
      c.runtime().compute_s(0.5);
    });
  });
  c.run_and_check();
  return c.all_of_type("retry").size();
}

TEST(FaultMatrix, AStragglerIsWaitedForNotFailed) {
  EXPECT_EQ(retries_with_a_straggler(true), 0u);
  EXPECT_GT(retries_with_a_straggler(false), 0u);
}

TEST(FaultMatrix, RetriesExhaustedFallBackToTheLocalPseudoGradientWithAnEvent) {
  ClusterOptions o = matrix_options();
  Cluster c(o);
  // Node 2's collective transport fails on every attempt of step 2 (the node itself stays
  // alive, so the mesh keeps it): 1 try + 3 retries, then every node falls back.
  std::function<void()> fail_again;
  int failures = 0;
  fail_again = [&] {
    if (++failures < 4) c.on_send(2, 1, false, fail_again);
    throw PeerLostError(-1, "injected transport failure");
  };
  c.at_step(1, [&] { c.on_send(2, 1, false, fail_again); });
  c.start();
  c.join();
  EXPECT_EQ(failures, 4);
  EXPECT_EQ(c.all_of_type("retry").size(), 4u * 3u);
  EXPECT_EQ(c.all_of_type("fallback").size(), 4u);
  const auto step2 = c.steps().at(2);
  for (const auto& [id, rec] : step2) EXPECT_TRUE(rec.fallback);
}

TEST(FaultMatrix, ConnectFailuresAreRetriedPastMaxRetriesWithoutAFallback) {
  Cluster c(matrix_options());
  // Step 2's all-reduce fails once on node 2's send (a retry forms a new epoch), then node 2's
  // collective connects fail on the next 5 attempts (attempts 1-5: past max_retries, 3). The
  // node stays alive and nothing is exchanged, so the round is retried until it connects
  // (attempt 6), and nobody falls back (which would set the nodes' parameters apart).
  c.at_step(1, [&] {
    c.fail_connects(2, 5);
    c.on_send(2, 1, false, [] { throw PeerLostError(-1, "injected transport failure"); });
  });
  c.run_and_check();
  EXPECT_EQ(c.connect_failures_left(2), 0);
  EXPECT_TRUE(c.all_of_type("fallback").empty());
  EXPECT_EQ(c.all_of_type("retry").size(), 4u * 6u);
  EXPECT_EQ(members_at(c, 4), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace meridian::testing
