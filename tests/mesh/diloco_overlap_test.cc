// Overlapped outer steps (diloco.overlap: delayed, eager; engine/core/diloco/README.md): the shared
// outer state against a plain per-element reference of the update rule written here, the
// parameters each inner phase starts from, that the next inner steps really run beside the
// all-reduce, a joiner, a node killed during an overlapped all-reduce, and a resume that carries
// the pending pseudo-gradient bit-identically.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

// The synthetic worker's update does not depend on where its inner steps start: inner step k
// (counted over the run, from 1) of node m moves element i by -((m + k + i) % 5 - 2). So node
// m's pseudo-gradient of outer step t, Delta_m(t) = start - local, is this sum over the H steps
// of its phase t, whichever parameters the phase started from.
double delta(std::int64_t node, std::int64_t outer_step, int h, std::uint64_t i) {
  double d = 0;
  for (int k = 1; k <= h; ++k) {
    const std::int64_t step = outer_step * h + k;
    d += static_cast<double>((node + step + static_cast<std::int64_t>(i)) % 5 - 2);
  }
  return d;
}

// The update rule, element by element in double (dyadic lr and momentum: exact in fp32):
//   theta(t) = Nesterov(theta(t-1), avg_{m in C(t)} Delta_m(t)),   theta(-1) = theta_0,
// where C(t) are the nodes whose pseudo-gradient of step t is averaged. Overlap changes when
// theta(t) is applied (one step late) and where inner steps start, not this sequence.
struct Reference {
  std::map<std::int64_t, std::vector<double>> theta;  // after outer step t
  std::map<std::int64_t, std::vector<double>> avg;    // avg Delta(t)
};

Reference reference(const ClusterOptions& o,
                    const std::map<std::int64_t, std::vector<std::int64_t>>& contributors) {
  Reference ref;
  std::vector<double> theta(o.params), buf(o.params, 0.0);
  for (std::uint64_t i = 0; i < o.params; ++i) theta[i] = static_cast<double>(i);
  for (const auto& [t, ids] : contributors) {
    std::vector<double> g(o.params, 0.0);
    for (std::int64_t m : ids)
      for (std::uint64_t i = 0; i < o.params; ++i)
        g[i] += delta(m, t, o.inner_steps, i) / static_cast<double>(ids.size());
    for (std::uint64_t i = 0; i < o.params; ++i) {
      buf[i] = o.outer.momentum * buf[i] + g[i];
      theta[i] -= o.outer.lr * (g[i] + o.outer.momentum * buf[i]);
    }
    ref.theta[t] = theta;
    ref.avg[t] = g;
  }
  return ref;
}

ClusterOptions overlap_options(Overlap overlap) {
  ClusterOptions o;
  o.initial = 4;
  o.outer_steps = 6;
  o.outer = {0.5f, 0.5f};
  o.overlap = overlap;
  return o;
}

std::map<std::int64_t, std::vector<std::int64_t>> everyone(const ClusterOptions& o) {
  std::map<std::int64_t, std::vector<std::int64_t>> c;
  for (std::int64_t t = 0; t < o.outer_steps; ++t)
    for (std::int64_t m = 1; m <= o.initial; ++m) c[t].push_back(m);
  return c;
}

// Every node's outer parameters after every step (but `skip`'s) equal the reference's: exactly
// when every divisor is a power of two (`relative` = 0), else within fp32 rounding (an average
// over 3 is not exact in fp32; a wrong divisor is off by a quarter or more).
void expect_theta_matches(Cluster& c, const Reference& ref, double relative = 0,
                          std::int64_t skip = -1) {
  const auto steps = c.steps();
  ASSERT_EQ(steps.size(), ref.theta.size());
  for (const auto& [t, by_node] : steps)
    for (const auto& [id, rec] : by_node) {
      if (id == skip) continue;
      ASSERT_EQ(rec.params.size(), ref.theta.at(t).size());
      for (std::size_t i = 0; i < rec.params.size(); ++i) {
        const double want = ref.theta.at(t)[i];
        ASSERT_NEAR(static_cast<double>(rec.params[i]), want,
                    relative * std::max(1.0, std::abs(want)))
            << "outer step " << t << " node " << id << " element " << i;
      }
    }
}

// Records the parameters each node's inner phase starts from, by node and phase (from 0).
class StartRecorder {
 public:
  void install(ClusterOptions& o) {
    o.on_launch = [this](std::int64_t id, SyntheticWorker& w) {
      w.set_before_inner([this, id, &w] {
        const std::span<float> p = w.parameters();
        std::lock_guard<std::mutex> lock(mu_);
        starts_[id].emplace_back(p.begin(), p.end());
      });
    };
  }
  std::map<std::int64_t, std::vector<std::vector<float>>> starts() {
    std::lock_guard<std::mutex> lock(mu_);
    return starts_;
  }

 private:
  std::mutex mu_;
  std::map<std::int64_t, std::vector<std::vector<float>>> starts_;
};

// Phase 0 starts from theta_0; phase t >= 1 from theta(t-2) (delayed: the average of t-1 is not
// there yet), and under eager also minus lr (1 + mu) Delta_m(t-1) / W, the Nesterov step's share
// of the node's own pseudo-gradient standing in for the average.
void expect_starts(StartRecorder& rec, const ClusterOptions& o, const Reference& ref) {
  const auto starts = rec.starts();
  ASSERT_EQ(starts.size(), static_cast<std::size_t>(o.initial));
  for (const auto& [id, phases] : starts) {
    ASSERT_EQ(phases.size(), static_cast<std::size_t>(o.outer_steps)) << "node " << id;
    for (std::size_t t = 0; t < phases.size(); ++t)
      for (std::uint64_t i = 0; i < o.params; ++i) {
        const auto ti = static_cast<std::int64_t>(t);
        double want = t < 2 ? static_cast<double>(i) : ref.theta.at(ti - 2)[i];
        if (o.overlap == Overlap::kEager && t >= 1)
          want -= o.outer.lr * (1 + o.outer.momentum) * delta(id, ti - 1, o.inner_steps, i) /
                  static_cast<double>(o.initial);
        ASSERT_EQ(static_cast<double>(phases[t][i]), want)
            << "node " << id << " phase " << t << " element " << i;
      }
  }
}

class OverlapTest : public ::testing::TestWithParam<Overlap> {};

TEST_P(OverlapTest, OuterStateMatchesTheReferenceAndPhasesStartWhereTheRuleSays) {
  ClusterOptions o = overlap_options(GetParam());
  StartRecorder rec;
  rec.install(o);
  Cluster c(o);
  c.run_and_check();
  const Reference ref = reference(o, everyone(o));
  expect_theta_matches(c, ref);
  expect_starts(rec, o, ref);
  // Each step's view carries the next step's pending pseudo-gradient, the last step's none.
  const auto steps = c.steps();
  for (const auto& [t, by_node] : steps)
    for (const auto& [id, r] : by_node) {
      if (t + 1 == o.outer_steps) {
        EXPECT_TRUE(r.pending.empty());
        continue;
      }
      ASSERT_EQ(r.pending.size(), o.params);
      for (std::uint64_t i = 0; i < o.params; ++i)
        ASSERT_EQ(static_cast<double>(r.pending[i]), delta(id, t + 1, o.inner_steps, i));
    }
}

TEST_P(OverlapTest, TheNextInnerStepsRunBesideTheAllReduce) {
  ClusterOptions o = overlap_options(GetParam());
  o.inner_step_s = 0.02;  // 60 ms of inner steps per phase; the ring takes ~1 ms here
  Cluster c(o);
  c.run_and_check();
  // Per node, the inner steps of step t+1 started before step t was applied (event order on
  // the node's own sink), and every outer_step event says how long the sync kept it idle.
  for (std::int64_t id = 1; id <= o.initial; ++id) {
    std::int64_t applied = -1;
    std::set<std::int64_t> started;
    for (const Event& e : c.events(id)) {
      if (e.type == "inner_steps") started.insert(std::stoll(field(e, "outer_step")));
      if (e.type != "outer_step") continue;
      applied = std::stoll(field(e, "outer_step"));
      if (applied + 1 < o.outer_steps) {
        EXPECT_TRUE(started.count(applied + 1)) << "node " << id << " step " << applied;
      }
      EXPECT_GE(std::stod(field(e, "exposed_s")), 0.0);
    }
    EXPECT_EQ(applied, o.outer_steps - 1);
  }
}

TEST_P(OverlapTest, AJoinerSendsNothingForItsFirstStepAndAgreesAfter) {
  ClusterOptions o = overlap_options(GetParam());
  o.initial = 3;
  o.outer_steps = 7;
  Cluster c(o);
  c.join_at(1);
  c.run_and_check();
  const std::int64_t j = c.joiner_of(1);
  ASSERT_GT(j, 0);
  // The step it was admitted at is the first whose members name it: it has no pseudo-gradient
  // of that step (its inner steps did not run), so the others average without it.
  const auto steps = c.steps();
  std::map<std::int64_t, std::vector<std::int64_t>> contributors;
  std::int64_t admitted = -1;
  for (const auto& [t, by_node] : steps) {
    const std::vector<std::int64_t>& members = by_node.begin()->second.members;
    for (std::int64_t m : members) {
      if (m == j && admitted < 0) admitted = t;
      if (m != j || t > admitted) contributors[t].push_back(m);
    }
    std::sort(contributors[t].begin(), contributors[t].end());
  }
  ASSERT_GE(admitted, 1);
  ASSERT_LT(admitted, o.outer_steps - 1) << "the joiner must contribute to a later step";
  EXPECT_TRUE(steps.at(admitted).count(j));
  expect_theta_matches(c, reference(o, contributors), 1e-5);
}

// The record that admits a joiner is written once every member reported, and a member reports
// once its next inner steps ended too: its sources serve it at once. (Reported at the ring's
// end, the record came while the sources' 2.4 s of inner steps still ran, and the joiner's
// first request ran out of its 2 s bound: every joiner of intellect1-full was lost so.)
TEST_P(OverlapTest, AJoinerIsServedAtOnceThoughTheSourcesInnerStepsAreLong) {
  ClusterOptions o = overlap_options(GetParam());
  o.initial = 2;
  o.outer_steps = 4;
  o.inner_step_s = 0.8;  // a phase of 3 inner steps: 2.4 s, more than recovery.timeout_s (2 s)
  Cluster c(o);
  c.join_at(0);
  c.run_and_check();
  const std::int64_t j = c.joiner_of(0);
  ASSERT_GT(j, 0);
  EXPECT_EQ(c.result(j).exit, NodeExit::kFinished) << c.result(j).what;
  EXPECT_EQ(c.all_of_type("recovery_finished").size(), 1u);
  EXPECT_TRUE(c.steps().at(o.outer_steps - 1).count(j));
}

TEST_P(OverlapTest, ANodeKilledDuringAnOverlappedAllReduceIsRetriedWithoutIt) {
  ClusterOptions o = overlap_options(GetParam());
  o.boundaries = {0, o.params};
  Cluster c(o);
  // Step 2's all-reduce runs while the survivors' inner steps of step 3 do.
  run_with_node_4_killed_in_step_2s_collective(c, o.outer_steps);
  std::map<std::int64_t, std::vector<std::int64_t>> contributors = everyone(o);
  for (std::int64_t t = 2; t < o.outer_steps; ++t) contributors[t] = {1, 2, 3};
  expect_theta_matches(c, reference(o, contributors), 1e-5, /*skip=*/4);
}

TEST_P(OverlapTest, ARunResumedWithItsPendingPseudoGradientIsBitIdentical) {
  ClusterOptions o = overlap_options(GetParam());
  o.initial = 3;
  o.outer = {0.7f, 0.9f};  // not dyadic: bit-identity, not the reference, is the claim
  Cluster whole(o);
  whole.run_and_check();
  const auto ref = whole.steps();
  constexpr std::int64_t kDone = 2;  // steps 0 and 1 applied; step 2's inner steps ran
  ClusterOptions r = o;
  resume_from(r, ref, kDone, (kDone + 1) * o.inner_steps, /*pending=*/true);
  Cluster resumed(r);
  resumed.run_and_check();
  expect_resumed_matches(resumed.steps(), ref, kDone, o.outer_steps);
  // Without the pending pseudo-gradient the node reruns step 2's inner steps: it differs.
  ClusterOptions no_pending = r;
  no_pending.resume_pending = nullptr;
  Cluster other(no_pending);
  other.run_and_check();
  EXPECT_NE(other.steps().at(kDone).at(1).params, ref.at(kDone).at(1).params);
}

TEST_P(OverlapTest, PhantomWorkersRunTheOverlappedLoop) {
  ClusterOptions o = overlap_options(GetParam());
  o.phantom = true;
  Cluster c(o);
  c.run_and_check();
  EXPECT_EQ(c.all_of_type("outer_step").size(), static_cast<std::size_t>(4 * o.outer_steps));
  EXPECT_EQ(c.all_of_type("inner_steps").size(), static_cast<std::size_t>(4 * o.outer_steps));
}

INSTANTIATE_TEST_SUITE_P(Diloco, OverlapTest,
                         ::testing::Values(Overlap::kDelayed, Overlap::kEager),
                         [](const auto& info) { return std::string(overlap_name(info.param)); });

TEST(Overlap, ParseNamesTheChoices) {
  EXPECT_EQ(parse_overlap("none"), Overlap::kNone);
  EXPECT_EQ(parse_overlap("eager"), Overlap::kEager);
  try {
    parse_overlap("async");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("none, delayed, eager"), std::string::npos) << e.what();
  }
}

TEST(Overlap, APendingPseudoGradientWithoutOverlapIsAConfigurationError) {
  ClusterOptions o = overlap_options(Overlap::kNone);
  o.resume_pending = [&](std::int64_t) { return std::vector<float>(o.params, 1.0f); };
  const std::string why = node_config_error(o);
  EXPECT_NE(why.find("needs diloco.overlap"), std::string::npos) << why;
}

}  // namespace
}  // namespace meridian::testing
