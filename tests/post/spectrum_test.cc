// Tests of Spectrum: the Marchenko–Pastur median and edge, SNR on synthetic matrices (Gaussian
// noise plus a planted low-rank signal of known strength), selection and the YAML round trip.
#include "trainer/post/spectrum.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/core/error.h"
#include "tests/post/temp_dir_test_base.h"
#include "trainer/safetensors/safetensors.h"

namespace st = meridian::safetensors;
namespace post = meridian::post;

namespace {

// Row-major rows×cols: i.i.d. N(0, sigma²) noise plus Σₖ dₖ uₖ vₖᵀ with orthonormal u, v and
// dₖ = strengths[k] · sigma · √max(rows, cols), i.e. in units of the noise's scale.
std::vector<float> noisy_low_rank(int rows, int cols, double sigma,
                                  const std::vector<double>& strengths, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int r = static_cast<int>(strengths.size());
  Eigen::MatrixXd w(rows, cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) w(i, j) = sigma * normal(rng);
  if (r > 0) {
    Eigen::MatrixXd gu(rows, r), gv(cols, r);
    for (int i = 0; i < rows; ++i)
      for (int k = 0; k < r; ++k) gu(i, k) = normal(rng);
    for (int j = 0; j < cols; ++j)
      for (int k = 0; k < r; ++k) gv(j, k) = normal(rng);
    const Eigen::MatrixXd u =
        gu.householderQr().householderQ() * Eigen::MatrixXd::Identity(rows, r);
    const Eigen::MatrixXd v =
        gv.householderQr().householderQ() * Eigen::MatrixXd::Identity(cols, r);
    const double scale = sigma * std::sqrt(static_cast<double>(std::max(rows, cols)));
    for (int k = 0; k < r; ++k) w += strengths[k] * scale * u.col(k) * v.col(k).transpose();
  }
  std::vector<float> out(static_cast<std::size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      out[static_cast<std::size_t>(i) * cols + j] = static_cast<float>(w(i, j));
  return out;
}

TEST(MarchenkoPastur, MedianMatchesTheQuarterCircleAndSampledMatrices) {
  // β = 1: singular values of N/√n follow the quarter circle on [0, 2], whose median 0.807946 is
  // known independently; μ₁ is its square.
  EXPECT_NEAR(post::mp_median(1.0), 0.8079455 * 0.8079455, 2e-6);
  // The median moves towards 1 as β shrinks (the law concentrates at 1).
  EXPECT_LT(post::mp_median(1.0), post::mp_median(0.5));
  EXPECT_LT(post::mp_median(0.5), post::mp_median(0.1));
  EXPECT_NEAR(post::mp_median(1e-4), 1.0, 0.02);
  // β = 1/2 against a sampled 300×600 noise matrix: σ̂ recovers σ.
  const auto s = post::analyze_matrix("noise", noisy_low_rank(300, 600, 0.02, {}, 1), 300, 600);
  EXPECT_NEAR(s.sigma, 0.02, 0.02 * 0.01);
}

TEST(Spectrum, PureNoiseHasNoSignalAboveTheEdge) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto s =
        post::analyze_matrix("noise", noisy_low_rank(192, 384, 0.05, {}, seed), 192, 384);
    EXPECT_NEAR(s.sigma, 0.05, 0.05 * 0.02) << seed;
    EXPECT_NEAR(s.mp_edge, 0.05 * (std::sqrt(192.0) + std::sqrt(384.0)), 0.05 * 28 * 0.03) << seed;
    // The largest noise singular value sits at the edge within Tracy–Widom fluctuations
    // (~n^(-2/3)); at most one may poke above it, carrying negligible energy.
    EXPECT_LE(s.signal_rank, 1) << seed;
    EXPECT_LT(s.snr, 0.02) << seed;
  }
}

TEST(Spectrum, FindsThePlantedRank) {
  // Planted singular values 6, 5, 4, 3 (× σ√n): above the detection threshold β^(1/4) ≈ 0.84, so
  // each appears above the edge; the noise stays below it.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto s = post::analyze_matrix(
        "signal", noisy_low_rank(128, 256, 0.02, {6, 5, 4, 3}, seed), 128, 256);
    EXPECT_EQ(s.signal_rank, 4) << seed;
    EXPECT_NEAR(s.sigma, 0.02, 0.02 * 0.05) << seed;  // the median barely moves
    EXPECT_GT(s.singular_values[3], s.mp_edge) << seed;
    EXPECT_LT(s.singular_values[4], s.mp_edge * 1.02) << seed;
    // Energy: a planted dₖ shows as the singular value σ√n·√((1 + d²)(β + d²))/d (the BBP
    // law, β = m/n), and the total energy is σ²(mn + Σd²n); in units of σ²n the signal is
    // Σ (1 + d²)(β + d²)/d² = 92.1 and the noise 128 + 86 − 92.1, so SNR ≈ 0.756.
    double planted = 0, shown = 0;
    for (double d : {6.0, 5.0, 4.0, 3.0}) {
      planted += d * d;
      shown += (1 + d * d) * (0.5 + d * d) / (d * d);
    }
    EXPECT_NEAR(s.snr, shown / (128 + planted - shown), 0.03) << seed;
  }
  // Transposed (rows > cols) gives the same spectrum.
  const auto a = post::analyze_matrix("a", noisy_low_rank(64, 96, 0.1, {5}, 7), 64, 96);
  std::vector<float> t(64 * 96);
  const auto src = noisy_low_rank(64, 96, 0.1, {5}, 7);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 96; ++j) t[j * 64 + i] = src[i * 96 + j];
  const auto b = post::analyze_matrix("b", t, 96, 64);
  EXPECT_EQ(a.signal_rank, 1);
  EXPECT_EQ(b.signal_rank, 1);
  EXPECT_NEAR(a.snr, b.snr, 1e-9);
}

TEST(Spectrum, SnrRanksStrongSignalAboveWeakSignalAboveNoise) {
  const auto noise = post::analyze_matrix("layers.0.attention.wq.weight",
                                          noisy_low_rank(96, 96, 0.02, {}, 3), 96, 96);
  const auto weak = post::analyze_matrix("layers.1.attention.wq.weight",
                                         noisy_low_rank(96, 96, 0.02, {2.5}, 3), 96, 96);
  const auto strong = post::analyze_matrix("layers.2.attention.wq.weight",
                                           noisy_low_rank(96, 96, 0.02, {6, 5, 4}, 3), 96, 96);
  EXPECT_GT(strong.snr, weak.snr);
  EXPECT_GT(weak.snr, noise.snr);
  const auto top = post::select_top({noise, weak, strong}, 1.0 / 3.0, false);
  EXPECT_EQ(top, (std::vector<bool>{false, false, true}));
}

TEST(Spectrum, ExactLowRankHasInfiniteSnrAndZeroMatrixIsHandled) {
  std::vector<float> rank1(8 * 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) rank1[i * 8 + j] = static_cast<float>((i + 1) * (j + 1));
  const auto s = post::analyze_matrix("r1", rank1, 8, 8);
  // The median singular value of an exact rank-1 matrix is ~0, so every value but one is noise
  // of ~0 energy; the edge is ~0 and the SNR is huge or infinite, never NaN.
  EXPECT_GE(s.signal_rank, 1);
  EXPECT_FALSE(std::isnan(s.snr));
  EXPECT_GT(s.snr, 1e6);
  const auto z = post::analyze_matrix("zero", std::vector<float>(16, 0.0f), 4, 4);
  EXPECT_EQ(z.signal_rank, 0);
  EXPECT_FALSE(std::isnan(z.snr));
  EXPECT_THROW(post::analyze_matrix("nan", std::vector<float>{1, NAN, 0, 1}, 2, 2),
               meridian::ConfigError);
}

TEST(Spectrum, ModuleTypesFromBothNamingConventions) {
  EXPECT_EQ(post::module_type_of("model.layers.3.self_attn.q_proj.weight"), "q");
  EXPECT_EQ(post::module_type_of("model.layers.3.self_attn.k_proj.weight"), "k");
  EXPECT_EQ(post::module_type_of("model.layers.3.self_attn.v_proj.weight"), "v");
  EXPECT_EQ(post::module_type_of("model.layers.3.self_attn.o_proj.weight"), "o");
  EXPECT_EQ(post::module_type_of("model.layers.3.mlp.gate_proj.weight"), "gate");
  EXPECT_EQ(post::module_type_of("model.layers.3.mlp.up_proj.weight"), "up");
  EXPECT_EQ(post::module_type_of("model.layers.3.mlp.down_proj.weight"), "down");
  EXPECT_EQ(post::module_type_of("layers.1.attention.wq.weight"), "q");
  EXPECT_EQ(post::module_type_of("layers.1.feed_forward.w1.weight"), "gate");
  EXPECT_EQ(post::module_type_of("layers.1.feed_forward.w3.weight"), "up");
  EXPECT_EQ(post::module_type_of("layers.1.feed_forward.w2.weight"), "down");
  EXPECT_EQ(post::module_type_of("tok_embeddings.weight"), "embed");
  EXPECT_EQ(post::module_type_of("output.weight"), "lm_head");
  EXPECT_EQ(post::module_type_of("layers.1.attention_norm.weight"), "other");
}

TEST(Spectrum, SelectionByTypeKeepsTheTopOfEachType) {
  std::vector<post::MatrixSpectrum> m;
  auto add = [&](const std::string& name, double snr) {
    post::MatrixSpectrum s;
    s.name = name;
    s.module_type = post::module_type_of(name);
    s.snr = snr;
    m.push_back(s);
  };
  for (int l = 0; l < 4; ++l) add("layers." + std::to_string(l) + ".attention.wq.weight", 10.0 + l);
  for (int l = 0; l < 4; ++l)
    add("layers." + std::to_string(l) + ".feed_forward.w2.weight", 1.0 - 0.1 * l);
  // Over all matrices, the top 25 % (2 of 8) are both q; by type, one q and one down.
  EXPECT_EQ(post::select_top(m, 0.25, false),
            (std::vector<bool>{false, false, true, true, false, false, false, false}));
  EXPECT_EQ(post::select_top(m, 0.25, true),
            (std::vector<bool>{false, false, false, true, true, false, false, false}));
  EXPECT_EQ(post::select_top(m, 0.0, true), std::vector<bool>(8, false));
  EXPECT_EQ(post::select_top(m, 1.0, true), std::vector<bool>(8, true));
  EXPECT_THROW(post::select_top(m, 1.5, true), meridian::ConfigError);
}

class SpectrumFiles : public meridian::testing::TempDirTest {};

TEST_F(SpectrumFiles, CheckpointToYamlAndBack) {
  const auto& dir = dir_;
  const auto strong = noisy_low_rank(48, 64, 0.02, {6, 5}, 11);
  const auto noise = noisy_low_rank(48, 64, 0.02, {}, 12);
  const std::vector<float> norm(64, 1.0f);
  const std::vector<std::int64_t> step = {100};
  const std::vector<st::TensorView> views = {
      {"layers.0.attention.wq.weight", st::Dtype::kF32, {48, 64}, std::as_bytes(std::span(strong))},
      {"layers.1.attention.wq.weight", st::Dtype::kF32, {48, 64}, std::as_bytes(std::span(noise))},
      {"layers.0.attention_norm.weight", st::Dtype::kF32, {64}, std::as_bytes(std::span(norm))},
      {"step", st::Dtype::kI64, {}, std::as_bytes(std::span(step))},
  };
  st::write(dir / "model.safetensors", views);
  const st::File f = st::read(dir / "model.safetensors");
  const auto report = post::run_spectrum(f, {.top_fraction = 0.5, .by_type = true});
  ASSERT_EQ(report.matrices.size(), 2u);
  EXPECT_EQ(report.selected, (std::vector<bool>{true, false}));
  EXPECT_EQ(report.vectors, (std::vector<std::string>{"layers.0.attention_norm.weight"}));
  EXPECT_EQ(report.skipped, (std::vector<std::string>{"step"}));
  EXPECT_EQ(report.matrix_params, 2 * 48 * 64);
  EXPECT_EQ(report.selected_matrix_params, 48 * 64);
  {
    std::ofstream out(dir / "spectrum.yaml");
    post::write_yaml(report, out);
  }
  EXPECT_EQ(
      post::read_trainable(dir / "spectrum.yaml"),
      (std::vector<std::string>{"layers.0.attention.wq.weight", "layers.0.attention_norm.weight"}));
  {
    std::ofstream bad(dir / "bad.yaml");
    bad << "train: 3\n";
  }
  EXPECT_THROW(post::read_trainable(dir / "bad.yaml"), meridian::ConfigError);
  EXPECT_THROW(post::read_trainable(dir / "missing.yaml"), meridian::ConfigError);
}

}  // namespace
