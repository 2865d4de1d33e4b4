// Helpers the real transports (engine/transport/gloo, engine/transport/nccl) share: the Store
// key prefix of an epoch's rendezvous and a readable form of a tag for error messages. Not a
// transport; no backend is named here.
#pragma once

#include <string>

#include "engine/transport.h"

namespace meridian {

// "<base>/e<epoch>/<16 hex of SHA-256 of the member ids>/": a retried epoch number with another
// membership never meets the keys of the first attempt.
std::string epoch_store_prefix(const std::string& base, const EpochSpec& spec);

// "tag <kind>:<value>", as in error messages.
std::string tag_text(Tag tag);

}  // namespace meridian
