// CuttableStore: a node's view of a shared Store that can be cut off, as when the node dies or
// loses its network: after cut() every call throws PeerLostError, and the blocking calls (get,
// wait, watch) wait in short slices so that they notice the cut within one slice. Fault
// injection for emulation and tests; real nodes talk to the store directly.
#pragma once

#include <atomic>
#include <string>

#include "engine/core/store.h"

namespace meridian {

class CuttableStore : public ForwardingStore {
 public:
  // `inner` must outlive this object. `reason` ends the PeerLostError's message.
  explicit CuttableStore(Store& inner, std::string reason = "this node was cut off",
                         double slice_s = 0.05);

  void cut() { cut_ = true; }
  bool is_cut() const { return cut_; }

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, double timeout_s) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, double timeout_s) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::optional<std::string> compare_set(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override;
  bool erase(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  std::vector<std::pair<std::string, std::string>> read_prefix(const std::string& prefix) override;
  std::int64_t lease_grant(double ttl_s) override;
  double keepalive(std::int64_t lease, double interval_s) override;
  bool lease_revoke(std::int64_t lease) override;
  std::optional<std::string> compare_set_leased(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired,
                                                std::int64_t lease) override;
  // One slice at most: a return without a change is allowed by the Store contract.
  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double timeout_s) override;

 protected:
  // Throws PeerLostError once cut.
  void check() const;

 private:
  // Runs `call` with timeouts of at most one slice until it returns, the cut, or `timeout_s`.
  template <typename F>
  auto sliced(double timeout_s, F call) -> decltype(call(0.0));

  const std::string reason_;
  const double slice_s_;
  std::atomic<bool> cut_{false};
};

}  // namespace meridian
