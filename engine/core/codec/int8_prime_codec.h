// The int8 codec of PRIME / INTELLECT-1: per chunk, sigma = RMS without centring, 256 bins over
// +-3 sigma, and the table of bin means shipped with the chunk. Not PRIME's wire layout (PRIME
// sends the table as a separate message); here table and indices share one payload.
#pragma once

#include <cstdint>

#include "engine/core/codec/codec.h"

namespace meridian {

// Payload of `count` values: 256 little-endian fp32 bin means (the LUT), then `count` uint8 bin
// indices. Encoding (n = count):
//   sigma = sqrt(sum x^2 / (n - 1))  (n >= 2; sqrt(x^2) for n == 1; 0 for n == 0)
//   scale = 6 sigma / 256, q = clamp(round_even(x / scale) + 128, 0, 255)
//   lut[b] = mean of the x with q == b (0 for an empty bin); decode: x^ = lut[q].
// The encoder sums each value's offset within its bin in fixed point: a shipped mean is within
// 2^-29 bin widths (~1.7e-11 sigma) of the exact mean, plus its rounding to fp32.
// Non-finite inputs (the codec cannot carry them; the message must stay valid): they add 0 to
// sigma's sum, NaN is binned as 0 (bin 128), +-inf saturate to bins 255 / 0, and none of them
// adds to a bin's mean (they count as 0). All-zero (sigma == 0) chunks encode every value in
// bin 128 with mean 0, so they decode exactly. The LUT is always finite.
class Int8PrimeCodec final : public Codec {
 public:
  static constexpr std::size_t kBins = 256;
  static constexpr std::size_t kLutBytes = kBins * sizeof(float);

  CodecId id() const override { return CodecId::kInt8Prime; }
  std::string_view name() const override { return "int8"; }
  bool lossless() const override { return false; }
  std::size_t encoded_bytes(std::size_t count) const override { return kLutBytes + count; }
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  // Throws ProtocolError if any LUT entry is not finite; otherwise every output is finite.
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;
};

}  // namespace meridian
