// bf16 codec kernels: integer round-to-nearest-even on the fp32 bit pattern, one pass each way.
#include "engine/core/codec/bf16_codec.h"

#include <bit>
#include <cstring>

#include "engine/core/codec/codec_kernels.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

using codec_detail::for_each_block;

MERIDIAN_ALWAYS_INLINE inline std::uint16_t to_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  // Adding 0x7FFF plus the lowest kept bit rounds half to even; a carry into the exponent is
  // the correct result (including rounding up to infinity).
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>(nan ? quiet_nan : rounded);
}

MERIDIAN_ALWAYS_INLINE inline float from_bf16(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

MERIDIAN_ALWAYS_INLINE inline void encode_kernel(const float* __restrict x,
                                                 std::byte* __restrict out, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) {
    const std::uint16_t h = to_bf16(x[j]);
    std::memcpy(out + 2 * j, &h, sizeof h);
  }
}

MERIDIAN_ALWAYS_INLINE inline void decode_kernel(const std::byte* __restrict in,
                                                 float* __restrict out, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) out[j] = from_bf16(in + 2 * j);
}

MERIDIAN_ALWAYS_INLINE inline void decode_add_kernel(const std::byte* __restrict in,
                                                     float* __restrict acc, std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += from_bf16(in + 2 * j);
}

}  // namespace

std::uint16_t fp32_to_bf16_bits(float x) { return to_bf16(x); }

float bf16_bits_to_fp32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

void Bf16Codec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  for_each_block(in.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    encode_kernel(in.data() + b, out.data() + 2 * b, len);
  });
}

void Bf16Codec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  for_each_block(out.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    decode_kernel(in.data() + 2 * b, out.data() + b, len);
  });
}

void Bf16Codec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  for_each_block(acc.size(), [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
    decode_add_kernel(in.data() + 2 * b, acc.data() + b, len);
  });
}

}  // namespace meridian
