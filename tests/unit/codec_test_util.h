// Helpers shared by the codec tests (tests/unit/codec_*_test.cc, tests/sanitize/): seeded data,
// encode and decode in one call, payload fields. Test support only, not engine code.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "engine/core/codec/codec.h"

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

// The n values `bytes` decode to (the output starts as -99, so a value not written shows).
inline std::vector<float> decode(const Codec& codec, std::span<const std::byte> bytes,
                                 std::size_t n) {
  std::vector<float> y(n, -99.0f);
  codec.decode(bytes, y);
  return y;
}

// The fp32 stored at byte `offset` of a payload, and a store there (to corrupt a header field).
inline float f32_at(std::span<const std::byte> bytes, std::size_t offset) {
  float v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

inline void put_f32(std::span<std::byte> bytes, std::size_t offset, float v) {
  std::memcpy(bytes.data() + offset, &v, sizeof v);
}

}  // namespace meridian::codec_test
