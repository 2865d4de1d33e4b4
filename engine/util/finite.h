// Counting NaN and Inf in a float buffer: the non-finite guard of the outer loop (a node checks
// its pseudo-gradient before sending it) and of the ring (a receiver checks what it decoded).
// Bit tests, so the answer does not depend on floating-point flags such as -ffinite-math-only.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace meridian {

// Number of elements of `v` that are NaN or +-Inf (exponent bits all ones).
inline std::uint64_t count_non_finite(std::span<const float> v) {
  std::uint64_t n = 0;
  for (const float x : v) n += (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
  return n;
}

}  // namespace meridian
