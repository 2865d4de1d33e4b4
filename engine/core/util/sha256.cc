// SHA-256 through OpenSSL's EVP interface. Tested against the FIPS 180-2 examples and RFC 4231
// (through HMAC) in tests/gloo/sha256_test.cc.
#include "engine/core/util/sha256.h"

#include <openssl/evp.h>

#include "engine/core/error.h"

namespace meridian {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw Error("sha256: OpenSSL could not start a digest");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, std::size_t bytes) {
  if (finished_) throw Error("sha256: update after finish");
  if (bytes > 0 && EVP_DigestUpdate(ctx_, data, bytes) != 1)
    throw Error("sha256: OpenSSL's digest update failed");
}

void Sha256::update(std::span<const std::uint8_t> data) { update(data.data(), data.size()); }

void Sha256::update(std::string_view text) { update(text.data(), text.size()); }

Sha256Digest Sha256::finish() {
  if (finished_) throw Error("sha256: finish called twice");
  finished_ = true;
  Sha256Digest out;
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_, out.data(), &n) != 1 || n != out.size())
    throw Error("sha256: OpenSSL's digest final failed");
  return out;
}

Sha256Digest sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

}  // namespace meridian
