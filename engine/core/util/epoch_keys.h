// Helpers the real transports (engine/backends/gloo, engine/backends/nccl) share: the Store
// key prefix of an epoch's rendezvous and a readable form of a tag for error messages. Not a
// transport; no backend is named here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/transport.h"

namespace meridian {

// "<base>/e<epoch>/<16 hex of SHA-256 of the member ids>/": a retried epoch number with another
// membership never meets the keys of the first attempt.
std::string epoch_store_prefix(const std::string& base, const EpochSpec& spec);

// The base and epoch id of a key or prefix that epoch_store_prefix made ("gloo/e7/<hex>/0" ->
// {"gloo", 7}); nullopt for anything else.
struct EpochStoreKey {
  std::string base;
  std::uint64_t epoch = 0;
};
std::optional<EpochStoreKey> parse_epoch_store_key(const std::string& key);

// "tag <kind>:<value>", as in error messages.
std::string tag_text(Tag tag);

}  // namespace meridian
