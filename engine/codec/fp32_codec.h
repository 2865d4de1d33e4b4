// The lossless fp32 codec: the encoding is the values' bytes (little-endian hosts only).
#pragma once

#include "engine/codec/codec.h"

namespace meridian {

class Fp32Codec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kFp32; }
  std::string_view name() const override { return "fp32"; }
  bool lossless() const override { return true; }
  std::size_t encoded_bytes(std::size_t count) const override { return count * sizeof(float); }
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;
};

}  // namespace meridian
