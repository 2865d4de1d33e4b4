// SHA-256 and hex for the store's challenge-response, the run-configuration hashes, epoch keys
// and checkpoint manifests: OpenSSL's libcrypto (EVP) behind a small interface, so that callers
// see no OpenSSL type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace meridian {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Incremental hashing: update() any number of times, then finish() once. Throws Error when
// OpenSSL fails (out of memory) and on update() or finish() after finish().
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const std::uint8_t> data);
  void update(std::string_view text);
  void update(const void* data, std::size_t bytes);
  Sha256Digest finish();

 private:
  evp_md_ctx_st* ctx_;
  bool finished_ = false;
};

Sha256Digest sha256(std::string_view data);
// Lower-case hex of any byte sequence (64 characters for a digest).
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace meridian
