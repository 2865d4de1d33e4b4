// The int8 kernels: for PRIME and min-max the AVX-512 and AVX2 kernel sets give encodings and
// decodings bit-identical to the portable kernels' (edge sizes, outliers, non-finite values,
// constant and tiny data), and PRIME's shipped bin means match a double-precision reference
// within the stated fixed-point bound with every set. Not a speed test (bench/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/codec/codec_isa.h"
#include "engine/core/codec/int8_minmax_codec.h"
#include "engine/core/codec/int8_prime_codec.h"
#include "tests/unit/codec_test_util.h"

namespace meridian {
namespace {

using codec_test::encode;
using codec_test::f32_at;
using codec_test::gaussian;

constexpr std::size_t kLut = Int8PrimeCodec::kLutBytes;

// Restores the default kernel choice when a test ends, even on a failed assertion.
class KernelChoice {
 public:
  ~KernelChoice() { set_codec_isa_limit(CodecIsa::kAvx512); }
  // Selects `isa`; false if this CPU (or build) cannot run it.
  bool use(CodecIsa isa) {
    set_codec_isa_limit(isa);
    return codec_isa() == isa;
  }
};

constexpr CodecIsa kAllIsas[] = {CodecIsa::kPortable, CodecIsa::kAvx2, CodecIsa::kAvx512};

const char* isa_name(CodecIsa isa) {
  switch (isa) {
    case CodecIsa::kPortable:
      return "portable";
    case CodecIsa::kAvx2:
      return "AVX2";
    case CodecIsa::kAvx512:
      return "AVX-512";
  }
  return "?";
}

// The vector kernel sets this CPU runs (each compared against the portable one).
std::vector<CodecIsa> vector_isas() {
  KernelChoice choice;
  std::vector<CodecIsa> out;
  for (CodecIsa isa : {CodecIsa::kAvx2, CodecIsa::kAvx512}) {
    if (choice.use(isa)) out.push_back(isa);
  }
  return out;
}

// Gaussian values with a few far outliers (clamped to the end bins), NaN, +-inf, +-0 and
// subnormals spread through them.
std::vector<float> awkward(std::size_t n, std::uint64_t seed) {
  std::vector<float> x = gaussian(n, seed);
  std::mt19937_64 rng(seed + 1);
  const float specials[] = {40.0f, -75.0f, NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3.2f,
                            -3.3f};
  for (std::size_t i = 0; i < n / 50 + 1 && n > 0; ++i) {
    x[rng() % n] = specials[rng() % std::size(specials)];
  }
  return x;
}

// Bit-for-bit equality (NaN-safe; no memcmp on the null data() of empty vectors).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

// Sizes around the 64-value block, the 8-way tables, the 8- and 16-value AVX2 steps, the pipelined
// histogram (a block's histogram is added while the next block is quantised: one, two and three
// blocks, with and without a tail) and the 2^19-value flush segment.
const std::size_t kSizes[] = {0,    1,    7,    8,    31,   32,   33,    63,
                              64,   65,   95,   96,   97,   127,  128,   129,
                              192,  511,  512,  1000, 4099, (1u << 19) - 1, 1u << 19,
                              (1u << 19) + 77, (2u << 19) + 64 + 3};

// Data kinds for the identity tests: 0 N(0, 1); 1 awkward(); 2 awkward() scaled by 1e-3 (other
// inv_scale roundings); 3 all equal; 4 +-0 only (sigma = 0); 5 heavy tails (a third of the
// values cubed: many far outside +-3 sigma, clamped to the end bins); 6 half non-finite;
// 7 values near FLT_MAX (the sum of squares needs its double range); 8 subnormals only (1 /
// scale capped at FLT_MAX); 9 NaN and inf only after the last full 64-value block (the AVX2
// quantise then drops its NaN mask, and the tail must still bin NaN as 0).
constexpr int kKinds = 10;

std::vector<float> data_of_kind(int kind, std::size_t n) {
  std::vector<float> x = kind == 1 || kind == 2 ? awkward(n, n + 17) : gaussian(n, n + kind);
  std::mt19937_64 rng(n + 3);
  for (std::size_t i = 0; i < n; ++i) {
    float& v = x[i];
    switch (kind) {
      case 2:
        v *= 1e-3f;
        break;
      case 3:
        v = -2.5f;
        break;
      case 4:
        v = (i % 3 == 0) ? -0.0f : 0.0f;
        break;
      case 5:
        if (i % 3 == 0) v = v * v * v * 4.0f;
        break;
      case 6:
        if (i % 2 == 0) v = (rng() % 3 == 0) ? NAN : (rng() % 2 == 0 ? INFINITY : -INFINITY);
        break;
      case 7:
        v *= 1e38f;  // up to ~5e38 saturates to +-inf for a few: fine, also covered
        break;
      case 8:
        v *= 1e-42f;
        break;
      case 9:
        if (i >= n - n % 64) v = (i % 2 == 0) ? NAN : -INFINITY;
        break;
      default:
        break;
    }
  }
  return x;
}

// Encodes each size and kind of data with every vector kernel set and the portable one and
// asserts identical bytes.
void expect_identical_encodings(const Codec& codec) {
  const std::vector<CodecIsa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 + FMA nor AVX-512";
  KernelChoice choice;
  for (std::size_t n : kSizes) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const std::vector<float> x = data_of_kind(kind, n);
      choice.use(CodecIsa::kPortable);
      const auto portable = encode(codec, x);
      for (CodecIsa isa : isas) {
        ASSERT_TRUE(choice.use(isa));
        ASSERT_EQ(portable, encode(codec, x))
            << codec.name() << ", " << isa_name(isa) << ", n = " << n << ", kind " << kind;
      }
    }
  }
}

TEST(Int8PrimeKernels, VectorAndPortableKernelsEncodeIdentically) {
  expect_identical_encodings(Int8PrimeCodec());
}

TEST(Int8MinMaxKernels, VectorAndPortableKernelsEncodeIdentically) {
  expect_identical_encodings(Int8MinMaxCodec());
}

TEST(CodecIsa, TheLimitCapsTheKernelSet) {
  KernelChoice choice;
  set_codec_isa_limit(CodecIsa::kAvx512);
  const CodecIsa best = codec_isa();
  for (CodecIsa limit : kAllIsas) {
    set_codec_isa_limit(limit);
    EXPECT_EQ(static_cast<int>(codec_isa()),
              std::min(static_cast<int>(limit), static_cast<int>(best)))
        << isa_name(limit);
  }
  set_codec_avx512_allowed(false);  // "no AVX-512": the AVX2 set where the CPU has it
  EXPECT_EQ(static_cast<int>(codec_isa()),
            std::min(static_cast<int>(CodecIsa::kAvx2), static_cast<int>(best)));
  set_codec_avx512_allowed(true);
  EXPECT_EQ(codec_isa(), best);
}

TEST(Int8PrimeKernels, VectorAndPortableKernelsDecodeIdentically) {
  const std::vector<CodecIsa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 + FMA nor AVX-512";
  KernelChoice choice;
  Int8PrimeCodec codec;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t n : kSizes) {
    // A table whose 256 entries all differ in all four bytes' worth of bits, and every code.
    std::vector<std::byte> bytes(codec.encoded_bytes(n));
    for (std::size_t b = 0; b < 256; ++b) {
      const float v = dist(rng) * 1e3f;
      std::memcpy(bytes.data() + 4 * b, &v, 4);
    }
    for (std::size_t i = 0; i < n; ++i) bytes[kLut + i] = static_cast<std::byte>(rng());
    std::vector<float> acc0(n);
    for (float& v : acc0) v = dist(rng);
    const std::vector<float> acc_in = acc0;
    std::vector<float> out0(n, -1.0f);
    choice.use(CodecIsa::kPortable);
    codec.decode(bytes, out0);
    codec.decode_add(bytes, acc0);
    for (std::size_t i = 0; i < n; ++i) {
      float expect;
      std::memcpy(&expect, bytes.data() + 4 * static_cast<std::uint8_t>(bytes[kLut + i]), 4);
      ASSERT_EQ(out0[i], expect) << i;
    }
    for (CodecIsa isa : isas) {
      ASSERT_TRUE(choice.use(isa));
      std::vector<float> out1(n, -2.0f), acc1 = acc_in;
      codec.decode(bytes, out1);
      codec.decode_add(bytes, acc1);
      ASSERT_TRUE(same_bits(out0, out1)) << "decode, " << isa_name(isa) << ", n = " << n;
      ASSERT_TRUE(same_bits(acc0, acc1)) << "decode_add, " << isa_name(isa) << ", n = " << n;
    }
  }
}

// The shipped means against means computed in double from the shipped codes. The histogram sums
// each value's offset inside its bin as fixed point with 28 fraction bits (round to nearest: at
// most 2^-29 bin widths off per value, so also for the mean); everything else is exact or
// double rounding. So |lut[b] - mean_b| <= 2^-29 bin widths + double rounding, then the fp32
// rounding of the mean: half an ulp. Asserted with 2^-28 bin widths to cover the double terms.
void expect_means_within_bound(std::span<const float> x, std::span<const std::byte> bytes) {
  const std::size_t n = x.size();
  std::vector<double> sum(256, 0.0), count(256, 0.0);
  double sum_sq = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t q = static_cast<std::uint8_t>(bytes[kLut + i]);
    const bool finite = std::isfinite(x[i]);
    sum[q] += finite ? static_cast<double>(x[i]) : 0.0;
    count[q] += 1.0;
    if (finite) sum_sq += static_cast<double>(x[i]) * x[i];
  }
  const double sigma = std::sqrt(sum_sq / static_cast<double>(n > 1 ? n - 1 : 1));
  const double bin_width = 6.0 * sigma / 256.0;
  for (std::size_t b = 0; b < 256; ++b) {
    const float shipped = f32_at(bytes, 4 * b);
    if (count[b] == 0.0) {
      ASSERT_EQ(shipped, 0.0f) << "empty bin " << b;
      continue;
    }
    const double mean = sum[b] / count[b];
    const double ulp = std::nextafter(std::fabs(static_cast<float>(mean)), INFINITY) -
                       std::fabs(static_cast<float>(mean));
    const double bound = 0x1p-28 * bin_width + 0.5 * ulp;
    ASSERT_LE(std::fabs(static_cast<double>(shipped) - mean), bound)
        << "bin " << b << " (" << count[b] << " values)";
  }
}

TEST(Int8PrimeKernels, BinMeansMatchADoubleReferenceWithinTheFixedPointBound) {
  KernelChoice choice;
  Int8PrimeCodec codec;
  for (CodecIsa isa : kAllIsas) {
    if (!choice.use(isa)) continue;  // not on this CPU
    SCOPED_TRACE(isa_name(isa));
    for (std::size_t n : {std::size_t{1000}, std::size_t{200'003}}) {
      for (int kind = 0; kind < 2; ++kind) {
        const std::vector<float> x = kind == 0 ? gaussian(n, 99 + n) : awkward(n, 5 + n);
        expect_means_within_bound(x, encode(codec, x));
      }
      // Heavy tails: many values clamped into the end bins.
      std::vector<float> t = gaussian(n, 3);
      for (std::size_t i = 0; i < n; i += 3) t[i] = t[i] * t[i] * t[i] * 4.0f;
      expect_means_within_bound(t, encode(codec, t));
    }
  }
}

TEST(Int8PrimeKernels, OneBinHoldingMoreThanASegmentStaysExact) {
  // 2^20 + 5 equal values: every sub-table takes the most values it may hold between two
  // flushes (2^16), the count fields must not overflow, and the mean is the value itself.
  KernelChoice choice;
  Int8PrimeCodec codec;
  for (CodecIsa isa : kAllIsas) {
    if (!choice.use(isa)) continue;  // not on this CPU
    SCOPED_TRACE(isa_name(isa));
    const std::vector<float> x((1u << 20) + 5, 0.7f);
    const auto bytes = encode(codec, x);
    const std::uint8_t q = static_cast<std::uint8_t>(bytes[kLut]);
    EXPECT_EQ(f32_at(bytes, 4 * q), 0.7f);
    for (std::size_t b = 0; b < 256; ++b) {
      if (b != q) {
        ASSERT_EQ(f32_at(bytes, 4 * b), 0.0f) << b;
      }
    }
  }
}

}  // namespace
}  // namespace meridian
