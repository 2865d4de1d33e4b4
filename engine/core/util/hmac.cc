// HMAC-SHA256 (RFC 2104) through OpenSSL's one-shot HMAC(). Tested against RFC 4231 in
// tests/gloo/sha256_test.cc.
#include "engine/core/util/hmac.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>

#include <climits>

#include "engine/core/error.h"

namespace meridian {

Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  if (key.size() > INT_MAX) throw Error("hmac: key longer than OpenSSL takes");
  Sha256Digest out;
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &n) == nullptr ||
      n != out.size())
    throw Error("hmac: OpenSSL's HMAC-SHA256 failed");
  return out;
}

bool digests_equal(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace meridian
