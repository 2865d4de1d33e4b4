// StoreAdapter (gloo_store_adapter.h).
#include "engine/backends/gloo/gloo_store_adapter.h"

#include <algorithm>
#include <chrono>

#include "engine/core/error.h"
#include "engine/core/util/epoch_keys.h"

namespace meridian::gloo_transport {

void StoreAdapter::barrier(int rank, int size) {
  store_.set(prefix_ + "arrived/" + std::to_string(rank), "1");
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r)
    if (r != rank) all.push_back("arrived/" + std::to_string(r));
  wait(all);
}

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

void StoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  wait(keys);
}

void StoreAdapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& k : keys) prefixed.push_back(prefix_ + k);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  while (true) {
    const double left_s = std::chrono::duration<double>(deadline - Clock::now()).count();
    try {
      store_.wait(prefixed, std::max(0.001, abandon_ ? std::min(poll_s_, left_s) : left_s));
      return;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
    // Without an abandon rule the wait was for all that was left; a store whose wait ends a
    // little before the deadline (clock granularity) is simply asked again.
    if (!abandon_) continue;
    if (const std::string why = abandon_(); !why.empty())
      throw PeerLostError(
          -1, "gloo transport: stopped waiting for the members of " + prefix_ + ": " + why);
  }
}

}  // namespace meridian::gloo_transport
