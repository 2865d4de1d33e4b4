// The bf16 codec: each fp32 value rounded to bfloat16 (round to nearest, ties to even; NaN stays
// NaN with its sign), 2 bytes per value little-endian. Not a stochastic-rounding codec.
#pragma once

#include <cstdint>

#include "engine/core/codec/codec.h"

namespace meridian {

class Bf16Codec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kBf16; }
  std::string_view name() const override { return "bf16"; }
  bool lossless() const override { return false; }
  std::size_t encoded_bytes(std::size_t count) const override {
    return count * sizeof(std::uint16_t);
  }
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  // Every 16-bit pattern is a valid bf16 value, so decode never throws ProtocolError.
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;
};

// The bf16 bit pattern of `x` (round to nearest even; a NaN maps to a quiet NaN of the same
// sign; values beyond the bf16 range round to +-inf as IEEE rounding does).
std::uint16_t fp32_to_bf16_bits(float x);
// The fp32 value of a bf16 bit pattern (exact).
float bf16_bits_to_fp32(std::uint16_t bits);

}  // namespace meridian
