// meridian::Store -> gloo::rendezvous::Store, with a prefix per epoch and bounded waits.
#include "engine/transport/gloo/gloo_store_adapter.h"

#include <algorithm>

#include "engine/util/epoch_keys.h"

namespace meridian::gloo_transport {

void StoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  if (!swept_) {
    swept_ = true;
    erase_superseded();
  }
  store_.set(prefix_ + key, std::string(data.begin(), data.end()));
}

void StoreAdapter::erase_superseded() {
  // Every member of the new epoch sweeps (the first to connect finds the keys; the others find
  // them gone, or erase them twice, which is harmless), so no crashed node leaves keys behind.
  const auto mine = parse_epoch_store_key(prefix_);
  if (!mine) return;  // not an epoch prefix: nothing is known to be superseded
  for (const std::string& k : store_.list(mine->base + "/e")) {
    const auto old = parse_epoch_store_key(k);
    if (old && old->base == mine->base && epoch_superseded(old->epoch, mine->epoch))
      store_.erase(k);
  }
}

std::vector<char> StoreAdapter::get(const std::string& key) {
  const std::string value = store_.get(prefix_ + key, timeout_s_);
  return std::vector<char>(value.begin(), value.end());
}

void StoreAdapter::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s_ * 1000.0)));
}

void StoreAdapter::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& k : keys) prefixed.push_back(prefix_ + k);
  // Gloo passes its context timeout; never wait longer than the epoch's bound.
  const double timeout_s = std::min(timeout_s_, timeout.count() / 1000.0);
  store_.wait(prefixed, timeout.count() > 0 ? timeout_s : timeout_s_);
}

}  // namespace meridian::gloo_transport
