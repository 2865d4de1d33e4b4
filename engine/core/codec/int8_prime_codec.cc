// int8 PRIME codec kernels: a vectorised sigma pass; a quantise pass (vectorised) feeding a
// one-word-per-value bin histogram (scalar, 8 interleaved tables, one block behind the vector
// work so the two overlap); a LUT pass to decode. Each has a portable and an AVX-512 version,
// the encode passes an AVX2 one too, all with bit-identical results. Not the wire format
// (header).
#include "engine/core/codec/int8_prime_codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "engine/core/codec/codec_isa.h"
#include "engine/core/codec/codec_kernels.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

using codec_detail::for_each_block;
using codec_detail::kBlock;
using codec_detail::load_f32;
using codec_detail::prefetch_ahead;
using codec_detail::store_f32;
constexpr std::size_t kBins = Int8PrimeCodec::kBins;

// ---- the bin-mean histogram ------------------------------------------------------------------
// A value x with code q lies at t = x / scale = k + off from the centre of the bin grid, with
// k = q - 128 the centre of its bin and off in [-1/2, 1/2] (a little more where fp32 rounding of
// the code decides a near-tie; without bound in the clamped end bins q = 0 and 255). So
//   sum of x over bin q = scale * (count * k + sum of off),
// and the histogram needs, per bin, only the count and the sum of the offsets. Both travel in one
// uint64 per value, so a value costs one read-modify-write: the count in bits 47..63, and off + 1
// clamped to [0, 2] as fixed point with kFracBits fraction bits in the low bits. What the clamp
// removes (only in bins 0 and 255) is summed separately, in double. off is exact in double
// (x / scale = x * inv_scale is a product of two floats), so the only approximation is the
// fixed-point rounding: a bin mean moves by at most 2^-(kFracBits+1) bin widths (~1.7e-11 sigma)
// before its conversion to fp32.
constexpr int kFracBits = 28;
constexpr int kCountShift = 47;
constexpr std::uint64_t kCountUnit = std::uint64_t{1} << kCountShift;
constexpr std::size_t kTables = 8;  // interleaved sub-histograms: value j goes to table j % 8
constexpr std::size_t kMaxPerTable = std::size_t{1} << 16;
constexpr std::size_t kSegment = kTables * kMaxPerTable;  // values between two flushes
static_assert(kSegment % kBlock == 0 && kBlock % kTables == 0);
// A table entry holds at most kMaxPerTable fixed-point offsets of at most 2^(kFracBits+1) each:
// their sum stays below the count field, and a count of kMaxPerTable fits above it.
static_assert(kMaxPerTable * (std::uint64_t{2} << kFracBits) < kCountUnit);
static_assert(kCountShift + 17 <= 64);
constexpr double kFracScale = 0x1p28;
static_assert(kFracScale == static_cast<double>(std::uint64_t{1} << kFracBits));

// y + 1.5 * 2^52, for an integer-rounded |y| < 2^51, holds round_even(y) in its low mantissa bits
// (two's complement, offset by the constant's own bits): a double-to-integer conversion that AVX2
// lacks. The word of a value whose off needs no clamp is computed from x directly:
//   round(off * 2^F) + 2^F + count unit = round(x * inv_scale * 2^F) + (129 - q) * 2^F + unit,
// since k * 2^F is an even integer (rounding commutes with adding it). x * inv_scale * 2^F is
// exact in double, and |x * inv_scale| <= 128.5 here, far below 2^51 / 2^F.
constexpr double kWordMagic = 0x1.8p52;
constexpr std::uint64_t kWordMagicBits = std::bit_cast<std::uint64_t>(kWordMagic);
constexpr std::uint64_t kWordBias = kCountUnit + (std::uint64_t{129} << kFracBits) - kWordMagicBits;
// The general form, for clamped offsets: round(clamped * 2^F + 2^F) + unit, via 2^52.
constexpr double kRoundMagic = 0x1p52;
constexpr std::uint64_t kRoundMagicBits = std::bit_cast<std::uint64_t>(kRoundMagic);

// x / scale + 128 with one rounding where the build has FMA (as GCC contracts it anyway), two
// elsewhere; the vector kernels make the same choice, so all give the same codes. In a build
// without FMA the vector kernels' target attributes still enable it, and GCC would fuse their
// multiply and add (-ffp-contract=fast, the GNU default, applies to intrinsics too): an empty
// asm statement keeps the product rounded there (unfused_product()).
#if defined(__FMA__)
constexpr bool kFusedCode = true;
#else
constexpr bool kFusedCode = false;
#endif

// What the [-1, 1] clamp of off removed, summed in value order, for bins 0 (lo) and 255 (hi).
struct Excess {
  double lo = 0.0;
  double hi = 0.0;
};

// The scale factors of one chunk.
struct Scales {
  float inv_scale;      // 1 / scale, the factor of the codes
  double inv_scale_d;   // the same value in double
  double inv_scale_fx;  // inv_scale * 2^kFracBits (exact)
};

// Code of one value and whether x was outside the bin grid (clamped to bin 0 or 255, or not
// finite): then its histogram word needs fix_value(). Branch-free so that the loop vectorises.
MERIDIAN_ALWAYS_INLINE inline bool code_of(float x, const Scales& s, std::uint8_t& code) {
  const float no_nan = codec_detail::nan_to_zero(x);
  const float t =
      kFusedCode ? std::fma(no_nan, s.inv_scale, 128.0f) : no_nan * s.inv_scale + 128.0f;
  code = codec_detail::to_code(t);
  return (t < 0.0f) | (t > 255.0f);
}

// Histogram word of a value inside the grid, from x and its code (see kWordMagic). NaN -> 0 as
// a bit mask: with a select GCC 12 puts the double arithmetic in a branch that it then refuses
// to if-convert, and the loop stays scalar.
MERIDIAN_ALWAYS_INLINE inline std::uint64_t word_of(float x, std::uint8_t code, const Scales& s) {
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(x == x);
  const float no_nan = std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & keep);
  return std::bit_cast<std::uint64_t>(static_cast<double>(no_nan) * s.inv_scale_fx + kWordMagic) +
         kWordBias - (static_cast<std::uint64_t>(code) << kFracBits);
}

// The general word of a value outside the grid: off = x / scale - k computed exactly in double,
// clamped to [-1, 1], the rest added to the excess of its end bin. Non-finite values count in
// their bin but add 0 to its sum (off = -k). Scalar: ~0.3 % of N(0, 1) values come here.
MERIDIAN_ALWAYS_INLINE inline void fix_value(float x, std::uint8_t code, const Scales& s,
                                             std::uint64_t& word, Excess& excess) {
  const double k = static_cast<double>(static_cast<std::int32_t>(code) - 128);
  const double off = static_cast<double>(codec_detail::finite_or_zero(x)) * s.inv_scale_d - k;
  const double clamped = off < -1.0 ? -1.0 : (off > 1.0 ? 1.0 : off);
  (k < 0.0 ? excess.lo : excess.hi) += off - clamped;
  word = std::bit_cast<std::uint64_t>(clamped * kFracScale + (kFracScale + kRoundMagic)) -
         kRoundMagicBits + kCountUnit;
}

// Codes and words of x[0, len): vectorised when len == kBlock, then the rare values outside the
// grid fixed one by one in index order (so both ISAs add the excess in the same order).
MERIDIAN_ALWAYS_INLINE inline void quantize_block(const float* __restrict x,
                                                  std::uint8_t* __restrict q,
                                                  std::uint64_t* __restrict words, std::size_t len,
                                                  const Scales& s, Excess& excess) {
  // Two loops, each with few element widths: one loop doing both vectorised to ~2x slower code
  // with AVX2 (blends and lane extracts).
  alignas(8) std::uint8_t outside[kBlock];
  for (std::size_t j = 0; j < len; ++j) outside[j] = code_of(x[j], s, q[j]);
  for (std::size_t j = 0; j < len; ++j) words[j] = word_of(x[j], q[j], s);
  // Scan the flags 8 at a time: most groups of 8 have none (~2 % of N(0, 1) groups have one).
  std::size_t j = 0;
  for (; j + 8 <= len; j += 8) {
    std::uint64_t flags;
    std::memcpy(&flags, outside + j, sizeof flags);
    while (flags != 0) {
      const std::size_t i = j + static_cast<std::size_t>(std::countr_zero(flags)) / 8;
      fix_value(x[i], q[i], s, words[i], excess);
      flags &= flags - 1;  // each flag is 0 or 1: clears exactly that byte's bit
    }
  }
  for (; j < len; ++j) {
    if (outside[j]) fix_value(x[j], q[j], s, words[j], excess);
  }
}

struct Histogram {
  std::uint64_t tables[kTables][kBins];  // packed (count, offset sum) words, zeroed by flush()
  double count[kBins];
  double offset_sum[kBins];  // in bin widths

  // Adds the words of 16 values. Each value costs three instructions: a byte load of its code,
  // a load of its word and one add-to-memory. Beside the vector quantise work the loop is bound
  // by instruction and memory-operation throughput, not by latency: loading 8 codes at once and
  // taking them apart with shifts (two more instructions per value) was as fast alone and slower
  // in the pipelined loop.
  MERIDIAN_ALWAYS_INLINE void add16(const std::uint8_t* __restrict q,
                                    const std::uint64_t* __restrict words) {
    static_assert(16 % kTables == 0);
#pragma GCC unroll 16  // -O2 keeps a short loop rolled, with index arithmetic per element
    for (std::size_t j = 0; j < 16; ++j) tables[j % kTables][q[j]] += words[j];
  }

  // Adds the words of a full block.
  MERIDIAN_ALWAYS_INLINE void add_block(const std::uint8_t* __restrict q,
                                        const std::uint64_t* __restrict words) {
    for (std::size_t j = 0; j < kBlock; j += 16) add16(q + j, words + j);
  }

  // Adds the words of the last, partial block (len < kBlock).
  void add_tail(const std::uint8_t* q, const std::uint64_t* words, std::size_t len) {
    for (std::size_t j = 0; j < len; ++j) tables[j % kTables][q[j]] += words[j];
  }

  // Moves the tables into count / offset_sum (exact: integers below 2^53 per segment).
  void flush() {
    for (std::size_t b = 0; b < kBins; ++b) {
      std::uint64_t n = 0, frac = 0;
      for (std::size_t h = 0; h < kTables; ++h) {
        n += tables[h][b] >> kCountShift;
        frac += tables[h][b] & (kCountUnit - 1);
        tables[h][b] = 0;
      }
      // frac = sum of (off + 1) * 2^kFracBits: remove the bias before going to double.
      const std::int64_t centred =
          static_cast<std::int64_t>(frac) - static_cast<std::int64_t>(n << kFracBits);
      count[b] += static_cast<double>(n);
      offset_sum[b] += static_cast<double>(centred) / kFracScale;
    }
  }
};

// One segment (at most kSegment values) of the quantise + histogram pass, portable. Adding a
// block's histogram after quantising the next one (as the AVX-512 loop does) measured no faster
// here: GCC's AVX2 quantise code, not the histogram, dominates this loop.
void quantize_segment_portable(const float* x, std::uint8_t* q, std::size_t n, const Scales& s,
                               Histogram& hist, Excess& excess) {
  for_each_block(n, [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    alignas(64) std::uint64_t words[kBlock];
    quantize_block(x + b, q + b, words, len, s, excess);
    if (len == kBlock) {
      hist.add_block(q + b, words);  // the block is still in L1
    } else {
      hist.add_tail(q + b, words, len);
    }
  });
}

// Independent partial sums of squares: 32 doubles are four AVX-512 (eight AVX2) registers, enough
// to hide the add latency; with 8 the sigma pass was latency-bound at ~3x the time of a memcpy.
constexpr std::size_t kSumLanes = 32;
static_assert(kBlock % kSumLanes == 0);

// acc[l] += x^2 over finite x, lane by lane (no reassociation needed to vectorise).
MERIDIAN_ALWAYS_INLINE inline void sum_squares_block(const float* __restrict x,
                                                     double* __restrict acc) {
  for (std::size_t j = 0; j < kBlock; j += kSumLanes) {
    for (std::size_t l = 0; l < kSumLanes; ++l) {
      const float v = codec_detail::finite_or_zero(x[j + l]);
      acc[l] += static_cast<double>(v) * static_cast<double>(v);
    }
  }
}

// The sum of squares of x[i, n) (fewer than kBlock values, scalar) plus the lanes, in the same
// order for both ISAs.
double finish_sum_squares(const float* x, std::size_t i, std::size_t n, const double* lanes) {
  double total = 0.0;
  for (; i < n; ++i) {
    const float v = codec_detail::finite_or_zero(x[i]);
    total += static_cast<double>(v) * static_cast<double>(v);
  }
  for (std::size_t l = 0; l < kSumLanes; ++l) total += lanes[l];
  return total;
}

MERIDIAN_ALWAYS_INLINE inline double sum_squares_body(const float* __restrict x, std::size_t n) {
  double lanes[kSumLanes] = {};
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    prefetch_ahead(x, i, n);
    sum_squares_block(x + i, lanes);
  }
  return finish_sum_squares(x, i, n, lanes);
}

double sum_squares_portable(const float* x, std::size_t n) { return sum_squares_body(x, n); }

#if MERIDIAN_CODEC_AVX512
// p as it is, opaque to GCC: a following add cannot be contracted with the multiply that made
// it (see kFusedCode). Costs no instruction.
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline __m512 unfused_product(__m512 p) {
  __asm__("" : "+v"(p));
  return p;
}

MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline __m256 unfused_product(__m256 p) {
  __asm__("" : "+v"(p));
  return p;
}

// sum_squares_body() with the 32 lanes in four registers: GCC keeps the lanes array in memory,
// and the store-to-load chain through it made the pass ~2x slower than a memcpy of the same
// data. Lane l gets the same values in the same order as in the portable kernel, and x^2 of a
// float is exact in double (fused or not), so the sum is bit-identical.
// a += x[0, 8)^2 and b += x[8, 16)^2 over the finite values, lane by lane.
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline void add_squares16(const float* x, __m512d& a,
                                                                        __m512d& b) {
  const __m512i u = codec_detail::load_in_register(x);
  const __mmask16 finite = _mm512_cmplt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512 v = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(finite, u));
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  a = _mm512_fmadd_pd(lo, lo, a);
  b = _mm512_fmadd_pd(hi, hi, b);
}

MERIDIAN_TARGET_AVX512 double sum_squares_avx512(const float* x, std::size_t n) {
  static_assert(kSumLanes == 32 && kBlock == 64);
  // Named registers: an array of them indexed in a loop stayed in memory.
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  __m512d acc2 = _mm512_setzero_pd(), acc3 = _mm512_setzero_pd();
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    prefetch_ahead(x, i, n);
    add_squares16(x + i, acc0, acc1);       // lanes 0 .. 15
    add_squares16(x + i + 16, acc2, acc3);  // lanes 16 .. 31
    add_squares16(x + i + 32, acc0, acc1);
    add_squares16(x + i + 48, acc2, acc3);
  }
  const __m512d acc[4] = {acc0, acc1, acc2, acc3};
  alignas(64) double lanes[kSumLanes];
  for (std::size_t r = 0; r < 4; ++r) _mm512_store_pd(lanes + 8 * r, acc[r]);
  return finish_sum_squares(x, i, n, lanes);
}

// The constants of the AVX-512 quantise step, built once per segment.
struct QuantizeConsts {
  __m512 inv, c128, c255;
  __m512d inv_fx, magic;
  __m512i bias;
};

MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline QuantizeConsts quantize_consts(
    const Scales& s) {
  return {_mm512_set1_ps(s.inv_scale), _mm512_set1_ps(128.0f),
          _mm512_set1_ps(255.0f),      _mm512_set1_pd(s.inv_scale_fx),
          _mm512_set1_pd(kWordMagic),  _mm512_set1_epi64(static_cast<long long>(kWordBias))};
}

// quantize_block() for 16 values of a full block in AVX-512 intrinsics, the same operations lane
// for lane (the same fused or unfused code arithmetic, exact double products), so codes and
// words are bit-identical to the portable kernel; the out-of-grid flags go to bits j .. j + 15
// of `outside`. GCC's own AVX-512 vectorisation of the block loop ran ~2x slower.
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline void quantize16_avx512(
    const float* __restrict x, std::uint8_t* __restrict q, std::uint64_t* __restrict words,
    const QuantizeConsts& c, std::uint64_t& outside, std::size_t j) {
  const __m512 v = _mm512_loadu_ps(x);
  const __m512 no_nan = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
  const __m512 t = kFusedCode
                       ? _mm512_fmadd_ps(no_nan, c.inv, c.c128)
                       : _mm512_add_ps(unfused_product(_mm512_mul_ps(no_nan, c.inv)), c.c128);
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), c.c255);
  outside |= std::uint64_t{_mm512_cmp_ps_mask(t, clamped, _CMP_NEQ_UQ)} << j;
  const __m512i code = _mm512_cvtps_epi32(clamped);  // round to nearest even, as nearbyint
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(code));
  for (int half = 0; half < 2; ++half) {
    const __m256 xh =
        half == 0 ? _mm512_castps512_ps256(no_nan) : _mm512_extractf32x8_ps(no_nan, 1);
    const __m256i ch =
        half == 0 ? _mm512_castsi512_si256(code) : _mm512_extracti32x8_epi32(code, 1);
    const __m512d w = _mm512_fmadd_pd(_mm512_cvtps_pd(xh), c.inv_fx, c.magic);
    const __m512i word = _mm512_sub_epi64(_mm512_add_epi64(_mm512_castpd_si512(w), c.bias),
                                          _mm512_slli_epi64(_mm512_cvtepu32_epi64(ch), kFracBits));
    _mm512_store_si512(words + 8 * half, word);
  }
}

// The words of the flagged values of a block, redone one by one in index order (as the portable
// kernel does, so the excess sums in the same order).
MERIDIAN_ALWAYS_INLINE inline void fix_outside(const float* x, const std::uint8_t* q,
                                               std::uint64_t* words, std::uint64_t outside,
                                               const Scales& s, Excess& excess) {
  while (outside != 0) {
    const int j = std::countr_zero(outside);
    fix_value(x[j], q[j], s, words[j], excess);
    outside &= outside - 1;
  }
}

// Quantises the full block at x (words to `words`) and, with kHist, adds the histogram of the
// previous block (codes at prev_q, words at prev_words) 16 values at a time between the vector
// steps. Interleaving the scalar histogram with the vector work of the next block lets the two
// run side by side (one block after the other, the quantise + histogram pass took about the sum
// of the two), and reading the words a block after their 64-byte stores avoids waiting on store
// forwarding.
template <bool kHist>
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline void quantize_block_avx512(
    const float* __restrict x, std::uint8_t* __restrict q, std::uint64_t* __restrict words,
    const std::uint8_t* prev_q, const std::uint64_t* prev_words, const QuantizeConsts& c,
    const Scales& s, Histogram& hist, Excess& excess) {
  std::uint64_t outside = 0;
  for (std::size_t j = 0; j < kBlock; j += 16) {
    quantize16_avx512(x + j, q + j, words + j, c, outside, j);
    if constexpr (kHist) hist.add16(prev_q + j, prev_words + j);
  }
  fix_outside(x, q, words, outside, s, excess);
}

// The full-block steps of one vector kernel set, for quantize_segment_pipelined().
struct Avx512Blocks {
  QuantizeConsts c;

  template <bool kHist>
  MERIDIAN_TARGET_AVX512 void quantize(const float* x, std::uint8_t* q, std::uint64_t* words,
                                       const std::uint8_t* prev_q, const std::uint64_t* prev_words,
                                       const Scales& s, Histogram& hist, Excess& excess) const {
    quantize_block_avx512<kHist>(x, q, words, prev_q, prev_words, c, s, hist, excess);
  }
};

// One segment of the quantise + histogram pass with a vector kernel set's block steps
// (Blocks::quantize<kHist>: see quantize_block_avx512()), the histogram one block behind.
// Not a target function itself: it is compiled only inlined into each set's entry point, whose
// flatten attribute inlines the block steps too (GCC checks their target against that entry
// point's). Not always_inline: that would try to inline the block steps here first, where
// their instruction set is not enabled.
template <typename Blocks>
inline void quantize_segment_pipelined(const Blocks& blocks, const float* x, std::uint8_t* q,
                                       std::size_t n, const Scales& s, Histogram& hist,
                                       Excess& excess) {
  alignas(64) std::uint64_t words[2][kBlock];  // the current block's and the previous one's
  const std::size_t full = n - n % kBlock;
  if (full > 0) {
    blocks.template quantize<false>(x, q, words[0], nullptr, nullptr, s, hist, excess);
    for (std::size_t b = kBlock; b < full; b += kBlock) {
      const std::size_t cur = (b / kBlock) % 2;
      blocks.template quantize<true>(x + b, q + b, words[cur], q + b - kBlock, words[1 - cur], s,
                                     hist, excess);
    }
    hist.add_block(q + full - kBlock, words[(full / kBlock - 1) % 2]);
  }
  if (full < n) {
    quantize_block(x + full, q + full, words[0], n - full, s, excess);
    hist.add_tail(q + full, words[0], n - full);
  }
}

MERIDIAN_TARGET_AVX512 __attribute__((flatten)) void quantize_segment_avx512(
    const float* x, std::uint8_t* q, std::size_t n, const Scales& s, Histogram& hist,
    Excess& excess) {
  quantize_segment_pipelined(Avx512Blocks{quantize_consts(s)}, x, q, n, s, hist, excess);
}

// ---- AVX2 kernels: the same passes as the AVX-512 ones, 8 floats (4 doubles) per register ----

// sum_squares_body() with the 32 lanes in eight registers, lane l fed the same values in the
// same order as in the portable kernel (bit-identical, as for AVX-512).
// a += x[0, 4)^2 and b += x[4, 8)^2, lane by lane; with kMask over the finite values only.
template <bool kMask>
MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline void add_squares8(const float* x, __m256d& a,
                                                                     __m256d& b) {
  __m256 v = _mm256_loadu_ps(x);
  if constexpr (kMask) {
    const __m256 abs = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    v = _mm256_and_ps(v, _mm256_cmp_ps(abs, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
  }
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  a = _mm256_fmadd_pd(lo, lo, a);
  b = _mm256_fmadd_pd(hi, hi, b);
}

// The 32 lanes of the sum of squares over the full blocks of x[0, n).
template <bool kMask>
MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline void sum_squares_lanes_avx2(const float* x,
                                                                               std::size_t n,
                                                                               double* lanes) {
  static_assert(kSumLanes == 32 && kBlock == 64);
  __m256d acc[8];  // fully unrolled below, so GCC keeps them in registers
  for (__m256d& a : acc) a = _mm256_setzero_pd();
  for (std::size_t i = 0; i + kBlock <= n; i += kBlock) {
    prefetch_ahead(x, i, n);
#pragma GCC unroll 8
    for (std::size_t r = 0; r < 8; ++r) {
      // Registers 2r % 8 and 2r % 8 + 1 hold lanes 8r % 32 .. 8r % 32 + 7.
      add_squares8<kMask>(x + i + 8 * r, acc[(2 * r) % 8], acc[(2 * r + 1) % 8]);
    }
  }
  for (std::size_t r = 0; r < 8; ++r) _mm256_storeu_pd(lanes + 4 * r, acc[r]);
}

// Masking the non-finite values made the AVX2 pass ~2x slower (~115 against ~55 ps per value
// in L3: the pass is bound by its instruction count), so it runs unmasked first: a sum of finite
// squares cannot overflow a double (at most 2^64 values below 2^256 each) and squares are never
// negative, so a lane is non-finite exactly when one of its values was. Only then is the pass
// redone with the mask (the same sums of the same values for finite data, so the result is the same
// either way). `finite` tells whether every value of the full blocks is finite (the quantise pass
// then skips its NaN mask).
MERIDIAN_TARGET_AVX2 double sum_squares_avx2(const float* x, std::size_t n, bool& finite) {
  double lanes[kSumLanes];
  sum_squares_lanes_avx2<false>(x, n, lanes);
  finite = true;
  for (double lane : lanes) finite &= std::isfinite(lane);
  if (!finite) sum_squares_lanes_avx2<true>(x, n, lanes);
  return finish_sum_squares(x, n - n % kBlock, n, lanes);
}

// The constants of the AVX2 quantise step, built once per segment.
struct QuantizeConstsAvx2 {
  __m256 inv, c128, c255;
  __m256d inv_fx, magic;
  __m256i bias;
};

MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline QuantizeConstsAvx2 quantize_consts_avx2(
    const Scales& s) {
  return {_mm256_set1_ps(s.inv_scale), _mm256_set1_ps(128.0f),
          _mm256_set1_ps(255.0f),      _mm256_set1_pd(s.inv_scale_fx),
          _mm256_set1_pd(kWordMagic),  _mm256_set1_epi64x(static_cast<long long>(kWordBias))};
}

// quantize16_avx512() for 8 values: the words of x[0, 8) to `words`, the out-of-grid flags to
// bits j .. j + 7 of `outside`; returns the codes as 8 int32 lanes. kNoNan: x holds no NaN, so
// the mask that turns NaN into 0 is left out (~5 % of the pass).
template <bool kNoNan>
MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline __m256i quantize8_avx2(
    const float* __restrict x, std::uint64_t* __restrict words, const QuantizeConstsAvx2& c,
    std::uint64_t& outside, std::size_t j) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 no_nan = kNoNan ? v : _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  const __m256 t = kFusedCode
                       ? _mm256_fmadd_ps(no_nan, c.inv, c.c128)
                       : _mm256_add_ps(unfused_product(_mm256_mul_ps(no_nan, c.inv)), c.c128);
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), c.c255);
  const int flags = _mm256_movemask_ps(_mm256_cmp_ps(t, clamped, _CMP_NEQ_UQ));
  outside |= static_cast<std::uint64_t>(flags) << j;
  const __m256i code = _mm256_cvtps_epi32(clamped);  // round to nearest even, as nearbyint
  for (int half = 0; half < 2; ++half) {
    const __m128 xh = half == 0 ? _mm256_castps256_ps128(no_nan) : _mm256_extractf128_ps(no_nan, 1);
    const __m128i ch = half == 0 ? _mm256_castsi256_si128(code) : _mm256_extracti128_si256(code, 1);
    const __m256d w = _mm256_fmadd_pd(_mm256_cvtps_pd(xh), c.inv_fx, c.magic);
    const __m256i word = _mm256_sub_epi64(_mm256_add_epi64(_mm256_castpd_si256(w), c.bias),
                                          _mm256_slli_epi64(_mm256_cvtepu32_epi64(ch), kFracBits));
    _mm256_store_si256(reinterpret_cast<__m256i*>(words + 4 * half), word);
  }
  return code;
}

// quantize_block_avx512() in AVX2: 16 values of vector work, then 16 of the previous block's
// histogram, four times per block (32 at a time measured ~6 % slower).
template <bool kHist, bool kNoNan>
MERIDIAN_TARGET_AVX2 MERIDIAN_ALWAYS_INLINE inline void quantize_block_avx2(
    const float* __restrict x, std::uint8_t* __restrict q, std::uint64_t* __restrict words,
    const std::uint8_t* prev_q, const std::uint64_t* prev_words, const QuantizeConstsAvx2& c,
    const Scales& s, Histogram& hist, Excess& excess) {
  std::uint64_t outside = 0;
  for (std::size_t j = 0; j < kBlock; j += 16) {
    const __m256i c0 = quantize8_avx2<kNoNan>(x + j, words + j, c, outside, j);
    const __m256i c1 = quantize8_avx2<kNoNan>(x + j + 8, words + j + 8, c, outside, j + 8);
    // The packs work within 128-bit lanes: codes 0-3 of c0, 0-3 of c1, 4-7 of c0, 4-7 of c1;
    // the permute puts the 16-bit codes in order, the last pack makes them bytes.
    const __m256i c16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8);
    const __m128i bytes =
        _mm_packus_epi16(_mm256_castsi256_si128(c16), _mm256_extracti128_si256(c16, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j), bytes);
    if constexpr (kHist) hist.add16(prev_q + j, prev_words + j);
  }
  fix_outside(x, q, words, outside, s, excess);
}

// The full-block steps of the AVX2 set, for quantize_segment_pipelined().
template <bool kNoNan>
struct Avx2Blocks {
  QuantizeConstsAvx2 c;

  template <bool kHist>
  MERIDIAN_TARGET_AVX2 void quantize(const float* x, std::uint8_t* q, std::uint64_t* words,
                                     const std::uint8_t* prev_q, const std::uint64_t* prev_words,
                                     const Scales& s, Histogram& hist, Excess& excess) const {
    quantize_block_avx2<kHist, kNoNan>(x, q, words, prev_q, prev_words, c, s, hist, excess);
  }
};

// finite: every value of the full blocks of x is finite (from sum_squares_avx2()).
MERIDIAN_TARGET_AVX2 __attribute__((flatten)) void quantize_segment_avx2(
    const float* x, std::uint8_t* q, std::size_t n, const Scales& s, bool finite, Histogram& hist,
    Excess& excess) {
  if (finite) {
    quantize_segment_pipelined(Avx2Blocks<true>{quantize_consts_avx2(s)}, x, q, n, s, hist, excess);
  } else {
    quantize_segment_pipelined(Avx2Blocks<false>{quantize_consts_avx2(s)}, x, q, n, s, hist,
                               excess);
  }
}
#endif

// finite: set true only where the pass knows that every value of its full blocks is finite
// (the AVX2 one), else false.
double sum_squares(std::span<const float> x, CodecIsa isa, bool& finite) {
  finite = false;
#if MERIDIAN_CODEC_AVX512
  if (isa == CodecIsa::kAvx512) return sum_squares_avx512(x.data(), x.size());
  if (isa == CodecIsa::kAvx2) return sum_squares_avx2(x.data(), x.size(), finite);
#endif
  return sum_squares_portable(x.data(), x.size());
}

// The 256 LUT floats of a payload, validated.
std::array<float, kBins> read_lut(std::span<const std::byte> in) {
  std::array<float, kBins> lut;
  bool all_finite = true;
  for (std::size_t b = 0; b < kBins; ++b) {
    lut[b] = load_f32(in.data() + b * sizeof(float));
    all_finite &= codec_detail::is_finite(lut[b]);
  }
  if (!all_finite) {
    for (std::size_t b = 0; b < kBins; ++b) {
      if (!codec_detail::is_finite(lut[b]))
        throw ProtocolError("bad int8 payload: LUT entry " + std::to_string(b) + " is " +
                            std::to_string(lut[b]) + ", expected a finite bin mean");
    }
  }
  return lut;
}

MERIDIAN_ALWAYS_INLINE inline void lookup_kernel(const std::uint8_t* __restrict q,
                                                 const float* __restrict lut, float* __restrict out,
                                                 std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) out[j] = lut[q[j]];
}

MERIDIAN_ALWAYS_INLINE inline void lookup_add_kernel(const std::uint8_t* __restrict q,
                                                     const float* __restrict lut,
                                                     float* __restrict acc, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += lut[q[j]];
}

const std::uint8_t* indices(std::span<const std::byte> in) {
  return reinterpret_cast<const std::uint8_t*>(in.data() + Int8PrimeCodec::kLutBytes);
}

#if MERIDIAN_CODEC_AVX512
// The LUT as four byte planes (plane p holds byte p of every entry), 4 x 64 bytes each, for
// vpermi2b lookups: 128 entries per instruction, so a 256-entry byte lookup is two permutes and a
// blend on the code's top bit. 64 codes cost 8 permutes, 4 blends and 8 unpacks that put the
// bytes back together as floats; GCC's emulated gather did one value per load + insert.
struct LutPlanes {
  __m512i plane[4][4];
};

MERIDIAN_TARGET_AVX512 LutPlanes make_planes(const std::array<float, kBins>& lut) {
  alignas(64) std::uint8_t bytes[4][kBins];
  for (std::size_t b = 0; b < kBins; ++b) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(lut[b]);
    for (std::size_t p = 0; p < 4; ++p) bytes[p][b] = static_cast<std::uint8_t>(u >> (8 * p));
  }
  LutPlanes planes;
  for (std::size_t p = 0; p < 4; ++p) {
    for (std::size_t r = 0; r < 4; ++r) planes.plane[p][r] = _mm512_load_si512(bytes[p] + 64 * r);
  }
  return planes;
}

// The 64 floats lut[q[0]] .. lut[q[63]], in order, as four registers of 16.
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline void lookup64_avx512(const LutPlanes& t,
                                                                          const std::uint8_t* q,
                                                                          __m512i out[4]) {
  // Dword d of the permuted codes is dword (d % 4) * 4 + d / 4 of the codes (a 4 x 4 transpose):
  // the unpacks below interleave within 128-bit lanes, and this order makes register r hold
  // codes 16 r .. 16 r + 15 in order.
  const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i idx = _mm512_permutexvar_epi32(transpose, _mm512_loadu_si512(q));
  const __mmask64 upper = _mm512_movepi8_mask(idx);  // code >= 128
  __m512i byte[4];
  for (std::size_t p = 0; p < 4; ++p) {
    const __m512i lo = _mm512_permutex2var_epi8(t.plane[p][0], idx, t.plane[p][1]);
    const __m512i hi = _mm512_permutex2var_epi8(t.plane[p][2], idx, t.plane[p][3]);
    byte[p] = _mm512_mask_blend_epi8(upper, lo, hi);
  }
  const __m512i b01_lo = _mm512_unpacklo_epi8(byte[0], byte[1]);
  const __m512i b01_hi = _mm512_unpackhi_epi8(byte[0], byte[1]);
  const __m512i b23_lo = _mm512_unpacklo_epi8(byte[2], byte[3]);
  const __m512i b23_hi = _mm512_unpackhi_epi8(byte[2], byte[3]);
  out[0] = _mm512_unpacklo_epi16(b01_lo, b23_lo);
  out[1] = _mm512_unpackhi_epi16(b01_lo, b23_lo);
  out[2] = _mm512_unpacklo_epi16(b01_hi, b23_hi);
  out[3] = _mm512_unpackhi_epi16(b01_hi, b23_hi);
}

// out[i] = lut[q[i]] (kAdd false) or out[i] += lut[q[i]] (kAdd true) for a prefix of the n
// values (all but fewer than 64); returns its length.
template <bool kAdd>
MERIDIAN_TARGET_AVX512 std::size_t lookup_avx512(const std::array<float, kBins>& lut,
                                                 const std::uint8_t* q, float* out, std::size_t n) {
  const LutPlanes planes = make_planes(lut);
  // Scalar up to a 64-byte aligned output: a 64-byte store that straddles two cache lines made
  // decode from main memory ~2x slower than with aligned stores.
  std::size_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i) {
    if constexpr (kAdd) {
      out[i] += lut[q[i]];
    } else {
      out[i] = lut[q[i]];
    }
  }
  for (; i + 64 <= n; i += 64) {
    __m512i v[4];
    lookup64_avx512(planes, q + i, v);
    for (std::size_t r = 0; r < 4; ++r) {
      __m512 f = _mm512_castsi512_ps(v[r]);
      if constexpr (kAdd) f = _mm512_add_ps(_mm512_load_ps(out + i + 16 * r), f);
      _mm512_store_ps(out + i + 16 * r, f);
    }
  }
  return i;
}
#endif

// Where the AVX-512 lookup is used. Below kAvx512LookupMin values building the byte planes costs
// more than it saves. Above kAvx512LookupMax (16 MiB of fp32 output) the portable lookup was
// faster on the Zen 5 test machine: with the output streaming to main memory the AVX-512 loop
// ran at ~0.65x memcpy against ~1.2x for GCC's emulated gather (cause not found: not the store
// width, not alignment; non-temporal stores recovered part of it). Measured crossover between
// 4 Mi and 8 Mi values; results are identical either way.
constexpr std::size_t kAvx512LookupMin = 512;
constexpr std::size_t kAvx512LookupMax = std::size_t{4} << 20;

// Decodes (kAdd false) or accumulates (kAdd true) n values; both ISAs give identical results.
template <bool kAdd>
void lookup(const std::array<float, kBins>& lut, const std::uint8_t* q, float* out, std::size_t n) {
  std::size_t done = 0;
#if MERIDIAN_CODEC_AVX512
  if (n >= kAvx512LookupMin && n <= kAvx512LookupMax && codec_isa() == CodecIsa::kAvx512)
    done = lookup_avx512<kAdd>(lut, q, out, n);
#endif
  for_each_block(n - done, [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    if constexpr (kAdd) {
      lookup_add_kernel(q + done + b, lut.data(), out + done + b, len);
    } else {
      lookup_kernel(q + done + b, lut.data(), out + done + b, len);
    }
  });
}

}  // namespace

void Int8PrimeCodec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  const std::size_t n = in.size();
  const CodecIsa isa = codec_isa();
  bool finite = false;
  const double sum_sq = sum_squares(in, isa, finite);
  const double sigma = n == 0 ? 0.0 : std::sqrt(sum_sq / static_cast<double>(n > 1 ? n - 1 : 1));
  // 1 / scale = 256 / (6 sigma); capped so a subnormal sigma cannot make it infinite (inf * 0
  // would be NaN). sigma == 0 means every finite value is +-0 (any other square is > 0 in
  // double): any positive factor then puts them in bin 128 and keeps +-inf saturating.
  const double inv_scale_d = sigma > 0.0 ? 256.0 / (6.0 * sigma) : 1.0;
  const float inv_scale = static_cast<float>(std::fmin(inv_scale_d, FLT_MAX));

  std::uint8_t* q = reinterpret_cast<std::uint8_t*>(out.data() + kLutBytes);
  const Scales scales{inv_scale, inv_scale, static_cast<double>(inv_scale) * kFracScale};
  auto hist = std::make_unique<Histogram>();  // 20 KiB: kept off the stack of ring threads
  Excess excess;
  for (std::size_t s = 0; s < n; s += kSegment) {
    const std::size_t len = std::min(kSegment, n - s);
#if MERIDIAN_CODEC_AVX512
    if (isa == CodecIsa::kAvx512) {
      quantize_segment_avx512(in.data() + s, q + s, len, scales, *hist, excess);
    } else if (isa == CodecIsa::kAvx2) {
      quantize_segment_avx2(in.data() + s, q + s, len, scales, finite, *hist, excess);
    } else
#endif
    {
      quantize_segment_portable(in.data() + s, q + s, len, scales, *hist, excess);
    }
    hist->flush();
  }
  hist->offset_sum[0] += excess.lo;
  hist->offset_sum[kBins - 1] += excess.hi;

  // mean of bin b = (k + offset_sum / count) / inv_scale, k = b - 128. The clamp only guards
  // the fp32 conversion: a mean of finite floats is within the float range.
  for (std::size_t b = 0; b < kBins; ++b) {
    const double count = hist->count[b];
    double mean = 0.0;
    if (count > 0.0) {
      mean = (static_cast<double>(b) - 128.0 + hist->offset_sum[b] / count) /
             static_cast<double>(inv_scale);
      mean = std::fmin(std::fmax(mean, -FLT_MAX), FLT_MAX);
    }
    store_f32(out.data() + b * sizeof(float), static_cast<float>(mean));
  }
}

void Int8PrimeCodec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  lookup<false>(read_lut(in), indices(in), out.data(), out.size());
}

void Int8PrimeCodec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  lookup<true>(read_lut(in), indices(in), acc.data(), acc.size());
}

}  // namespace meridian
