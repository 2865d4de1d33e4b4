// Helpers shared by the codec tests (tests/unit/codec_*_test.cc, tests/sanitize/): seeded data
// and encode in one call. Test support only, not engine code.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/codec/codec.h"

namespace meridian::codec_test {

// n values from N(0, 1), reproducible for a given seed (libstdc++).
inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

inline std::vector<std::byte> encode(const Codec& codec, std::span<const float> x) {
  std::vector<std::byte> out(codec.encoded_bytes(x.size()));
  codec.encode(x, out);
  return out;
}

}  // namespace meridian::codec_test
