// fp32 codec: memcpy out, memcpy or add back.
#include "engine/codec/fp32_codec.h"

#include <cstring>

#include "engine/error.h"

namespace meridian {

void Fp32Codec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  if (!in.empty()) std::memcpy(out.data(), in.data(), out.size());
}

void Fp32Codec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  if (!out.empty()) std::memcpy(out.data(), in.data(), in.size());
}

void Fp32Codec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  const std::byte* src = in.data();
  float* dst = acc.data();
  const std::size_t n = acc.size();
  for (std::size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, src + i * sizeof(float), sizeof(float));  // unaligned-safe; vectorises
    dst[i] += v;
  }
}

}  // namespace meridian
