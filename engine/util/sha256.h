// SHA-256 (FIPS 180-4), written against the standard library only, for the store's
// challenge-response and run-configuration hashes. Not a general crypto library: no
// constant-time guarantees beyond what HMAC verification needs (see hmac.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace meridian {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Incremental hashing: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::uint8_t> data);
  void update(std::string_view text);
  Sha256Digest finish();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

Sha256Digest sha256(std::string_view data);
// Lower-case hex of any byte sequence (64 characters for a digest).
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace meridian
