// Quantization error of the ring all-reduce on Gaussian inputs, against the exact sum computed
// in double: the 14-rank int8 (PRIME) all-reduce must stay within 4 % relative L2 error, and
// the error the ring reports with measure_error must agree with the test's own measurement.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/core/collective/ring_allreduce.h"
#include "tests/collective/ring_harness.h"

namespace meridian {
namespace {

using testing::describe;

std::vector<std::vector<float>> gaussian_inputs(int world, std::size_t count) {
  std::mt19937_64 rng(20261121);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> v(world, std::vector<float>(count));
  for (auto& rank : v)
    for (float& x : rank) x = normal(rng);
  return v;
}

// ||got - exact|| / ||exact||, in double.
double relative_l2(const std::vector<float>& got, const std::vector<double>& exact) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    diff += (got[i] - exact[i]) * (got[i] - exact[i]);
    norm += exact[i] * exact[i];
  }
  return std::sqrt(diff / norm);
}

struct Measured {
  double against_exact;  // the test's measurement against the double sum
  double reported;       // RingStats::relative_error (against the fp32 ring sum)
};

Measured gaussian_round(CodecId codec, int world, std::size_t count,
                        std::size_t max_chunk_bytes = 16 << 10) {
  RingOptions options;
  options.measure_error = true;
  options.max_chunk_bytes = max_chunk_bytes;
  testing::InProcRing ring(world, 1);
  const auto inputs = gaussian_inputs(world, count);
  const auto round = testing::run_round(ring.transports(), inputs, options, codec);
  for (int r = 0; r < world; ++r) EXPECT_FALSE(round.errors[r]) << describe(round.errors[r]);
  if (round.errors[0]) return {NAN, NAN};
  return {relative_l2(round.buffers[0], testing::exact_sum(inputs)), round.stats[0].relative_error};
}

constexpr int kWorld = 14;
constexpr std::size_t kCount = std::size_t{1} << 18;

// Small pieces (16 KiB: many per-chunk scales) and the default 4 MiB (one piece per share).
TEST(RingQuantization, Int8PrimeFourteenRanksWithinFourPercent) {
  for (std::size_t chunk : {std::size_t{16} << 10, RingOptions{}.max_chunk_bytes}) {
    const Measured m = gaussian_round(CodecId::kInt8Prime, kWorld, kCount, chunk);
    RecordProperty("int8_relative_error_chunk" + std::to_string(chunk),
                   std::to_string(m.against_exact));
    EXPECT_LE(m.against_exact, 0.04) << "max_chunk_bytes " << chunk;
    // The fp32 ring's own rounding is ~1e-7, far below the codec's: both measurements agree.
    EXPECT_NEAR(m.reported, m.against_exact, 1e-3);
  }
}

// The other lossy codecs on the same inputs, for the record. Bounds: bf16 rounds each of the
// 14 quantized partial sums to 2^-8 relative, and those errors are independent, so the
// relative L2 error stays far below 14 * 2^-8 = 5.5 %; int8 min-max spends its 256 levels on
// [min, max] of a chunk of Gaussian sums (about +-4.5 sigma for 4096 values), a step of about
// 3.5 % of sigma per quantization, hence also well below 5.5 %.
TEST(RingQuantization, OtherLossyCodecsFourteenRanks) {
  for (CodecId codec : {CodecId::kBf16, CodecId::kInt8MinMax}) {
    const Measured m = gaussian_round(codec, kWorld, kCount);
    RecordProperty(std::string(codec_name(codec)) + "_relative_error",
                   std::to_string(m.against_exact));
    EXPECT_LE(m.against_exact, 14 * std::ldexp(1.0, -8)) << codec_name(codec);
    EXPECT_NEAR(m.reported, m.against_exact, 1e-3) << codec_name(codec);
    EXPECT_GT(m.against_exact, 0.0) << codec_name(codec) << " cannot be exact on Gaussian data";
  }
}

}  // namespace
}  // namespace meridian
