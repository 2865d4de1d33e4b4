// The lossless fp32 codec: the encoding is the values' bytes (little-endian hosts only), plus
// the ring's fused copy/add-and-checksum kernels.
#pragma once

#include "engine/core/codec/codec.h"

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

  // Fused: one walk over the data in L1-sized blocks, extending the CRC over each block while
  // it is in cache; the backup is written with streaming stores where available, and fenced
  // before return (it is meant to be read only on failure).
  std::uint32_t encode_crc(std::span<const float> in, std::span<std::byte> out,
                           std::uint32_t crc) const override;
  std::uint32_t decode_crc(std::span<const std::byte> in, std::span<float> out,
                           std::span<float> backup, std::uint32_t crc) const override;
  std::uint32_t decode_add_crc(std::span<const std::byte> in, std::span<float> acc,
                               std::span<float> backup, std::uint32_t crc) const override;
  std::uint32_t decode_add_crc_forward(std::span<const std::byte> in, std::span<float> acc,
                                       std::span<float> backup, std::uint32_t crc,
                                       std::uint32_t& out_crc,
                                       std::uint64_t& non_finite) const override;
  bool encodes_in_place() const override { return true; }
};

}  // namespace meridian
