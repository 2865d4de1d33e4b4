// int8 min-max codec kernels: one vectorised min/max pass and one vectorised quantise pass to
// encode; one vectorised affine pass to decode.
#include "engine/codec/int8_minmax_codec.h"

#include <cmath>
#include <string>

#include "engine/codec/codec_kernels.h"
#include "engine/error.h"

namespace meridian {
namespace {

using codec_detail::for_each_block;
using codec_detail::kBlock;
using codec_detail::load_f32;
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

Range finite_range(std::span<const float> x) {
  float lo[kLanes], hi[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) {
    lo[l] = INFINITY;
    hi[l] = -INFINITY;
  }
  std::size_t i = 0;
  for (; i + kBlock <= x.size(); i += kBlock) min_max_block(x.data() + i, lo, hi);
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

const std::uint8_t* codes(std::span<const std::byte> in) {
  return reinterpret_cast<const std::uint8_t*>(in.data() + Int8MinMaxCodec::kHeaderBytes);
}

}  // namespace

void Int8MinMaxCodec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  const Range r = finite_range(in);
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
  for_each_block(in.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    quantize_kernel(in.data() + b, q + b, r.min, inv_scale, len);
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
