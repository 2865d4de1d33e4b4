// The int8 min-max codec of PCCL (pcclQuantMinMax): per chunk an affine map from [min, max] onto
// 0..255. Not a zero-point/scale codec with a distribution hint, and not PCCL's wire layout.
#pragma once

#include <cstdint>

#include "engine/core/codec/codec.h"

namespace meridian {

// Payload of `count` values: fp32 min, fp32 scale (little-endian), then `count` uint8 codes.
// Encoding: min/max over the finite values, scale = (max - min) / 255,
//   q = clamp(round_even((x - min) / scale), 0, 255); decode: x^ = min + q * scale.
// So |x - x^| <= scale / 2 (plus fp32 rounding of x^) for every finite x.
// Non-finite inputs: NaN is encoded as 0 would be, +-inf saturate to codes 255 / 0; min and
// scale ignore them. A chunk with no finite value (or none at all) has min = scale = 0.
// Decode validates that min and scale are finite, scale >= 0 and min + 255 scale stays within
// fp32 range (the encoder shrinks scale by a few ulps when the data sit at the edge of it), so
// every decoded value is finite.
class Int8MinMaxCodec final : public Codec {
 public:
  static constexpr std::size_t kHeaderBytes = 2 * sizeof(float);

  CodecId id() const override { return CodecId::kInt8MinMax; }
  std::string_view name() const override { return "int8-minmax"; }
  bool lossless() const override { return false; }
  std::size_t encoded_bytes(std::size_t count) const override { return kHeaderBytes + count; }
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  // Throws ProtocolError if min/scale are invalid (see above).
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;
};

}  // namespace meridian
