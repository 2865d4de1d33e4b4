// fp32 codec: memcpy out, memcpy or add back.
#include "engine/codec/fp32_codec.h"

#include <algorithm>
#include <cstring>

#include "engine/codec/codec_kernels.h"
#include "engine/error.h"
#include "engine/util/crc32c.h"

namespace meridian {
namespace {

MERIDIAN_ALWAYS_INLINE inline void add_kernel(const std::byte* __restrict in, float* __restrict acc,
                                              std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += codec_detail::load_f32(in + j * sizeof(float));
}

// Values per block of the fused kernels: 12 KiB of encoding (what crc32c's three-stream loop
// takes at once), so the encoding, the values and a backup all stay in L1 between the passes.
constexpr std::size_t kFusedBlock = 3 * 1024;

void add(std::span<const std::byte> in, std::span<float> acc) {
  codec_detail::for_each_block(acc.size(),
                               [&](std::size_t b, std::size_t len) MERIDIAN_ALWAYS_INLINE {
                                 add_kernel(in.data() + b * sizeof(float), acc.data() + b, len);
                               });
}

// Calls body(values, encoding) over matching blocks of `count` values.
template <typename Body>
void for_each_fused_block(std::size_t count, Body&& body) {
  for (std::size_t i = 0; i < count; i += kFusedBlock) body(i, std::min(kFusedBlock, count - i));
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
  add(in, acc);
}

std::uint32_t Fp32Codec::encode_crc(std::span<const float> in, std::span<std::byte> out,
                                    std::uint32_t crc) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  for_each_fused_block(in.size(), [&](std::size_t i, std::size_t len) {
    const auto block = out.subspan(i * sizeof(float), len * sizeof(float));
    std::memcpy(block.data(), in.data() + i, block.size());
    crc = crc32c(block, crc);
  });
  return crc;
}

std::uint32_t Fp32Codec::decode_crc(std::span<const std::byte> in, std::span<float> out,
                                    std::span<float> backup, std::uint32_t crc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  MERIDIAN_CHECK(backup.empty() || backup.size() == out.size());
  for_each_fused_block(out.size(), [&](std::size_t i, std::size_t len) {
    const auto block = in.subspan(i * sizeof(float), len * sizeof(float));
    crc = crc32c(block, crc);
    if (!backup.empty()) std::memcpy(backup.data() + i, out.data() + i, block.size());
    std::memcpy(out.data() + i, block.data(), block.size());
  });
  return crc;
}

std::uint32_t Fp32Codec::decode_add_crc(std::span<const std::byte> in, std::span<float> acc,
                                        std::span<float> backup, std::uint32_t crc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  MERIDIAN_CHECK(backup.empty() || backup.size() == acc.size());
  for_each_fused_block(acc.size(), [&](std::size_t i, std::size_t len) {
    const auto block = in.subspan(i * sizeof(float), len * sizeof(float));
    crc = crc32c(block, crc);
    if (!backup.empty()) std::memcpy(backup.data() + i, acc.data() + i, block.size());
    add(block, acc.subspan(i, len));
  });
  return crc;
}

}  // namespace meridian
