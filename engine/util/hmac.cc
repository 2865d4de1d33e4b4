// HMAC-SHA256 (RFC 2104): H((K' ^ opad) || H((K' ^ ipad) || m)), K' = key hashed when longer
// than one 64-byte block, zero-padded otherwise. Tested against RFC 4231 in tests/gloo.
#include "engine/util/hmac.h"

#include <algorithm>
#include <array>

namespace meridian {

Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  constexpr std::size_t kBlock = 64;
  std::array<std::uint8_t, kBlock> block_key{};
  if (key.size() > kBlock) {
    const Sha256Digest hashed = sha256(key);
    std::copy(hashed.begin(), hashed.end(), block_key.begin());
  } else {
    std::copy(key.begin(), key.end(), block_key.begin());
  }
  std::array<std::uint8_t, kBlock> inner_pad, outer_pad;
  for (std::size_t i = 0; i < kBlock; ++i) {
    inner_pad[i] = block_key[i] ^ 0x36;
    outer_pad[i] = block_key[i] ^ 0x5c;
  }
  Sha256 inner;
  inner.update(inner_pad);
  inner.update(message);
  const Sha256Digest inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad);
  outer.update(inner_digest);
  return outer.finish();
}

bool digests_equal(const Sha256Digest& a, const Sha256Digest& b) {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace meridian
