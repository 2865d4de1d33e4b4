// CRC-32C: SSE4.2 crc32 instruction, three independent streams at a time (the instruction's
// latency is three times its throughput) joined by a table shift, with a portable table fallback.
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
// Bytes per stream in the three-stream loop.
constexpr std::size_t kStreamBytes = 4096;

__attribute__((target("sse4.2"))) std::uint64_t crc32c_hw_serial(const std::byte* p,
                                                                  std::size_t n,
                                                                  std::uint64_t c) {
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, static_cast<std::uint8_t>(*p++));
  return c32;
}

// The CRC register update is linear over GF(2): running it over bytes B from state s gives
// Z(s) ^ run(0, B), where Z is the update over |B| zero bytes. kShift[k][v] = Z(v << 8k) for
// |B| = kStreamBytes, so Z(s) is four lookups.
struct ShiftTable {
  std::uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) ShiftTable make_shift_table() {
  ShiftTable s{};
  for (int k = 0; k < 4; ++k) {
    for (std::uint32_t v = 0; v < 256; ++v) {
      std::uint64_t c = std::uint64_t{v} << (8 * k);
      for (std::size_t i = 0; i < kStreamBytes / 8; ++i) c = _mm_crc32_u64(c, 0);
      s.t[k][v] = static_cast<std::uint32_t>(c);
    }
  }
  return s;
}

std::uint32_t shift(const ShiftTable& s, std::uint32_t c) {
  return s.t[0][c & 0xFF] ^ s.t[1][(c >> 8) & 0xFF] ^ s.t[2][(c >> 16) & 0xFF] ^ s.t[3][c >> 24];
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(const std::byte* p, std::size_t n,
                                                           std::uint32_t c) {
  if (n >= 3 * kStreamBytes) {
    static const ShiftTable table = make_shift_table();
    while (n >= 3 * kStreamBytes) {
      std::uint64_t a = c, b = 0, d = 0;
      for (std::size_t i = 0; i < kStreamBytes; i += 8) {
        std::uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + kStreamBytes + i, 8);
        std::memcpy(&vd, p + 2 * kStreamBytes + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = shift(table, static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b);
      c = shift(table, c) ^ static_cast<std::uint32_t>(d);
      p += 3 * kStreamBytes;
      n -= 3 * kStreamBytes;
    }
  }
  return static_cast<std::uint32_t>(crc32c_hw_serial(p, n, c));
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
