// Epoch rendezvous prefixes and tag descriptions for the real transports.
#include "engine/util/epoch_keys.h"

#include "engine/util/sha256.h"

namespace meridian {

std::string epoch_store_prefix(const std::string& base, const EpochSpec& spec) {
  Sha256 members_hash;
  for (const auto id : spec.members) members_hash.update(std::to_string(id) + ",");
  return base + "/e" + std::to_string(spec.epoch) + "/" +
         to_hex(members_hash.finish()).substr(0, 16) + "/";
}

std::string tag_text(Tag tag) {
  return "tag " + std::to_string(tag >> 56) + ":" + std::to_string(tag & ((Tag{1} << 56) - 1));
}

}  // namespace meridian
