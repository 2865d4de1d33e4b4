// splitmix64 (Steele, Lea, Flood 2014): a fully specified 64-bit mixer and generator, so seeded
// draws and hashes are the same on every platform and standard library. Not cryptographic.
#pragma once

#include <cstdint>

namespace meridian {

// The finaliser: a bijective mix of all 64 bits.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The generator: advances `state` and returns the next draw.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  return splitmix64_mix(state += 0x9E3779B97F4A7C15ull);
}

}  // namespace meridian
