// fp32 codec: memcpy out, memcpy or add back.
#include "engine/core/codec/fp32_codec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/core/codec/codec_kernels.h"
#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/util/finite.h"

namespace meridian {
namespace {

MERIDIAN_ALWAYS_INLINE inline void add_kernel(const std::byte* __restrict in, float* __restrict acc,
                                              std::size_t len) {
  for (std::size_t j = 0; j < len; ++j) acc[j] += codec_detail::load_f32(in + j * sizeof(float));
}

// Copies `n` values to `dst` for a backup: written once and read only if the round fails, so on
// x86-64 it bypasses the caches (non-temporal stores where `dst` is 32-byte aligned) instead of
// evicting the working set and paying a read-for-ownership per cold line. fence_backup() makes
// the copies visible before anything reads them.
void backup_copy(float* __restrict dst, const float* __restrict src, std::size_t n) {
#if defined(__x86_64__) && defined(__AVX__)
  std::size_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 31) != 0; ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

void fence_backup() {
#if defined(__x86_64__) && defined(__AVX__)
  _mm_sfence();
#endif
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

// Calls body(first value, values) over consecutive blocks of `count` values.
template <typename Body>
void for_each_fused_block(std::size_t count, Body&& body) {
  for (std::size_t i = 0; i < count; i += kFusedBlock) body(i, std::min(kFusedBlock, count - i));
}

// The walk of decode_crc and decode_add_crc: per block of `values`, checksum the encoding, back
// the values up (if `backup` is given), then apply(encoding block, values block).
template <typename Apply>
std::uint32_t checked_decode(std::span<const std::byte> in, std::span<float> values,
                             std::span<float> backup, std::uint32_t crc, Apply&& apply) {
  MERIDIAN_CHECK_EQ(in.size(), values.size() * sizeof(float));
  MERIDIAN_CHECK(backup.empty() || backup.size() == values.size());
  for_each_fused_block(values.size(), [&](std::size_t i, std::size_t len) {
    const auto block = in.subspan(i * sizeof(float), len * sizeof(float));
    crc = crc32c(block, crc);
    if (!backup.empty()) backup_copy(backup.data() + i, values.data() + i, len);
    apply(block, values.subspan(i, len));
  });
  if (!backup.empty()) fence_backup();
  return crc;
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
  return checked_decode(in, out, backup, crc,
                        [](std::span<const std::byte> block, std::span<float> values) {
                          std::memcpy(values.data(), block.data(), block.size());
                        });
}

std::uint32_t Fp32Codec::decode_add_crc(std::span<const std::byte> in, std::span<float> acc,
                                        std::span<float> backup, std::uint32_t crc) const {
  return checked_decode(
      in, acc, backup, crc,
      [](std::span<const std::byte> block, std::span<float> values) { add(block, values); });
}

std::uint32_t Fp32Codec::decode_add_crc_forward(std::span<const std::byte> in, std::span<float> acc,
                                                std::span<float> backup, std::uint32_t crc,
                                                std::uint32_t& out_crc,
                                                std::uint64_t& non_finite) const {
  // Each block's sums are checksummed and checked while they are still in L1: the walks the
  // ring would otherwise make over the whole piece, once to check it and once to send it.
  std::uint32_t out = out_crc;
  std::uint64_t bad = 0;
  crc = checked_decode(in, acc, backup, crc,
                       [&](std::span<const std::byte> block, std::span<float> values) {
                         add(block, values);
                         out = crc32c(std::as_bytes(values), out);
                         bad += count_non_finite(values);
                       });
  out_crc = out;
  non_finite = bad;
  return crc;
}

}  // namespace meridian
