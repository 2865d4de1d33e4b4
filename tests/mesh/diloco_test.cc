// DiLoCo over the elastic mesh without faults: the outer parameters equal an independent
// reference computation exactly, on every node, for every outer step; local ranks; phantom mode.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

// The reference: W nodes with ids 1..W, no faults, dyadic lr and momentum so that every value
// is exact in fp32 and the summation order of the ring cannot matter. `sits_out`: outer step ->
// the node whose pseudo-gradient is left out of it (the others average without it).
std::map<std::int64_t, std::vector<double>> reference(
    const ClusterOptions& o, const std::map<std::int64_t, std::int64_t>& sits_out = {}) {
  std::vector<double> theta(o.params), buf(o.params, 0.0);
  for (std::uint64_t i = 0; i < o.params; ++i) theta[i] = static_cast<double>(i);
  std::map<std::int64_t, std::vector<double>> out;
  for (std::int64_t s = 0; s < o.outer_steps; ++s) {
    std::vector<double> g(o.params, 0.0);
    const auto absent = sits_out.find(s);
    const int w = o.initial - (absent != sits_out.end() ? 1 : 0);
    for (std::int64_t id = 1; id <= o.initial; ++id) {
      if (absent != sits_out.end() && absent->second == id) continue;
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

// Steps [0, steps) of `c` equal the reference (ring order cannot matter: the math is exact).
void expect_matches_reference_for_steps(Cluster& c, const ClusterOptions& o, std::int64_t steps) {
  const auto ref = reference(o);
  const auto recs = c.steps();
  for (const auto& [step, by_node] : recs) {
    if (step >= steps) break;
    ASSERT_EQ(by_node.size(), static_cast<std::size_t>(o.initial)) << "step " << step;
    for (const auto& [id, rec] : by_node) {
      ASSERT_EQ(rec.params.size(), o.params);
      for (std::uint64_t i = 0; i < o.params; ++i)
        EXPECT_EQ(static_cast<double>(rec.params[i]), ref.at(step)[i])
            << "step " << step << " node " << id << " element " << i;
    }
  }
}

void expect_matches_reference(Cluster& c, const ClusterOptions& o) {
  ASSERT_EQ(c.steps().size(), static_cast<std::size_t>(o.outer_steps));
  expect_matches_reference_for_steps(c, o, o.outer_steps);
}

TEST(Diloco, FourNodesMatchTheReferenceExactly) {
  const ClusterOptions o = exact_options();
  Cluster c(o);
  c.run_and_check();
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
  c.run_and_check();
  expect_matches_reference(c, o);
  std::set<std::string> shards;
  for (const Event& e : c.all_of_type("allreduce")) {
    const std::string f = e.fields.str();
    shards.insert(f.substr(f.find("\"local_rank\":"), 14));
  }
  EXPECT_EQ(shards,
            (std::set<std::string>{"\"local_rank\":0", "\"local_rank\":1", "\"local_rank\":2"}));
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

TEST(Diloco, RingOrderFollowsTheBandwidthMatrix) {
  ClusterOptions o = exact_options();
  o.outer_steps = 3;
  // Only the directed links 1->3->2->4->1 are fast.
  o.bandwidth_bps = [](std::int64_t from, std::int64_t to) {
    static const std::set<std::pair<std::int64_t, std::int64_t>> fast = {
        {1, 3}, {3, 2}, {2, 4}, {4, 1}};
    return fast.count({from, to}) ? 1e10 : 1e8;
  };
  Cluster c(o);
  c.join_at(0);
  c.run_and_check();
  const std::int64_t joiner = c.joiner_of(0);
  expect_matches_reference_for_steps(c, o, 1);
  EXPECT_EQ(c.steps().at(0).begin()->second.members, (std::vector<std::int64_t>{1, 3, 2, 4}));
  // The joiner (admitted at step 2) is slow on every link, so every ring is equally good and the
  // solver keeps the lexicographically first: survivors in their order, the joiner appended.
  EXPECT_EQ(c.steps().at(2).begin()->second.members,
            (std::vector<std::int64_t>{1, 3, 2, 4, joiner}));
}

TEST(Diloco, BlockingRecoveryGivesTheSameResult) {
  ClusterOptions o = exact_options();
  o.blocking_recovery = true;
  o.recovery_sources = 3;
  Cluster c(o);
  c.join_at(1);
  c.run_and_check();
  const std::int64_t joiner = c.joiner_of(1);
  ASSERT_GT(joiner, 0);
  const auto done = c.all_of_type("recovery_finished");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_NE(done[0].fields.str().find("\"sources\":[1,2,3]"), std::string::npos);
  // The joiner's inner state and progress are its first source's (node 1).
  EXPECT_EQ(c.worker(joiner).step(), c.worker(1).step());
  EXPECT_TRUE(std::equal(c.worker(joiner).moment().begin(), c.worker(joiner).moment().end(),
                         c.worker(1).moment().begin()));
}

TEST(Diloco, LossyCodecsKeepNodesBitIdenticalAndCloseToTheExactResult) {
  for (const CodecId codec :
       {CodecId::kBf16, CodecId::kInt8Prime, CodecId::kInt8MinMax, CodecId::kFp4}) {
    ClusterOptions o = exact_options();
    o.codec = codec;
    o.params = 64;
    o.boundaries = {0, 40, 64};
    o.max_chunk_bytes = 4096;  // int8 pieces carry a 1 KiB table
    Cluster c(o);
    c.run_and_check();  // bit-identical outer parameters on every node, every step
    const auto ref = reference(o);
    double worst = 0;
    for (const auto& [step, by_node] : c.steps())
      for (std::uint64_t i = 0; i < o.params; ++i)
        worst = std::max(worst, std::abs(by_node.begin()->second.params[i] - ref.at(step)[i]));
    // The pseudo-gradients are small integers (|g| <= 6 before averaging): a codec that misroutes
    // or drops a chunk is off by whole units, rounding stays far below (measured: bf16 and PRIME
    // int8 reproduce these few distinct values exactly, int8 min/max is off by 0.012, fp4 by
    // 0.90).
    // fp4 (E3M0) rounds each partial sum to a power of two, off by up to a third, so it moves
    // these parameters by about as much as a lost chunk would; its bound is the measured 0.90
    // (deterministic: same data, same ring order) with a margin, a guard against a change in
    // what the ring quantizes rather than a proof.
    EXPECT_LT(worst, codec == CodecId::kFp4 ? 1.0 : 0.5) << codec_name(codec);
    EXPECT_GT(c.all_of_type("allreduce").size(), 0u);
  }
}

// What `meridian train --resume` relies on (cli/train/README.md): nodes started afresh from
// the state of an outer-step boundary (outer parameters, outer momentum, inner state) with
// first_outer_step continue the run bit for bit. lr and momentum are not dyadic here, so the
// values are inexact in fp32 and any difference (a momentum not restored, a step off by one in
// the worker's progress) shows.
TEST(Diloco, ARunResumedFromAnOuterStepBoundaryIsBitIdentical) {
  ClusterOptions o;
  o.initial = 3;
  o.outer_steps = 5;
  o.outer = {0.7f, 0.9f};
  Cluster whole(o);
  whole.run_and_check();
  const auto ref = whole.steps();
  constexpr std::int64_t kDone = 2;  // resume with outer steps 0 and 1 applied
  ClusterOptions r = o;
  resume_from(r, ref, kDone, kDone * o.inner_steps);
  Cluster resumed(r);
  resumed.run_and_check();
  const auto got = resumed.steps();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(o.outer_steps - kDone));
  for (const auto& [step, by_node] : got) {
    ASSERT_EQ(by_node.size(), 3u) << "step " << step;
    for (const auto& [id, rec] : by_node) {
      EXPECT_EQ(rec.params, ref.at(step).at(id).params) << "step " << step << " node " << id;
      EXPECT_EQ(rec.momentum, ref.at(step).at(id).momentum) << "step " << step << " node " << id;
    }
  }
  // Round 0 of the resumed run computed outer step kDone.
  const auto formed = resumed.all_of_type("epoch_formed");
  ASSERT_FALSE(formed.empty());
  EXPECT_NE(formed[0].fields.str().find("\"outer_step\":2"), std::string::npos)
      << formed[0].fields.str();
  // Without the momentum the continuation differs (the test can fail).
  ClusterOptions no_momentum = r;
  no_momentum.resume_momentum = nullptr;
  Cluster wrong(no_momentum);
  wrong.run_and_check();
  EXPECT_NE(wrong.steps().at(kDone).at(1).params, ref.at(kDone).at(1).params);
}

// The non-finite guard: node 3's inner worker produces NaN in the last inner step of outer step
// 2. Node 3 reports itself (event `nonfinite`) and sits the step out: the round is retried with
// it in the record's `abstain` list, it contributes zeros, and the others divide by 4, not 5. The
// run finishes with every node (node 3 included) agreeing bit for bit on finite parameters
// that equal the reference without node 3's share of step 2.
TEST(Diloco, ANodeWithANonFinitePseudoGradientSitsTheStepOut) {
  ClusterOptions o = exact_options();
  o.initial = 5;  // 4 contributors in the faulty step: dividing by 4 stays exact
  o.outer_steps = 5;
  const std::int64_t faulty = 3, bad_step = 2;
  o.on_launch = [&](std::int64_t id, SyntheticWorker& w) {
    if (id != faulty) return;
    w.set_after_inner([&w, &o] {
      if (w.inner_steps_done() == (bad_step + 1) * o.inner_steps)
        w.parameters()[5] = std::numeric_limits<float>::quiet_NaN();
    });
  };
  Cluster c(o);
  c.run_and_check();  // every node finished; bit-identical parameters and momentum every step
  const auto ref = reference(o, {{bad_step, faulty}});
  for (const auto& [step, by_node] : c.steps()) {
    ASSERT_EQ(by_node.size(), 5u) << "step " << step;  // node 3 stayed a member
    for (std::uint64_t i = 0; i < o.params; ++i) {
      const float p = by_node.begin()->second.params[i];
      ASSERT_TRUE(std::isfinite(p)) << "step " << step << " element " << i;
      // 1/5 is not exact in fp32: bounded error in the steps all five contribute to.
      EXPECT_NEAR(p, ref.at(step)[i], 1e-4 * (1 + std::abs(ref.at(step)[i])))
          << "step " << step << " element " << i;
    }
  }
  const auto reports = c.all_of_type("nonfinite");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].node, faulty);
  const std::string f = reports[0].fields.str();
  EXPECT_NE(f.find("\"outer_step\":2"), std::string::npos) << f;
  EXPECT_NE(f.find("\"values\":1"), std::string::npos) << f;
  EXPECT_NE(f.find("\"action\":\"abstain\""), std::string::npos) << f;
  // One retry of step 2 on every node, and that step's outer_step events count 4 contributors.
  EXPECT_EQ(c.all_of_type("retry").size(), 5u);
  for (const Event& e : c.all_of_type("outer_step")) {
    const std::string g = e.fields.str();
    const bool faulty_step = g.find("\"outer_step\":2,") != std::string::npos;
    EXPECT_NE(g.find(faulty_step ? "\"contributors\":4" : "\"contributors\":5"), std::string::npos)
        << g;
  }
}

// Node `faulty` of `o` produces NaN in the inner steps of every outer step in `bad` (the
// non-finite guard makes it sit those steps out); the run uses nonfinite_evict_after = k.
void make_non_finite_in(ClusterOptions& o, std::int64_t faulty, std::set<std::int64_t> bad, int k) {
  o.configure = [k](DilocoOptions& d) { d.mesh.nonfinite_evict_after = k; };
  o.on_launch = [faulty, bad, inner = o.inner_steps](std::int64_t id, SyntheticWorker& w) {
    if (id != faulty) return;
    w.set_after_inner([&w, bad, inner] {
      if (bad.count(w.inner_steps_done() / inner - 1))
        w.parameters()[5] = std::numeric_limits<float>::quiet_NaN();
    });
  };
}

// The non-finite rule: node 3 is non-finite in every outer step. It sits out steps 0, 1 and 2
// (one retry each), and the coordinator evicts it in the record that commits the third, with a
// `nonfinite` (action evict) and a `fail_detected` (by nonfinite) record. The other four go on
// to the end, agreeing bit for bit every step (check_invariants) on the reference without node
// 3's share in any step (dividing by 4 is exact).
TEST(Diloco, ANodeNonFiniteForKStepsInARowIsEvicted) {
  ClusterOptions o = exact_options();
  o.initial = 5;
  o.outer_steps = 6;
  const std::int64_t faulty = 3;
  const int k = 3;
  make_non_finite_in(o, faulty, {0, 1, 2, 3, 4, 5}, k);
  Cluster c(o);
  c.allow_eviction(faulty);
  c.run_and_check();
  const NodeResult r = c.result(faulty);
  EXPECT_EQ(r.exit, NodeExit::kEvicted) << node_exit_name(r.exit) << ": " << r.what;
  EXPECT_NE(r.what.find("non-finite pseudo-gradient in 3 outer steps in a row"), std::string::npos)
      << r.what;
  std::map<std::int64_t, std::int64_t> sits_out;
  for (std::int64_t s = 0; s < o.outer_steps; ++s) sits_out[s] = faulty;
  const auto ref = reference(o, sits_out);
  for (const auto& [step, by_node] : c.steps()) {
    // A member of the rounds of steps 0..k-1; the record that commits step k - 1 evicts it, so
    // it applied steps 0..k-2 only.
    EXPECT_EQ(by_node.count(faulty), step < k - 1 ? 1u : 0u) << "step " << step;
    ASSERT_EQ(by_node.size(), step < k - 1 ? 5u : 4u) << "step " << step;
    for (const auto& [id, rec] : by_node) {
      EXPECT_EQ(std::count(rec.members.begin(), rec.members.end(), faulty), step < k ? 1 : 0);
      for (std::uint64_t i = 0; i < o.params; ++i)
        EXPECT_EQ(static_cast<double>(rec.params[i]), ref.at(step)[i])
            << "step " << step << " node " << id << " element " << i;
    }
  }
  // It reported itself in exactly k steps; one eviction, by the coordinator, after step k - 1.
  std::vector<Event> abstained, evicted;
  for (const Event& e : c.all_of_type("nonfinite"))
    (e.fields.str().find("\"action\":\"evict\"") != std::string::npos ? evicted : abstained)
        .push_back(e);
  EXPECT_EQ(abstained.size(), static_cast<std::size_t>(k));
  for (const Event& e : abstained) EXPECT_EQ(e.node, faulty);
  ASSERT_EQ(evicted.size(), 1u);
  const std::string f = evicted[0].fields.str();
  EXPECT_NE(f.find("\"outer_step\":2,\"faulty\":3,\"detected_by\":\"coordinator\""),
            std::string::npos)
      << f;
  EXPECT_NE(f.find("\"steps\":3"), std::string::npos) << f;
  const auto failed = c.all_of_type("fail_detected");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].fields.str(), R"({"failed":3,"by":"nonfinite"})");
}

// Sitting out fewer than k steps in a row costs no place: node 3 is non-finite in steps 0, 1,
// then fine, then 3, 4 (k = 3: each streak stops one short), and with k = 0 (never) in every
// step. It stays a member to the end (check_invariants: every node finished).
TEST(Diloco, ANodeNonFiniteFewerThanKStepsInARowStays) {
  for (const auto& [bad, k] : std::vector<std::pair<std::set<std::int64_t>, int>>{
           {{0, 1, 3, 4}, 3}, {{0, 1, 2, 3, 4, 5}, 0}}) {
    ClusterOptions o = exact_options();
    o.initial = 5;
    o.outer_steps = 6;
    make_non_finite_in(o, 3, bad, k);
    Cluster c(o);
    c.run_and_check();
    EXPECT_EQ(c.result(3).exit, NodeExit::kFinished) << "k " << k;
    for (const auto& [step, by_node] : c.steps())
      EXPECT_EQ(by_node.size(), 5u) << "k " << k << " step " << step;
    EXPECT_EQ(c.all_of_type("nonfinite").size(), bad.size()) << "k " << k;  // no evict record
    EXPECT_TRUE(c.all_of_type("fail_detected").empty()) << "k " << k;
  }
}

TEST(Diloco, SingleNodeRunsAlone) {
  ClusterOptions o = exact_options();
  o.initial = 1;
  Cluster c(o);
  c.run_and_check();
  expect_matches_reference(c, o);
}

}  // namespace
}  // namespace meridian::testing
