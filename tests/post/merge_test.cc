// Tests of model merging: each method against results computed by hand on small tensors, SLERP
// of identical models is the identity (bit-exact after rounding to the tensor's dtype), and
// checkpoints that do not match are refused naming the tensor.
#include "trainer/post/merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/core/error.h"
#include "tests/post/temp_dir_test_base.h"
#include "trainer/safetensors/float_convert.h"
#include "trainer/safetensors/safetensors.h"

namespace fs = std::filesystem;
namespace st = meridian::safetensors;
namespace post = meridian::post;

namespace {

using Vec = std::vector<double>;

post::MergeOptions options(post::MergeMethod method) {
  post::MergeOptions o;
  o.method = method;
  return o;
}
std::vector<std::span<const double>> spans(const std::vector<Vec>& v) {
  return {v.begin(), v.end()};
}

TEST(Merge, LinearIsTheNormalisedWeightedAverage) {
  const std::vector<Vec> m = {{1, 2, 3}, {3, 6, 9}};
  EXPECT_EQ(post::merge_linear(spans(m), {1, 3}), (Vec{2.5, 5, 7.5}));  // (1·1 + 3·3)/4, ...
  EXPECT_EQ(post::merge_linear(spans(m), {1, 1}), (Vec{2, 4, 6}));
  EXPECT_THROW(post::merge_linear(spans(m), {1, -1}), meridian::ConfigError);
}

TEST(Merge, SlerpFollowsTheArc) {
  const Vec a = {1, 0}, b = {0, 1};
  const Vec mid = post::merge_slerp(a, b, 0.5);
  EXPECT_NEAR(mid[0], std::sqrt(0.5), 1e-15);  // 45° along the quarter circle, not the chord
  EXPECT_NEAR(mid[1], std::sqrt(0.5), 1e-15);
  const Vec third = post::merge_slerp(a, b, 1.0 / 3.0);  // 30°
  EXPECT_NEAR(third[0], std::cos(M_PI / 6), 1e-15);
  EXPECT_NEAR(third[1], std::sin(M_PI / 6), 1e-15);
  EXPECT_EQ(post::merge_slerp(a, b, 0.0), a);
  EXPECT_EQ(post::merge_slerp(a, b, 1.0), b);
  // Unequal norms: the coefficients apply to the original vectors (MergeKit): 2a, 4b at t=1/2
  // gives sin(45°)/sin(90°) · (2a + 4b).
  const Vec scaled = post::merge_slerp(Vec{2, 0}, Vec{0, 4}, 0.5);
  EXPECT_NEAR(scaled[0], 2 * std::sqrt(0.5), 1e-15);
  EXPECT_NEAR(scaled[1], 4 * std::sqrt(0.5), 1e-15);
}

TEST(Merge, SlerpFallsBackToLinearForColinearTensors) {
  EXPECT_EQ(post::merge_slerp(Vec{1, 2}, Vec{2, 4}, 0.25), (Vec{1.25, 2.5}));   // cos = 1
  EXPECT_EQ(post::merge_slerp(Vec{1, 2}, Vec{-1, -2}, 0.25), (Vec{0.5, 1.0}));  // cos = −1
  EXPECT_EQ(post::merge_slerp(Vec{0, 0}, Vec{2, 4}, 0.5), (Vec{1, 2}));         // zero norm
}

TEST(Merge, TiesTrimsElectsSignAndAveragesDisjointly) {
  // base 1; task vectors A = [1, −2, 3, 0.5], B = [−3, 1, 1, 0.2]. density 0.5 keeps 2 of 4:
  // A → [0, −2, 3, 0]; B → [−3, 1, 0, 0] (|1| tie: the earlier position is kept).
  const std::vector<Vec> m = {{1, 1, 1, 1}, {2, -1, 4, 1.5}, {-2, 2, 2, 1.2}};
  // Equal weights: signs of the sums [−3, −1, 3, 0] → [−, −, +, none]; agreeing entries averaged:
  // [−3, −2, 3, 0] → base + that.
  EXPECT_EQ(post::merge_ties(spans(m), 0, {1, 1}, 0.5), (Vec{-2, -1, 4, 1}));
  // Weights 1, 2: sums [−6, 0, 3, 0]; position 1 has no elected sign and keeps the base.
  EXPECT_EQ(post::merge_ties(spans(m), 0, {1, 2}, 0.5), (Vec{-2, 1, 4, 1}));
  // density 1, agreeing signs: the disjoint mean is the plain mean of the task vectors.
  const std::vector<Vec> agree = {{0, 0}, {2, -1}, {4, -3}};
  EXPECT_EQ(post::merge_ties(spans(agree), 0, {1, 1}, 1.0), (Vec{3, -2}));
  // Base given as the last model.
  const std::vector<Vec> last = {{2, -1}, {4, -3}, {0, 0}};
  EXPECT_EQ(post::merge_ties(spans(last), 2, {1, 1}, 1.0), (Vec{3, -2}));
  EXPECT_THROW(post::merge_ties(spans(m), 0, {1, 1}, 0.0), meridian::ConfigError);
}

TEST(Merge, DareWithoutDropsIsTheAverageTaskVector) {
  const std::vector<Vec> m = {{1, 1}, {3, 5}, {5, 9}};  // τ = [2, 4], [4, 8]
  EXPECT_EQ(post::merge_dare(spans(m), 0, {1, 1}, 1.0, 7, "w"), (Vec{4, 7}));
  EXPECT_EQ(post::merge_dare(spans(m), 0, {1, 3}, 1.0, 7, "w"), (Vec{1 + 3.5, 1 + 7}));
}

TEST(Merge, DareDropsWithProbabilityAndRescalesSeeded) {
  const std::size_t n = 20000;
  Vec base(n, 0.5), ft(n);
  for (std::size_t j = 0; j < n; ++j) ft[j] = 0.5 + 0.25 * static_cast<double>(j % 7 + 1);
  const std::vector<Vec> m = {base, ft};
  const double density = 0.3;  // drop p = 0.7, kept entries scaled by 1/0.3
  const Vec out = post::merge_dare(spans(m), 0, {1}, density, 42, "layers.0.wq");
  std::size_t kept = 0;
  double mean_delta = 0, mean_tau = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double tau = ft[j] - base[j];
    const double d = out[j] - base[j];
    if (d != 0) {
      ++kept;
      EXPECT_DOUBLE_EQ(d, tau / density) << j;  // every kept entry is rescaled exactly
    }
    mean_delta += d / n;
    mean_tau += tau / n;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, density, 0.015);  // 4.6 standard deviations
  EXPECT_NEAR(mean_delta, mean_tau, 0.03 * mean_tau);          // unbiased in expectation
  EXPECT_EQ(post::merge_dare(spans(m), 0, {1}, density, 42, "layers.0.wq"), out);
  EXPECT_NE(post::merge_dare(spans(m), 0, {1}, density, 43, "layers.0.wq"), out);
  EXPECT_NE(post::merge_dare(spans(m), 0, {1}, density, 42, "layers.1.wq"), out);
}

class MergeFiles : public meridian::testing::TempDirTest {
 protected:
  // A two-tensor "model": an F32 matrix and a BF16 vector from `seed`, plus an I64 step.
  fs::path make(const std::string& name, std::uint64_t seed, std::int64_t step = 5,
                std::vector<std::int64_t> shape = {4, 8}, st::Dtype vec_dtype = st::Dtype::kBF16) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> w(32), v(8);
    for (auto& x : w) x = normal(rng);
    for (auto& x : v) x = 1.0f + normal(rng);
    const auto vb = st::from_f32(v, vec_dtype);
    const std::vector<std::int64_t> s = {step};
    const std::vector<st::TensorView> views = {
        {"layers.0.attention.wq.weight", st::Dtype::kF32, shape, std::as_bytes(std::span(w))},
        {"layers.0.attention_norm.weight", vec_dtype, {8}, vb},
        {"step", st::Dtype::kI64, {}, std::as_bytes(std::span(s))},
    };
    const fs::path p = dir_ / (name + ".safetensors");
    st::write(p, views);
    return p;
  }
};

TEST_F(MergeFiles, SlerpOfIdenticalModelsIsBitExactIdentity) {
  const st::File a = st::read(make("a", 1));
  const st::File b = st::read(make("b", 1));
  for (double t : {0.0, 0.1, 0.3, 0.5, 0.77, 1.0}) {
    const fs::path out = dir_ / "merged.safetensors";
    auto o = options(post::MergeMethod::kSlerp);
    o.t = t;
    post::merge_checkpoints({&a, &b}, o, out);
    const st::File m = st::read(out);
    for (const auto& ta : a.tensors()) {
      const auto& tm = m.at(ta.name);
      ASSERT_EQ(tm.data.size(), ta.data.size());
      EXPECT_EQ(std::memcmp(tm.data.data(), ta.data.data(), ta.data.size()), 0)
          << ta.name << " t=" << t;
    }
    EXPECT_EQ(m.metadata().at("meridian.merge.method"), "slerp");
  }
}

TEST_F(MergeFiles, LinearMergeOfFilesMatchesHandComputation) {
  const st::File a = st::read(make("a", 1));
  const st::File b = st::read(make("b", 2));
  const fs::path out = dir_ / "merged.safetensors";
  auto o = options(post::MergeMethod::kLinear);
  o.weights = {3, 1};
  EXPECT_EQ(post::merge_checkpoints({&a, &b}, o, out), 3u);
  const st::File m = st::read(out);
  const auto wa = st::to_f32(a.at("layers.0.attention.wq.weight"));
  const auto wb = st::to_f32(b.at("layers.0.attention.wq.weight"));
  const auto wm = st::to_f32(m.at("layers.0.attention.wq.weight"));
  for (std::size_t j = 0; j < wa.size(); ++j)
    EXPECT_EQ(wm[j], static_cast<float>((3.0 * wa[j] + 1.0 * wb[j]) / 4.0)) << j;
  const auto va = st::to_f32(a.at("layers.0.attention_norm.weight"));
  const auto vb = st::to_f32(b.at("layers.0.attention_norm.weight"));
  const auto vm = st::to_f32(m.at("layers.0.attention_norm.weight"));
  for (std::size_t j = 0; j < va.size(); ++j)  // BF16 in, BF16 out: rounded once
    EXPECT_EQ(vm[j],
              st::bf16_to_f32(st::f32_to_bf16(static_cast<float>((3.0 * va[j] + vb[j]) / 4.0))));
  EXPECT_EQ(m.at("step").data.size(), 8u);
  EXPECT_EQ(m.metadata().at("meridian.merge.weights"), "3,1");
}

TEST_F(MergeFiles, MismatchedArchitecturesAreRefusedNamingTheTensor) {
  const st::File a = st::read(make("a", 1));
  auto expect_refused = [&](const st::File& other, const std::string& fragment) {
    try {
      post::merge_checkpoints({&a, &other}, {}, dir_ / "m.safetensors");
      FAIL() << fragment;
    } catch (const meridian::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_refused(st::read(make("shape", 2, 5, {8, 4})),
                 "\"layers.0.attention.wq.weight\" has shape [8, 4]");
  expect_refused(st::read(make("dtype", 2, 5, {4, 8}, st::Dtype::kF16)),
                 "\"layers.0.attention_norm.weight\" is F16");
  expect_refused(st::read(make("step", 2, 6)), "non-float tensor \"step\" differs");
  const std::vector<float> w(32);
  const std::vector<st::TensorView> only = {
      {"layers.0.attention.wq.weight", st::Dtype::kF32, {4, 8}, std::as_bytes(std::span(w))}};
  st::write(dir_ / "few.safetensors", only);
  expect_refused(st::read(dir_ / "few.safetensors"),
                 "has no tensor \"layers.0.attention_norm.weight\"");
  EXPECT_THROW(post::merge_checkpoints({&a}, {}, dir_ / "m.safetensors"), meridian::ConfigError);
  const st::File b = st::read(make("b", 2));
  const st::File c = st::read(make("c", 3));
  const fs::path out = dir_ / "m.safetensors";
  EXPECT_THROW(post::merge_checkpoints({&a, &b, &c}, options(post::MergeMethod::kSlerp), out),
               meridian::ConfigError);
  auto three_weights = options(post::MergeMethod::kLinear);
  three_weights.weights = {1, 2, 3};
  EXPECT_THROW(post::merge_checkpoints({&a, &b}, three_weights, out), meridian::ConfigError);
  auto bad_base = options(post::MergeMethod::kTies);
  bad_base.base = 2;
  EXPECT_THROW(post::merge_checkpoints({&a, &b}, bad_base, out), meridian::ConfigError);
}

TEST_F(MergeFiles, CheckpointArgumentsResolveToOneFile) {
  make("model", 1);
  EXPECT_EQ(post::resolve_checkpoint(dir_), dir_ / "model.safetensors");
  EXPECT_EQ(post::resolve_checkpoint(dir_ / "model.safetensors"), dir_ / "model.safetensors");
  fs::rename(dir_ / "model.safetensors", dir_ / "x.safetensors");
  EXPECT_EQ(post::resolve_checkpoint(dir_), dir_ / "x.safetensors");
  make("y", 2);
  EXPECT_THROW(post::resolve_checkpoint(dir_), meridian::ConfigError);
  EXPECT_THROW(post::resolve_checkpoint(dir_ / "nothing"), meridian::ConfigError);
}

}  // namespace
