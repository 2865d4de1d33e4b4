// fp4 (E3M0, block of 32, fp32 scale) codec kernels: per block one max pass and one
// quantise-and-pack pass to encode; decode validates all scales, then one unpack pass. Portable
// C++ shaped for GCC's vectoriser (codec_kernels.h); no intrinsics kernels yet.
#include "engine/core/codec/fp4_codec.h"

#include <bit>
#include <cfloat>
#include <cstdio>
#include <string>

#include "engine/core/codec/codec_kernels.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

using codec_detail::for_each_block;
using codec_detail::load_f32;
using codec_detail::store_f32;
constexpr std::size_t kValues = Fp4Codec::kBlockValues;

// The largest magnitude of a code, to which each block's amax maps.
constexpr float kMaxMagnitude = 16.0f;
// Bit pattern of the largest valid scale, FLT_MAX / 16 (exact: a power-of-two quotient). As an
// unsigned compare it also rejects a set sign bit, inf and NaN.
constexpr std::uint32_t kMaxScaleBits = std::bit_cast<std::uint32_t>(FLT_MAX / kMaxMagnitude);

MERIDIAN_ALWAYS_INLINE inline std::uint8_t to_code(float v) {
  const std::uint32_t sign = std::bit_cast<std::uint32_t>(v) >> 31;
  float a = std::fabs(v);
  a = a < kMaxMagnitude ? a : kMaxMagnitude;
  // Round |v| to a power of two on its fp32 bits: adding just under half the mantissa range,
  // plus the exponent's lowest bit, carries into the exponent exactly when the mantissa is past
  // the midpoint 1.5 * 2^k, or at it with an odd exponent (ties to even). The fp32 exponent
  // bias 127 and the E3M0 bias 3 differ by 124, an even number, so fp32 parity is code parity.
  const std::uint32_t u = std::bit_cast<std::uint32_t>(a);
  const std::int32_t e = static_cast<std::int32_t>((u + 0x3FFFFFu + ((u >> 23) & 1u)) >> 23) - 124;
  // Below the smallest magnitude 1/4 the choice is between 0 and 1/4: the tie 1/8 goes to 0.
  const std::int32_t mag = a > 0.125f ? (e > 1 ? e : 1) : 0;
  return static_cast<std::uint8_t>(sign << 3 | static_cast<std::uint32_t>(mag));
}

// The code's value without scale, built on its bits: sign, and exponent field e + 124 for e > 0.
MERIDIAN_ALWAYS_INLINE inline float from_code(std::uint32_t c) {
  const std::uint32_t mag = c & 7u;
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(mag != 0);
  return std::bit_cast<float>(((c & 8u) << 28) | (((mag + 124u) << 23) & keep));
}

// The block's largest finite |x| as fp32 bits: for non-negative floats the order of the bit
// patterns is the order of the values, and an integer max reduction vectorises where a float
// one does not (without -ffinite-math-only).
MERIDIAN_ALWAYS_INLINE inline std::uint32_t amax_bits(const float* __restrict x, std::size_t len) {
  std::uint32_t m = 0;
  for (std::size_t j = 0; j < len; ++j) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(codec_detail::finite_or_zero(x[j]));
    const std::uint32_t a = u & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

MERIDIAN_ALWAYS_INLINE inline std::uint8_t code_of(float x, float scale) {
  return to_code(codec_detail::nan_to_zero(x) / scale);
}

// Encodes one block of `len` values: returns its scale and writes ceil(len / 2) code bytes.
// The codes go to a small array first and are packed after: the quantise loop then reads the
// values in order and vectorises 8 wide; with the pairs packed inside it GCC used 4-wide
// vectors and shuffles, and the encode took ~1.5x as long (1 Mi values, best of 30: 1140-1225
// against 750-820 ps per value). Unpacking first in the decode measured slower (440 vs 330).
MERIDIAN_ALWAYS_INLINE inline float encode_block(const float* __restrict x,
                                                 std::uint8_t* __restrict q, std::size_t len) {
  const float scale = std::bit_cast<float>(amax_bits(x, len)) * (1.0f / kMaxMagnitude);
  std::uint8_t c[kValues + 1];
  if (scale == 0.0f) {
    for (std::size_t j = 0; j < len; ++j) c[j] = 0;
  } else {
    for (std::size_t j = 0; j < len; ++j) c[j] = code_of(x[j], scale);
  }
  c[len] = 0;  // the high nibble of an odd block's last byte
  for (std::size_t k = 0; k < (len + 1) / 2; ++k)
    q[k] = static_cast<std::uint8_t>(c[2 * k] | c[2 * k + 1] << 4);
  return scale;
}

// out[j] op= value of code j * scale over one block of `len` values.
template <typename Op>
MERIDIAN_ALWAYS_INLINE inline void decode_block(const std::uint8_t* __restrict q, float scale,
                                                float* __restrict out, std::size_t len, Op op) {
  for (std::size_t k = 0; k < len / 2; ++k) {
    op(out[2 * k], from_code(q[k] & 0xFu) * scale);
    op(out[2 * k + 1], from_code(q[k] >> 4) * scale);
  }
  if (len % 2 != 0) op(out[len - 1], from_code(q[len / 2] & 0xFu) * scale);
}

// "1.5e+40 (bits 0x...)": the bits tell a NaN's payload and -0 apart.
std::string describe_scale(float scale) {
  char text[64];
  std::snprintf(text, sizeof text, "%g (bits 0x%08x)", static_cast<double>(scale),
                std::bit_cast<std::uint32_t>(scale));
  return text;
}

// Checks every block's scale and the unused last nibble before anything is written.
void validate(std::span<const std::byte> in, std::size_t count) {
  const std::size_t blocks = Fp4Codec::blocks(count);
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = load_f32(in.data() + b * sizeof(float));
    if (std::bit_cast<std::uint32_t>(scale) > kMaxScaleBits)
      throw ProtocolError("bad fp4 payload: block " + std::to_string(b) + " of " +
                          std::to_string(blocks) + " has scale " + describe_scale(scale) +
                          ", expected a finite value in [0, FLT_MAX / 16]");
  }
  if (count % 2 != 0) {
    const auto last = static_cast<std::uint8_t>(in[in.size() - 1]);
    if ((last >> 4) != 0)
      throw ProtocolError("bad fp4 payload: the unused high nibble of the last byte (block " +
                          std::to_string(blocks - 1) + ") is " + std::to_string(last >> 4) +
                          ", expected 0");
  }
}

template <typename Op>
void decode_all(std::span<const std::byte> in, std::span<float> out, Op op) {
  validate(in, out.size());
  const std::size_t scales_bytes = Fp4Codec::blocks(out.size()) * sizeof(float);
  const auto* q = reinterpret_cast<const std::uint8_t*>(in.data() + scales_bytes);
  for_each_block<kValues>(out.size(), [&](std::size_t i, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    const float scale = load_f32(in.data() + i / kValues * sizeof(float));
    decode_block(q + i / 2, scale, out.data() + i, len, op);
  });
}

}  // namespace

std::uint8_t fp4_code(float v) { return to_code(codec_detail::nan_to_zero(v)); }

float fp4_value(std::uint8_t code) { return from_code(code & 0xFu); }

void Fp4Codec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  const std::size_t scales_bytes = blocks(in.size()) * sizeof(float);
  auto* q = reinterpret_cast<std::uint8_t*>(out.data() + scales_bytes);
  for_each_block<kValues>(in.size(), [&](std::size_t i, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    store_f32(out.data() + i / kValues * sizeof(float),
              encode_block(in.data() + i, q + i / 2, len));
  });
}

void Fp4Codec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  decode_all(in, out, [](float& o, float v) MERIDIAN_ALWAYS_INLINE { o = v; });
}

void Fp4Codec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  decode_all(in, acc, [](float& a, float v) MERIDIAN_ALWAYS_INLINE { a += v; });
}

}  // namespace meridian
