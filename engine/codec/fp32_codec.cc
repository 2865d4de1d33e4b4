// fp32 codec: memcpy out, memcpy or add back.
#include "engine/codec/fp32_codec.h"

#include <cstring>

#include "engine/codec/codec_kernels.h"
#include "engine/error.h"

namespace meridian {
namespace {

MERIDIAN_ALWAYS_INLINE inline void add_kernel(const std::byte* __restrict in, float* __restrict acc,
                                              std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += codec_detail::load_f32(in + j * sizeof(float));
}

}  // namespace

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
  // Blocked so that it vectorises at -O2 (see codec_kernels.h); a plain loop stays scalar.
  codec_detail::for_each_block(acc.size(),
                               [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
                                 add_kernel(in.data() + b * sizeof(float), acc.data() + b, len);
                               });
}

}  // namespace meridian
