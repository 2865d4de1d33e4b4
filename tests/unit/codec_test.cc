// Properties every codec shares: registry, exact sizes, round trips at edge counts, decode_add
// equal to decode plus the accumulator, determinism and precondition checks. Per-codec numeric
// properties are in codec_bf16_test.cc, codec_int8_test.cc and codec_fp4_test.cc.
#include "engine/core/codec/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "tests/unit/codec_test_util.h"

namespace meridian {
namespace {

using codec_test::encode;
using codec_test::gaussian;

class EveryCodec : public ::testing::TestWithParam<CodecId> {
 protected:
  std::unique_ptr<Codec> codec_ = make_codec(GetParam());
};

TEST_P(EveryCodec, RegistryNamesAndIdsAgree) {
  EXPECT_EQ(codec_->id(), GetParam());
  EXPECT_EQ(codec_->name(), codec_name(GetParam()));
  EXPECT_EQ(parse_codec(codec_->name()), GetParam());
}

// The payload size of `n` values, from each codec's documented layout.
std::size_t expected_bytes(CodecId id, std::size_t n) {
  switch (id) {
    case CodecId::kFp32:
      return 4 * n;
    case CodecId::kBf16:
      return 2 * n;
    case CodecId::kInt8Prime:
      return 1024 + n;
    case CodecId::kInt8MinMax:
      return 8 + n;
    case CodecId::kFp4:  // an fp32 scale per 32 values (the last block may be short), 2 per byte
      return 4 * ((n + 31) / 32) + (n + 1) / 2;
    case CodecId::kTopk: {  // 2 % of 4096 = 82 kept, 2 bits: a 4-entry table + 82 x 14 bits
      std::size_t bytes = 4 + (n / 4096) * (16 + (82 * 14 + 7) / 8);
      if (const std::size_t tail = n % 4096; tail > 0) {
        const std::size_t k = std::clamp<std::size_t>((82 * tail + 2048) / 4096, 1, tail);
        bytes += 16 + (k * 14 + 7) / 8;
      }
      return bytes;
    }
  }
  return 0;
}

TEST_P(EveryCodec, EncodedBytesIsExact) {
  for (std::size_t n : {0u, 1u, 2u, 7u, 31u, 32u, 33u, 1000u, 1u << 20})
    EXPECT_EQ(codec_->encoded_bytes(n), expected_bytes(GetParam(), n)) << "count " << n;
}

TEST_P(EveryCodec, RoundTripAtEdgeCountsIsCloseAndDecodeAddMatchesDecode) {
  // 64 and 65 straddle the kernels' block length; 1000 leaves a tail.
  for (std::size_t n : {0u, 1u, 2u, 7u, 63u, 64u, 65u, 1000u}) {
    const std::vector<float> x = gaussian(n, 42 + n);
    const std::vector<std::byte> bytes = encode(*codec_, x);
    std::vector<float> y(n, -7.0f);
    codec_->decode(bytes, y);
    float max_abs = 0;
    for (float v : x) max_abs = std::max(max_abs, std::fabs(v));
    for (std::size_t i = 0; i < n; ++i) {
      if (codec_->lossless()) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(x[i]));
      } else if (GetParam() == CodecId::kTopk) {
        // Dropped (0) or a kept value's bin mean: bins are a quarter of [min, max] of the kept
        // values, at most max_abs / 2 wide. Exact bounds are in codec_topk_test.cc.
        if (y[i] != 0.0f) {
          EXPECT_NEAR(y[i], x[i], max_abs / 2 * (1 + 1e-6f)) << "count " << n;
        }
      } else if (GetParam() == CodecId::kFp4) {
        // E3M0 rounds to a power of two: within a third of |x|, or amax / 128 near 0.
        const float bound = std::max(std::fabs(x[i]) / 3, max_abs / 128) * (1 + 1e-6f);
        EXPECT_NEAR(y[i], x[i], bound) << "count " << n << " element " << i;
      } else {
        // A loose common bound: PRIME clips beyond +-3 sigma to the end bins' means, so a tail
        // value can be off by |x| - 3 sigma. Tight bounds are in the per-codec tests.
        EXPECT_NEAR(y[i], x[i], 0.15f * max_abs) << "count " << n << " element " << i;
      }
    }
    std::vector<float> acc(n), want(n);
    for (std::size_t i = 0; i < n; ++i) acc[i] = want[i] = static_cast<float>(i % 13) - 6.0f;
    for (std::size_t i = 0; i < n; ++i) want[i] += y[i];
    codec_->decode_add(bytes, acc);
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(acc[i], want[i]) << "count " << n << " element " << i;
  }
}

TEST_P(EveryCodec, SmallIntegersSurviveExactlyWhenTheCodecCanHoldThem) {
  // fp32 and bf16 carry small integers exactly; the int8 codecs and fp4 do for a chunk of one
  // value.
  const std::vector<float> x = {3.0f};
  std::vector<float> y(1);
  codec_->decode(encode(*codec_, x), y);
  EXPECT_EQ(y[0], 3.0f);
}

TEST_P(EveryCodec, EncodingIsDeterministic) {
  const std::vector<float> x = gaussian(4099, 7);
  EXPECT_EQ(encode(*codec_, x), encode(*codec_, x));
}

TEST_P(EveryCodec, WrongSizesAreCheckErrors) {
  const std::vector<float> x(10, 1.0f);
  std::vector<std::byte> bytes(codec_->encoded_bytes(10) + 1);
  EXPECT_THROW(codec_->encode(x, bytes), CheckError);
  // The fewest values past 10 whose encoding is another size (topk encodes 10 and 11 values
  // alike: one kept value of a short chunk).
  std::size_t wrong = 11;
  while (codec_->encoded_bytes(wrong) == codec_->encoded_bytes(10)) ++wrong;
  std::vector<float> out(wrong);
  EXPECT_THROW(codec_->decode(std::span(bytes).first(codec_->encoded_bytes(10)), out), CheckError);
  EXPECT_THROW(codec_->decode_add(std::span(bytes).first(codec_->encoded_bytes(10)), out),
               CheckError);
}

TEST_P(EveryCodec, AllZerosDecodeToExactZeros) {
  const std::vector<float> x(777, 0.0f);
  std::vector<float> y(777, 1.0f);
  codec_->decode(encode(*codec_, x), y);
  for (float v : y) ASSERT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryCodec, ::testing::ValuesIn(kAllCodecIds),
                         [](const auto& info) {
                           std::string name(codec_name(info.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(CodecRegistry, UnknownNameIsAConfigErrorListingTheChoices) {
  try {
    parse_codec("int4");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("int8-minmax"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meridian
