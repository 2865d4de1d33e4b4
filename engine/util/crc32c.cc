// CRC-32C: SSE4.2 crc32 instruction, 8 bytes at a time, with a portable table fallback.
#include "engine/util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace meridian {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

std::uint32_t crc32c_table(const std::byte* p, std::size_t n, std::uint32_t c) {
  for (std::size_t i = 0; i < n; ++i)
    c = kTable[(c ^ static_cast<std::uint8_t>(p[i])) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(const std::byte* p, std::size_t n,
                                                           std::uint32_t c) {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c64);
  while (n--) c32 = _mm_crc32_u8(c32, static_cast<std::uint8_t>(*p++));
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  if (kHaveSse42) return ~crc32c_hw(data.data(), data.size(), c);
#endif
  return ~crc32c_table(data.data(), data.size(), c);
}

}  // namespace meridian
