// HMAC-SHA256 (RFC 2104) for the store's join handshake: a node proves it holds the run's
// shared secret without sending it. Not a key-derivation or encryption facility.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "engine/core/util/sha256.h"

namespace meridian {

Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// Equality whose running time does not depend on where the digests first differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace meridian
