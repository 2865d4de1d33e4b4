// int8 min-max codec kernels: one vectorised min/max pass and one vectorised quantise pass to
// encode (each also in AVX-512, identical results; both prefetch ahead, as streaming passes
// from main memory); one vectorised affine pass to decode.
#include "engine/core/codec/int8_minmax_codec.h"

#include <cmath>
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
constexpr std::size_t kLanes = 8;

// The largest min + 255 scale a decoder accepts, and the largest an encoder produces. The gap
// covers the fp32 rounding of scale and of min + q * scale (fused or not), so an accepted
// payload never decodes to infinity.
constexpr double kMaxDecodable = FLT_MAX * (1.0 - 0x1p-21);
constexpr double kMaxEncoded = FLT_MAX * (1.0 - 0x1p-20);

// Lane-wise min and max of the finite values: a non-finite value is replaced by the neutral
// element (+inf for min, -inf for max) so every lane is stored unconditionally; a conditional
// update compiled to masked stores through memory and ran ~3x slower.
MERIDIAN_ALWAYS_INLINE inline void min_max_block(const float* __restrict x, float* __restrict lo,
                                                 float* __restrict hi) {
  for (std::size_t j = 0; j < kBlock; j += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      const float v = x[j + l];
      const bool finite = codec_detail::is_finite(v);
      const float for_min = finite ? v : INFINITY;
      const float for_max = finite ? v : -INFINITY;
      lo[l] = for_min < lo[l] ? for_min : lo[l];
      hi[l] = for_max > hi[l] ? for_max : hi[l];
    }
  }
}

struct Range {
  float min = 0.0f;
  float max = 0.0f;
};

Range finite_range_portable(std::span<const float> x) {
  float lo[kLanes], hi[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) {
    lo[l] = INFINITY;
    hi[l] = -INFINITY;
  }
  std::size_t i = 0;
  for (; i + kBlock <= x.size(); i += kBlock) {
    prefetch_ahead(x.data(), i, x.size());
    min_max_block(x.data() + i, lo, hi);
  }
  float mn = INFINITY, mx = -INFINITY;
  for (; i < x.size(); ++i) {
    if (!codec_detail::is_finite(x[i])) continue;
    mn = std::fmin(mn, x[i]);
    mx = std::fmax(mx, x[i]);
  }
  for (std::size_t l = 0; l < kLanes; ++l) {
    mn = std::fmin(mn, lo[l]);
    mx = std::fmax(mx, hi[l]);
  }
  if (mn > mx) return {};  // no finite value
  return {mn, mx};
}

MERIDIAN_ALWAYS_INLINE inline void quantize_kernel(const float* __restrict x,
                                                   std::uint8_t* __restrict q, float min,
                                                   float inv_scale, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) {
    q[j] = codec_detail::to_code((codec_detail::nan_to_zero(x[j]) - min) * inv_scale);
  }
}

MERIDIAN_ALWAYS_INLINE inline void dequantize_kernel(const std::uint8_t* __restrict q, float min,
                                                     float scale, float* __restrict out,
                                                     std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) out[j] = min + static_cast<float>(q[j]) * scale;
}

MERIDIAN_ALWAYS_INLINE inline void dequantize_add_kernel(const std::uint8_t* __restrict q,
                                                         float min, float scale,
                                                         float* __restrict acc, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += min + static_cast<float>(q[j]) * scale;
}

struct Affine {
  float min;
  float scale;
};

Affine read_header(std::span<const std::byte> in) {
  const Affine a{load_f32(in.data()), load_f32(in.data() + sizeof(float))};
  if (!codec_detail::is_finite(a.min))
    throw ProtocolError("bad int8-minmax payload: min is " + std::to_string(a.min) +
                        ", expected a finite value");
  if (!codec_detail::is_finite(a.scale) || a.scale < 0.0f)
    throw ProtocolError("bad int8-minmax payload: scale is " + std::to_string(a.scale) +
                        ", expected a finite value >= 0");
  const double top = static_cast<double>(a.min) + 255.0 * static_cast<double>(a.scale);
  if (top > kMaxDecodable)
    throw ProtocolError("bad int8-minmax payload: min + 255 * scale is " + std::to_string(top) +
                        ", expected at most " + std::to_string(kMaxDecodable));
  return a;
}

#if MERIDIAN_CODEC_AVX512
// min and max of the finite values with AVX-512, four registers each. Min and max are exact and
// order-free, so the result equals finite_range_portable()'s.
MERIDIAN_TARGET_AVX512 Range finite_range_avx512(std::span<const float> x) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf_bits = _mm512_set1_epi32(0x7F800000);
  __m512 lo[4], hi[4];
  for (int r = 0; r < 4; ++r) {
    lo[r] = _mm512_set1_ps(INFINITY);
    hi[r] = _mm512_set1_ps(-INFINITY);
  }
  const float* p = x.data();
  const std::size_t n = x.size();
  std::size_t i = 0;
  static_assert(kBlock == 64);
  for (; i + kBlock <= n; i += kBlock) {
    prefetch_ahead(p, i, n);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512i u = codec_detail::load_in_register(p + i + 16 * r);
      const __mmask16 finite = _mm512_cmplt_epu32_mask(_mm512_and_si512(u, abs_mask), inf_bits);
      const __m512 v = _mm512_castsi512_ps(u);
      lo[r] = _mm512_mask_min_ps(lo[r], finite, lo[r], v);
      hi[r] = _mm512_mask_max_ps(hi[r], finite, hi[r], v);
    }
  }
  float mn =
      _mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3])));
  float mx =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3])));
  for (; i < n; ++i) {
    if (!codec_detail::is_finite(p[i])) continue;
    mn = std::fmin(mn, p[i]);
    mx = std::fmax(mx, p[i]);
  }
  if (mn > mx) return {};  // no finite value
  return {mn, mx};
}

// quantize_kernel() over whole blocks of 64 with AVX-512, the same operations per value
// (NaN -> 0, subtract, multiply, clamp, round to nearest even), so the codes are identical.
// Returns how many values it did.
MERIDIAN_TARGET_AVX512 std::size_t quantize_avx512(const float* x, std::uint8_t* q, std::size_t n,
                                                   float min, float inv_scale) {
  const __m512 vmin = _mm512_set1_ps(min);
  const __m512 inv = _mm512_set1_ps(inv_scale);
  const __m512 c255 = _mm512_set1_ps(255.0f);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    prefetch_ahead(x, i, n);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * r);
      const __m512 no_nan = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
      __m512 t = _mm512_mul_ps(_mm512_sub_ps(no_nan, vmin), inv);
      t = _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), c255);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i + 16 * r),
                       _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t)));
    }
  }
  return i;
}
#endif

Range finite_range(std::span<const float> x) {
#if MERIDIAN_CODEC_AVX512
  if (codec_isa() == CodecIsa::kAvx512) return finite_range_avx512(x);
#endif
  return finite_range_portable(x);
}

const std::uint8_t* codes(std::span<const std::byte> in) {
  return reinterpret_cast<const std::uint8_t*>(in.data() + Int8MinMaxCodec::kHeaderBytes);
}

}  // namespace

void Int8MinMaxCodec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  Range r = finite_range(in);
  // +0 for a zero min or max: which of -0 and +0 a min/max keeps depends on the order of the
  // comparisons, which differs between the kernel sets (x + 0 is x for every other x).
  r.min += 0.0f;
  r.max += 0.0f;
  float scale =
      static_cast<float>((static_cast<double>(r.max) - static_cast<double>(r.min)) / 255.0);
  // Only for data spanning nearly all of fp32: keep min + 255 scale decodable (a few steps).
  while (static_cast<double>(r.min) + 255.0 * static_cast<double>(scale) > kMaxEncoded)
    scale = std::nextafter(scale, 0.0f);
  // Capped: a subnormal scale would otherwise give an infinite inverse. With scale 0 (one finite
  // value repeated) every code decodes to min; the factor 1 only keeps inf * 0 = NaN out.
  const float inv_scale =
      scale > 0.0f ? static_cast<float>(std::fmin(1.0 / static_cast<double>(scale), FLT_MAX))
                   : 1.0f;
  store_f32(out.data(), r.min);
  store_f32(out.data() + sizeof(float), scale);
  std::uint8_t* q = reinterpret_cast<std::uint8_t*>(out.data() + kHeaderBytes);
  std::size_t done = 0;
#if MERIDIAN_CODEC_AVX512
  if (codec_isa() == CodecIsa::kAvx512)
    done = quantize_avx512(in.data(), q, in.size(), r.min, inv_scale);
#endif
  const float* rest = in.data() + done;
  const std::size_t rest_n = in.size() - done;
  for_each_block(rest_n, [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    prefetch_ahead(rest, b, rest_n);
    quantize_kernel(rest + b, q + done + b, r.min, inv_scale, len);
  });
}

void Int8MinMaxCodec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  const Affine a = read_header(in);
  const std::uint8_t* q = codes(in);
  for_each_block(out.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    dequantize_kernel(q + b, a.min, a.scale, out.data() + b, len);
  });
}

void Int8MinMaxCodec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  const Affine a = read_header(in);
  const std::uint8_t* q = codes(in);
  for_each_block(acc.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    dequantize_add_kernel(q + b, a.min, a.scale, acc.data() + b, len);
  });
}

}  // namespace meridian
