// Epoch rendezvous prefixes and tag descriptions for the real transports.
#include "engine/core/util/epoch_keys.h"

#include "engine/core/util/sha256.h"

namespace meridian {

std::string epoch_store_prefix(const std::string& base, const EpochSpec& spec) {
  Sha256 members_hash;
  for (const auto id : spec.members) members_hash.update(std::to_string(id) + ",");
  return base + "/e" + std::to_string(spec.epoch) + "/" +
         to_hex(members_hash.finish()).substr(0, 16) + "/";
}

std::optional<EpochStoreKey> parse_epoch_store_key(const std::string& key) {
  // "<base>/e<digits>/<16 hex>/...": the last "/e<digits>/" followed by 16 hex digits and '/'.
  constexpr std::size_t kHashChars = 16;
  for (std::size_t at = key.rfind("/e"); at != std::string::npos && at > 0;
       at = key.rfind("/e", at - 1)) {
    std::size_t p = at + 2;
    std::uint64_t epoch = 0;
    bool digits = false, overflow = false;
    for (; p < key.size() && key[p] >= '0' && key[p] <= '9'; ++p, digits = true) {
      const std::uint64_t d = static_cast<std::uint64_t>(key[p] - '0');
      if (epoch > (UINT64_MAX - d) / 10) overflow = true;
      epoch = epoch * 10 + d;
    }
    const std::size_t slash = p + 1 + kHashChars;  // the '/' after the hash
    if (!digits || overflow || slash >= key.size() || key[p] != '/' || key[slash] != '/') continue;
    bool hex = true;
    for (std::size_t i = p + 1; hex && i < p + 1 + kHashChars; ++i)
      hex = (key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f');
    if (hex) return EpochStoreKey{key.substr(0, at), epoch};
  }
  return std::nullopt;
}

std::string tag_text(Tag tag) {
  return "tag " + std::to_string(tag >> 56) + ":" + std::to_string(tag & ((Tag{1} << 56) - 1));
}

}  // namespace meridian
