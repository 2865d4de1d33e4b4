// Sparse outer steps (codec topk with error feedback; engine/diloco/README.md, "Sparse outer
// steps"): the outer state and every node's error-feedback buffer against a plain per-element
// reference of the update rule written here, a joiner, a node killed during the all-gather, a
// resume that carries the buffer bit-identically, timing-only workers, and the configuration's
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "engine/codec/topk_codec.h"
#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

// Two layer groups, [0, 100) and [100, 300): two buckets, each encoded on its own (10 and 20
// values kept at 10 % density).
ClusterOptions sparse_options(float beta, float momentum) {
  ClusterOptions o;
  o.initial = 3;
  o.outer_steps = 4;
  o.inner_steps = 3;
  o.params = 300;
  o.boundaries = {0, 100, 300};
  o.codec = CodecId::kTopk;
  o.codec_params.topk_density = 0.1;
  o.codec_params.topk_bits = 2;
  o.error_feedback = beta;
  o.outer = {0.5f, momentum};
  return o;
}

// The rule, element by element, in fp32 with the engine's order of operations (so that the
// top-k selections, which ties decide on these integer-valued steps, are the same), for nodes
// 1..n that all start at step 0 (ranks in id order):
//   Delta_m = theta - local_m (after H inner steps from theta)
//   c_m = beta e_m + Delta_m;  s_m = decode(encode(c_m)) per bucket (the codec under test
//   elsewhere: tests/unit/codec_topk_test.cc)
//   avg = (0 + s_1 + ... + s_n) / n;  buf = mu buf + avg;  theta -= lr (avg + mu buf)
//   e_m = beta e_m + Delta_m - s_m
// The synthetic worker's inner step k of node m (counted over the run, from 1) moves element i
// by -((m + k + i) % 5 - 2); every node starts at theta_i = i.
struct Reference {
  std::map<std::int64_t, std::vector<float>> theta;                          // after step t
  std::map<std::int64_t, std::map<std::int64_t, std::vector<float>>> error;  // t -> node
};

Reference reference(const ClusterOptions& o) {
  const int n = o.initial;
  const float beta = o.error_feedback, lr = o.outer.lr, mu = o.outer.momentum;
  const TopkCodec codec(o.codec_params.topk_density, o.codec_params.topk_bits);
  const auto count = static_cast<std::size_t>(o.params);
  std::vector<float> theta(count), buf(count, 0.0f);
  for (std::size_t i = 0; i < count; ++i) theta[i] = static_cast<float>(i);
  std::map<std::int64_t, std::vector<float>> e;
  std::map<std::int64_t, std::int64_t> k;
  for (std::int64_t m = 1; m <= n; ++m) e[m].assign(count, 0.0f), k[m] = 0;
  Reference ref;
  for (std::int64_t t = 0; t < o.outer_steps; ++t) {
    std::vector<float> sum(count, 0.0f);
    std::map<std::int64_t, std::vector<float>> delta, sent;
    for (std::int64_t m = 1; m <= n; ++m) {
      std::vector<float> local = theta, c(count);
      for (int s = 0; s < o.inner_steps; ++s) {
        ++k[m];
        for (std::size_t i = 0; i < count; ++i)
          local[i] -= static_cast<float>((m + k[m] + static_cast<std::int64_t>(i)) % 5 - 2);
      }
      delta[m].resize(count);
      for (std::size_t i = 0; i < count; ++i) {
        delta[m][i] = theta[i] - local[i];
        c[i] = beta * e[m][i] + delta[m][i];
      }
      sent[m].resize(count);
      for (std::size_t b = 0; b + 1 < o.boundaries.size(); ++b) {
        const std::size_t begin = o.boundaries[b], len = o.boundaries[b + 1] - begin;
        std::vector<std::byte> bytes(codec.encoded_bytes(len));
        codec.encode(std::span(c).subspan(begin, len), bytes);
        codec.decode(bytes, std::span(sent[m]).subspan(begin, len));
      }
      for (std::size_t i = 0; i < count; ++i) sum[i] += sent[m][i];
    }
    for (std::size_t i = 0; i < count; ++i) {
      const float avg = sum[i] / static_cast<float>(n);
      buf[i] = mu * buf[i] + avg;
      theta[i] = theta[i] - lr * (avg + mu * buf[i]);
    }
    for (std::int64_t m = 1; m <= n; ++m)
      for (std::size_t i = 0; i < count; ++i) e[m][i] = beta * e[m][i] + delta[m][i] - sent[m][i];
    ref.theta[t] = theta;
    ref.error[t] = e;
  }
  return ref;
}

// What one node sends in one gather of all buckets: n - 1 hops of every bucket's encoding, one
// message each (a bucket's encoding fits one piece here).
std::uint64_t expected_gather_bytes(const ClusterOptions& o) {
  const TopkCodec codec(o.codec_params.topk_density, o.codec_params.topk_bits);
  std::uint64_t bytes = 0;
  for (std::size_t b = 0; b + 1 < o.boundaries.size(); ++b)
    bytes += 56 + codec.encoded_bytes(o.boundaries[b + 1] - o.boundaries[b]);
  return static_cast<std::uint64_t>(o.initial - 1) * bytes;
}

using Setting = std::tuple<float, float>;  // error_feedback beta, outer momentum

std::string setting_name(const Setting& s) {
  return "beta" + std::to_string(static_cast<int>(std::get<0>(s) * 100)) + "_mu" +
         std::to_string(static_cast<int>(std::get<1>(s) * 100));
}

class SparseTest : public ::testing::TestWithParam<Setting> {
 protected:
  ClusterOptions options() const {
    return sparse_options(std::get<0>(GetParam()), std::get<1>(GetParam()));
  }
};

TEST_P(SparseTest, OuterStateAndErrorFeedbackMatchTheReference) {
  const ClusterOptions o = options();
  Cluster c(o);
  c.run_and_check();  // the outer state is bit-identical on every node
  const Reference ref = reference(o);
  const auto steps = c.steps();
  ASSERT_EQ(steps.size(), static_cast<std::size_t>(o.outer_steps));
  for (const auto& [t, by_node] : steps)
    for (const auto& [id, rec] : by_node) {
      const std::string at = "step " + std::to_string(t) + " node " + std::to_string(id);
      ASSERT_EQ(rec.params, ref.theta.at(t)) << at;
      ASSERT_EQ(rec.error_feedback, ref.error.at(t).at(id)) << at;
    }
  // Each node's buffer is its own: what it did not send differs from the others'.
  EXPECT_NE(steps.at(0).at(1).error_feedback, steps.at(0).at(2).error_feedback);
  // One gather per node and step for both buckets, which moved the sparse encodings only:
  // n - 1 messages of 56 + encoded_bytes(bucket) bytes per bucket.
  EXPECT_EQ(c.all_of_type("allreduce").size(), static_cast<std::size_t>(o.initial * o.outer_steps));
  for (const Event& e : c.all_of_type("allreduce")) {
    EXPECT_EQ(std::stoull(field(e, "bytes_sent")), expected_gather_bytes(o));
    EXPECT_EQ(field(e, "codec"), "\"topk\"");
    EXPECT_EQ(field(e, "bucket"), "-1");
    EXPECT_EQ(field(e, "buckets"), "2");
  }
}

TEST_P(SparseTest, AJoinerStartsItsBufferFromZerosAndAgreesAfter) {
  ClusterOptions o = options();
  o.outer_steps = 5;
  Cluster c(o);
  c.join_at(1);
  c.run_and_check();
  const std::int64_t j = c.joiner_of(1);
  ASSERT_GT(j, 0);
  EXPECT_EQ(c.result(j).exit, NodeExit::kFinished) << c.result(j).what;
  const auto steps = c.steps();
  EXPECT_TRUE(steps.at(o.outer_steps - 1).count(j));
  // Its first step's buffer is what that step left over, beta * 0 + Delta - sent: no more than
  // the step's own pseudo-gradient could leave (every |Delta_i| <= 2 H).
  for (const auto& [t, by_node] : steps) {
    if (!by_node.count(j)) continue;
    ASSERT_EQ(by_node.at(j).error_feedback.size(), o.params);
    for (float v : by_node.at(j).error_feedback) ASSERT_LE(std::fabs(v), 2.0f * o.inner_steps + 2);
    break;
  }
}

TEST_P(SparseTest, ANodeKilledDuringTheAllGatherIsRetriedWithoutIt) {
  ClusterOptions o = options();
  o.initial = 4;
  Cluster c(o);
  run_with_node_4_killed_in_step_2s_collective(c, o.outer_steps);  // inside the all-gather
}

TEST_P(SparseTest, ARunResumedWithItsErrorFeedbackIsBitIdentical) {
  ClusterOptions o = options();
  o.outer = {0.7f, std::get<1>(GetParam())};  // not dyadic: bit-identity is the claim
  // Resumed without it (zeros), the run differs once beta carries anything over.
  EXPECT_EQ(resume_matches_and_without_state_would(o, false, true), o.error_feedback == 0.0f);
}

TEST_P(SparseTest, PhantomWorkersRunTheSparseLoop) {
  ClusterOptions o = options();
  o.phantom = true;
  Cluster c(o);
  c.run_and_check();
  EXPECT_EQ(c.all_of_type("outer_step").size(),
            static_cast<std::size_t>(o.initial * o.outer_steps));
  for (const Event& e : c.all_of_type("allreduce"))
    EXPECT_EQ(std::stoull(field(e, "bytes_sent")), expected_gather_bytes(o));
}

INSTANTIATE_TEST_SUITE_P(Diloco, SparseTest,
                         ::testing::Values(Setting{0.5f, 0.0f}, Setting{1.0f, 0.9f},
                                           Setting{0.0f, 0.0f}),
                         [](const auto& info) { return setting_name(info.param); });

// Two local ranks cut each bucket in two: each rank's ring gathers its halves, staged back to
// back, and the result is the same rule (the reference encodes per bucket slice).
TEST(Sparse, LocalRanksGatherTheirSlicesOfEveryBucket) {
  ClusterOptions o = sparse_options(0.5f, 0.0f);
  o.local_ranks = 2;
  Cluster c(o);
  c.run_and_check();
  ClusterOptions sliced = o;  // the same rule on the slices: [0, 50), [50, 100), [100, 200), ...
  sliced.local_ranks = 1;
  sliced.boundaries = {0, 50, 100, 200, 300};
  const Reference ref = reference(sliced);
  for (const auto& [t, by_node] : c.steps())
    for (const auto& [id, rec] : by_node) {
      ASSERT_EQ(rec.params, ref.theta.at(t)) << "step " << t << " node " << id;
      ASSERT_EQ(rec.error_feedback, ref.error.at(t).at(id)) << "step " << t << " node " << id;
    }
}

TEST(Sparse, SettingsOutOfRangeAreConfigurationErrors) {
  ClusterOptions o = sparse_options(0.5f, 0.0f);
  o.overlap = Overlap::kDelayed;
  EXPECT_NE(node_config_error(o).find("blocking outer steps only"), std::string::npos);
  o = sparse_options(0.5f, 0.0f);
  o.fragments = 2;
  EXPECT_NE(node_config_error(o).find("blocking outer steps only"), std::string::npos);
  o = sparse_options(1.5f, 0.0f);
  EXPECT_NE(node_config_error(o).find("error_feedback must be in [0, 1]"), std::string::npos);
  o = sparse_options(0.5f, 0.0f);
  o.codec = CodecId::kInt8Prime;
  EXPECT_NE(node_config_error(o).find("needs a sparse codec"), std::string::npos);
  o = sparse_options(0.5f, 0.0f);
  o.codec_params.topk_bits = 0;
  EXPECT_NE(node_config_error(o).find("value bits"), std::string::npos);
}

}  // namespace
}  // namespace meridian::testing
