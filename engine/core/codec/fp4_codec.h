// The fp4 codec of Streaming DiLoCo (arXiv 2501.18512): each value a 4-bit float E3M0 (sign,
// 3 exponent bits, no mantissa) times an fp32 scale shared by a block of 32 values. Not OCP
// MXFP4 (E2M1 with an E8M0 scale), and no stochastic rounding or error feedback.
#pragma once

#include <cstdint>

#include "engine/core/codec/codec.h"

namespace meridian {

// Payload of `count` values in B = ceil(count / 32) blocks: B fp32 scales (little-endian), then
// ceil(count / 2) bytes of 4-bit codes, value 2j in the low nibble of byte j and value 2j + 1 in
// its high nibble (an odd count leaves the last high nibble 0). Block b holds values
// [32 b, 32 b + 32); the last block may be shorter.
//
// A code is s eee: x^ = (-1)^s * m(eee) * scale, m(0) = 0, m(e) = 2^(e - 3) for e = 1..7, so the
// magnitudes are {0, 1/4, 1/2, 1, 2, 4, 8, 16}. Encoding per block: scale = amax / 16 with amax
// the largest finite |x| in the block (so amax maps to 16, the largest code), then v = x / scale
// rounded to the nearest magnitude, ties to the even exponent field (|v| = 0.125 -> 0,
// 0.375 -> 1/2, 0.75 -> 1/2, 1.5 -> 2, 3 -> 2, 6 -> 8, 12 -> 8); the sign is kept (a negative
// value that rounds to 0 is -0). Hence for every finite x: |x^ - x| <= max(|x| / 3, amax / 128),
// up to the fp32 rounding of x / scale. A block whose amax is 0 (all zeros, or too small for a
// nonzero fp32 scale) has scale 0 and all codes 0. NaN is encoded as 0, +-inf saturate to +-16.
// Decode validates every scale: finite, not negative (sign bit clear) and at most FLT_MAX / 16,
// so every decoded value is finite; and that an unused last nibble is 0.
class Fp4Codec final : public Codec {
 public:
  static constexpr std::size_t kBlockValues = 32;

  static constexpr std::size_t blocks(std::size_t count) {
    return (count + kBlockValues - 1) / kBlockValues;
  }

  CodecId id() const override { return CodecId::kFp4; }
  std::string_view name() const override { return "fp4"; }
  bool lossless() const override { return false; }
  std::size_t encoded_bytes(std::size_t count) const override {
    return blocks(count) * sizeof(float) + (count + 1) / 2;
  }
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  // Throws ProtocolError naming the block if a scale is invalid (see above), before writing.
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;
};

// The E3M0 code (sign << 3 | exponent field) of a scaled value v, rounded as described above.
std::uint8_t fp4_code(float v);
// The value of a code, without scale: +-{0, 1/4, ..., 16}.
float fp4_value(std::uint8_t code);

}  // namespace meridian
