// bf16 codec: exact rounding (round to nearest, ties to even) checked against an independent
// reference, every bf16 value round-trips, NaN and sign survive, relative error <= 2^-8 (8
// significant bits).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/codec/bf16_codec.h"

namespace meridian {
namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// Independent reference: pick the nearer of the two bf16 neighbours in double arithmetic; on a
// tie take the one with an even last bit. Finite inputs only.
std::uint16_t reference_bf16(float x) {
  const std::uint32_t u = bits(x);
  const std::uint16_t down = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);  // away from zero
  if ((u & 0xFFFF) == 0) return down;
  const double d_down = std::fabs(static_cast<double>(x) - bf16_bits_to_fp32(down));
  // `up` may be the infinity pattern: its distance is measured to the next power of two
  // (2^128), where IEEE rounding puts the overflow threshold.
  const double up_value = (up & 0x7FFF) == 0x7F80 ? std::copysign(0x1p128, x)
                                                  : static_cast<double>(bf16_bits_to_fp32(up));
  const double d_up = std::fabs(static_cast<double>(x) - up_value);
  if (d_down < d_up) return down;
  if (d_up < d_down) return up;
  return (down & 1) == 0 ? down : up;
}

std::vector<float> round_trip(const std::vector<float>& x) {
  Bf16Codec codec;
  std::vector<std::byte> bytes(codec.encoded_bytes(x.size()));
  codec.encode(x, bytes);
  std::vector<float> y(x.size());
  codec.decode(bytes, y);
  return y;
}

TEST(Bf16, TiesRoundToEven) {
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: down. 1 + 3 * 2^-8 is halfway between
  // 1 + 2^-7 (odd) and 1 + 2^-6: up. Just above a tie rounds up.
  EXPECT_EQ(fp32_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(fp32_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(fp32_to_bf16_bits(-(1.0f + 0x1p-8f)), 0xBF80);
}

TEST(Bf16, MatchesTheReferenceOnRandomFiniteBitPatterns) {
  std::mt19937 rng(123);
  int checked = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = from_bits(rng());
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(fp32_to_bf16_bits(x), reference_bf16(x)) << std::hexfloat << x;
    ++checked;
  }
  EXPECT_GT(checked, 990'000);
}

TEST(Bf16, EveryBf16ValueRoundTripsExactly) {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float x = bf16_bits_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(x)) continue;
    ASSERT_EQ(fp32_to_bf16_bits(x), h);
  }
}

TEST(Bf16, SignedZerosInfinitiesAndOverflow) {
  const std::vector<float> y =
      round_trip({0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0x1p-130f, 0x1p-140f});
  EXPECT_EQ(bits(y[0]), bits(0.0f));
  EXPECT_EQ(bits(y[1]), bits(-0.0f));
  EXPECT_EQ(y[2], INFINITY);
  EXPECT_EQ(y[3], -INFINITY);
  // FLT_MAX lies above the largest bf16 by more than half a bf16 ulp: IEEE rounding gives inf.
  EXPECT_EQ(y[4], INFINITY);
  EXPECT_EQ(y[5], -INFINITY);
  EXPECT_EQ(y[6], 0x1p-130f);  // a subnormal whose bits are all in the top half survives
  EXPECT_EQ(y[7], 0.0f);       // 2^-140 has only low-half bits and is below half a bf16 ulp
}

TEST(Bf16, NaNStaysNaNWithItsSign) {
  // 0x7F800001 is a signalling NaN whose payload sits only in the low 16 bits: truncation would
  // turn it into infinity.
  const std::vector<float> x = {from_bits(0x7F800001), from_bits(0xFF800001), std::nanf(""),
                                -std::nanf("")};
  const std::vector<float> y = round_trip(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(std::isnan(y[i])) << i;
    EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
  }
}

TEST(Bf16, RelativeErrorOfNormalValuesIsAtMostTwoToMinusEight) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<float> x(100'000);
  for (float& v : x) v = dist(rng);
  const std::vector<float> y = round_trip(x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) < FLT_MIN) continue;
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - x[i]) / std::fabs(x[i]));
  }
  EXPECT_LE(worst, 0x1p-8);  // half an ulp of an 8-bit significand
  EXPECT_GT(worst, 0x1p-9);  // the bound is attained, so the test can see a wrong rounding
}

}  // namespace
}  // namespace meridian
