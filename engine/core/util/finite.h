// Counting NaN and Inf in a float buffer: the non-finite guard of the outer loop (a node checks
// its pseudo-gradient before sending it) and of the ring (a receiver checks what it decoded).
// Bit tests, so the answer does not depend on floating-point flags such as -ffinite-math-only.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace meridian {

// Number of elements of `v` that are NaN or +-Inf (exponent bits all ones). Counted in blocks of
// 64 with a 32-bit count each: after inlining the block's trip count is a constant, which GCC's
// -O2 vectoriser needs (a plain loop over the span stays scalar, one value per cycle; the ring
// runs this over every piece it receives, results/bench/gloo.md).
inline std::uint64_t count_non_finite(std::span<const float> v) {
  constexpr std::size_t kBlock = 64;
  constexpr std::uint32_t kExponent = 0x7f800000u;
  const float* p = v.data();
  const std::size_t n = v.size();
  std::uint64_t count = 0;
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    std::uint32_t block = 0;
    for (std::size_t j = 0; j < kBlock; ++j)
      block += (std::bit_cast<std::uint32_t>(p[i + j]) & kExponent) == kExponent;
    count += block;
  }
  for (; i < n; ++i) count += (std::bit_cast<std::uint32_t>(p[i]) & kExponent) == kExponent;
  return count;
}

}  // namespace meridian
