// The top-k codec (engine/core/codec/topk_codec.h): which values are kept, what they decode to, the
// sizes its parameters give, and the errors of a payload it did not make.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engine/core/codec/topk_codec.h"
#include "engine/core/error.h"
#include "tests/unit/codec_test_util.h"

namespace meridian {
namespace {

using codec_test::decode;
using codec_test::encode;
using codec_test::gaussian;

// The indices of the k largest |x| in [begin, begin + len), ties to the lower index: the
// selection written out plainly, by a full sort.
std::set<std::size_t> reference_top(const std::vector<float>& x, std::size_t begin, std::size_t len,
                                    std::size_t k) {
  std::vector<std::size_t> idx(len);
  std::iota(idx.begin(), idx.end(), begin);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  return std::set<std::size_t>(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k));
}

TEST(TopkCodec, KeepsExactlyTheLargestMagnitudesOfEachChunk) {
  const TopkCodec codec(0.02, 2);
  ASSERT_EQ(codec.k(), 82u);
  const std::size_t n = 3 * 4096 + 1000;  // three full chunks and a tail
  const std::vector<float> x = gaussian(n, 11);
  const std::vector<float> y = decode(codec, encode(codec, x), n);
  for (std::size_t base = 0; base < n; base += 4096) {
    const std::size_t len = std::min<std::size_t>(4096, n - base);
    const std::size_t k = codec.kept(len);
    EXPECT_EQ(k, len == 4096 ? 82u : 20u) << base;  // round(82 * 1000 / 4096) = 20
    const std::set<std::size_t> want = reference_top(x, base, len, k);
    for (std::size_t i = base; i < base + len; ++i) {
      if (want.count(i) == 0) {
        EXPECT_EQ(y[i], 0.0f) << "element " << i << " is not among the top " << k;
      } else {
        // Top-k of N(0, 1) values are far from 0 (|x| > 2), so a kept value never decodes to 0.
        EXPECT_NE(y[i], 0.0f) << "element " << i << " is among the top " << k;
      }
    }
  }
}

TEST(TopkCodec, KeptValuesDecodeToTheirBinMeans) {
  for (int bits : {1, 2, 4, 8}) {
    const TopkCodec codec(0.05, bits);
    const std::vector<float> x = gaussian(4096, 100 + bits);
    const std::vector<float> y = decode(codec, encode(codec, x), x.size());
    const std::set<std::size_t> kept = reference_top(x, 0, 4096, codec.k());
    float lo = INFINITY, hi = -INFINITY;
    for (std::size_t i : kept) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    const double width = (static_cast<double>(hi) - lo) / (1 << bits);
    // Every kept value lands within its bin, and each bin's values keep their sum: the decoded
    // kept values sum to the kept originals (up to the fp32 rounding of each bin's mean).
    double sum_x = 0, sum_y = 0;
    for (std::size_t i : kept) {
      EXPECT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), width * (1 + 1e-6))
          << bits << " bits, element " << i;
      sum_x += x[i];
      sum_y += y[i];
    }
    EXPECT_NEAR(sum_y, sum_x, 1e-5 * kept.size() * std::max(std::fabs(lo), std::fabs(hi)))
        << bits << " bits";
  }
}

TEST(TopkCodec, SizesFollowDensityAndBits) {
  // SparseLoCo's point, 2 % and 2 bits: 4 table floats + 82 (12 + 2)-bit entries per chunk.
  const TopkCodec sparse(0.02, 2);
  EXPECT_EQ(sparse.encoded_bytes(4096), 4u + 16 + 144);
  // 1 Mi values: 256 chunks of 160 bytes, about 1/102 of fp32's 4 MiB.
  EXPECT_EQ(sparse.encoded_bytes(1u << 20), 4u + 256 * 160);
  EXPECT_EQ(TopkCodec(1.0, 8).kept(4096), 4096u);
  EXPECT_EQ(TopkCodec(1e-9, 2).kept(4096), 1u);  // at least one per chunk
  EXPECT_EQ(TopkCodec(0.02, 2).kept(1), 1u);
  EXPECT_EQ(sparse.encoded_bytes(0), 4u);
}

TEST(TopkCodec, DensityOneWithEightBitsKeepsEveryValueWithinItsBin) {
  const TopkCodec codec(1.0, 8);
  const std::vector<float> x = gaussian(5000, 3);
  const std::vector<float> y = decode(codec, encode(codec, x), x.size());
  for (std::size_t base = 0; base < x.size(); base += 4096) {
    const std::size_t len = std::min<std::size_t>(4096, x.size() - base);
    const auto [lo, hi] = std::minmax_element(x.begin() + base, x.begin() + base + len);
    for (std::size_t i = base; i < base + len; ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), (*hi - *lo) / 256 * (1 + 1e-6f)) << i;
  }
}

TEST(TopkCodec, TiesGoToTheLowerIndex) {
  const TopkCodec codec(2.0 / 4096, 2);  // k = 2
  std::vector<float> x(4096, 1.0f);
  const std::vector<float> y = decode(codec, encode(codec, x), x.size());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(std::count(y.begin(), y.end(), 0.0f), 4094);
}

TEST(TopkCodec, NonFiniteInputsStillMakeValidPayloads) {
  const TopkCodec codec(0.01, 2);
  std::vector<float> x = gaussian(4096, 5);
  x[7] = NAN;
  x[9] = INFINITY;
  x[11] = -INFINITY;
  const std::vector<float> y = decode(codec, encode(codec, x), x.size());
  EXPECT_EQ(y[7], 0.0f);  // NaN is taken as 0, never among the largest
  EXPECT_TRUE(std::isfinite(y[9]) && y[9] > 0) << y[9];
  EXPECT_TRUE(std::isfinite(y[11]) && y[11] < 0) << y[11];
}

TEST(TopkCodec, OtherParametersAreAProtocolErrorNamingBoth) {
  const std::vector<float> x = gaussian(100, 1);
  const std::vector<std::byte> bytes = encode(TopkCodec(0.02, 2), x);
  std::vector<float> out(100, 5.0f);
  try {
    TopkCodec(0.02, 4).decode(std::span(bytes).first(4), std::span(out).first(0));
    FAIL() << "no exception";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("2 bits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 bits"), std::string::npos) << e.what();
  }
  std::vector<std::byte> other = bytes;
  other[0] = std::byte{83};  // k = 83, not 82
  EXPECT_THROW(TopkCodec(0.02, 2).decode(other, out), ProtocolError);
  EXPECT_EQ(out, std::vector<float>(100, 5.0f));
}

TEST(TopkCodec, CorruptPayloadsAreProtocolErrorsThatWriteNothing) {
  const TopkCodec codec(0.02, 2);
  const std::vector<float> x = gaussian(2 * 4096, 9);
  const std::vector<std::byte> good = encode(codec, x);
  const std::size_t second_table = 4 + 160;  // the second chunk's record
  // A non-finite table value in the second chunk: the first chunk is not written either.
  std::vector<std::byte> bad = good;
  const float nan = NAN;
  std::memcpy(bad.data() + second_table + 4, &nan, sizeof nan);
  std::vector<float> acc(x.size(), 1.0f);
  EXPECT_THROW(codec.decode_add(bad, acc), ProtocolError);
  EXPECT_EQ(acc, std::vector<float>(x.size(), 1.0f));
  // Indices out of order: the first entry's index set to 4095 (the largest), so the second
  // entry's no longer ascends.
  bad = good;
  bad[4 + 16] = std::byte{0xFF};
  bad[4 + 16 + 1] |= std::byte{0x0F};
  EXPECT_THROW(codec.decode(bad, acc), ProtocolError);
  EXPECT_EQ(acc, std::vector<float>(x.size(), 1.0f));
  // A tail chunk's index beyond the tail: 10 values keep 1 (round(82 * 10 / 4096) = 0, then
  // at least 1), whose index must be < 10.
  const std::vector<float> tail = gaussian(10, 2);
  std::vector<std::byte> t = encode(codec, tail);
  t[4 + 16] = std::byte{10};
  t[4 + 16 + 1] &= std::byte{0xF0};
  std::vector<float> out(10, 2.0f);
  EXPECT_THROW(codec.decode(t, out), ProtocolError);
  EXPECT_EQ(out, std::vector<float>(10, 2.0f));
}

TEST(TopkCodec, ParametersOutOfRangeAreConfigErrors) {
  EXPECT_THROW(TopkCodec(0.0, 2), ConfigError);
  EXPECT_THROW(TopkCodec(1.5, 2), ConfigError);
  EXPECT_THROW(TopkCodec(NAN, 2), ConfigError);
  EXPECT_THROW(TopkCodec(0.02, 0), ConfigError);
  EXPECT_THROW(TopkCodec(0.02, 9), ConfigError);
  CodecParams p;
  p.topk_bits = 12;
  EXPECT_THROW(make_codec(CodecId::kTopk, p), ConfigError);
}

}  // namespace
}  // namespace meridian
