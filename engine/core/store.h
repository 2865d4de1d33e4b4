// Store: the rendezvous and membership key-value store shared by all nodes of a run.
// In-memory (tests), an actor on a coordinator host (simulation), a TCP server (real runs).
// Keys and values are byte strings; every blocking call has a timeout. Liveness is a lease kept
// alive by its holder, and waiting for change is a watch (etcd's model; issue 19).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meridian {

// Thread-safety: every implementation is safe to call from several activities of one node.
// Errors: TimeoutError when a wait runs out; PeerLostError when the store is unreachable.
class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to timeout_s for it to exist.
  virtual std::string get(const std::string& key, double timeout_s) = 0;
  // The value if present now; never waits.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, double timeout_s) = 0;
  // Adds `delta` to the integer stored at `key` (absent = 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // If the current value equals `expected` (nullopt = key absent), stores `desired`.
  // Returns the value after the call: `desired` on success, the current value otherwise
  // (nullopt if absent).
  virtual std::optional<std::string> compare_set(const std::string& key,
                                                 const std::optional<std::string>& expected,
                                                 const std::string& desired) = 0;
  // Removes `key`; returns whether it existed.
  virtual bool erase(const std::string& key) = 0;
  // Keys that start with `prefix`, sorted.
  virtual std::vector<std::string> list(const std::string& prefix) = 0;
  // Every (key, value) whose key starts with `prefix`, sorted by key: the membership's one read
  // of all heartbeat counters per beat. Backends answer it in one round trip; this default
  // (list, then a read per key) is for wrappers that do not forward it, and may miss a key
  // erased in between.
  virtual std::vector<std::pair<std::string, std::string>> read_prefix(const std::string& prefix) {
    std::vector<std::pair<std::string, std::string>> out;
    for (std::string& key : list(prefix))
      if (auto value = try_get(key)) out.emplace_back(std::move(key), std::move(*value));
    return out;
  }

  // --- Leases: liveness kept by the store. A lease lives while its holder keeps it alive: the
  // store ends it once ttl_s of the store's own clock pass without a keepalive (or at
  // lease_revoke) and then erases every key attached to it, a change like any erase. A store may
  // end it sooner when it can tell that its holder is gone (the TCP store: when the connection
  // the lease was granted on closes, engine/backends/store_tcp/tcp_store.h).
  // Returns the lease's id (> 0); it starts alive, as if just kept alive.
  virtual std::int64_t lease_grant(double ttl_s) = 0;
  // Keeps the lease alive: one write. Returns the seconds until the holder's next keepalive is
  // due: `interval_s` from a store that must receive every keepalive; infinity from one that
  // accounts for them itself for as long as the calling activity runs (the simulated store: over
  // a stable connection a keepalive changes nothing but the time a silence is detected, which it
  // computes when the activity ends); negative when the lease has ended (its keys are gone).
  virtual double keepalive(std::int64_t lease, double interval_s) = 0;
  // Ends the lease at once and erases its keys. Returns whether it was alive until this call
  // (false: it had ended already, so this call changed nothing a watch could see).
  virtual bool lease_revoke(std::int64_t lease) = 0;
  // compare_set that also attaches `key` to `lease` when it stores `desired`, so the key ends
  // with the lease. Stores nothing when the lease has ended (returns the current value).
  virtual std::optional<std::string> compare_set_leased(const std::string& key,
                                                        const std::optional<std::string>& expected,
                                                        const std::string& desired,
                                                        std::int64_t lease) = 0;

  // --- Watches. The store's revision counts its changes: set, add, a compare-and-set that
  // stores, an erase of a present key, each key erased by a lease's end (a keepalive is none).
  // Waits until a key that starts with one of `prefixes` has changed after revision
  // `after_revision`, or timeout_s passes, and returns the revision then; never throws
  // TimeoutError. It may return without such a change: re-check, then watch from the returned
  // revision (which covers every change the re-check could miss).
  virtual std::uint64_t watch(const std::vector<std::string>& prefixes,
                              std::uint64_t after_revision, double timeout_s) = 0;
  // The current revision, without waiting.
  std::uint64_t revision() { return watch({}, 0, 0.0); }
};

// Passes every call to another Store (which must outlive it). Decorators derive from it and
// override only what they change.
class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(Store& inner) : inner_(inner) {}

  void set(const std::string& key, const std::string& value) override { inner_.set(key, value); }
  std::string get(const std::string& key, double timeout_s) override {
    return inner_.get(key, timeout_s);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    return inner_.try_get(key);
  }
  void wait(const std::vector<std::string>& keys, double timeout_s) override {
    inner_.wait(keys, timeout_s);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return inner_.add(key, delta);
  }
  std::optional<std::string> compare_set(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override {
    return inner_.compare_set(key, expected, desired);
  }
  bool erase(const std::string& key) override { return inner_.erase(key); }
  std::vector<std::string> list(const std::string& prefix) override { return inner_.list(prefix); }
  std::vector<std::pair<std::string, std::string>> read_prefix(const std::string& prefix) override {
    return inner_.read_prefix(prefix);
  }
  std::int64_t lease_grant(double ttl_s) override { return inner_.lease_grant(ttl_s); }
  double keepalive(std::int64_t lease, double interval_s) override {
    return inner_.keepalive(lease, interval_s);
  }
  bool lease_revoke(std::int64_t lease) override { return inner_.lease_revoke(lease); }
  std::optional<std::string> compare_set_leased(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired,
                                                std::int64_t lease) override {
    return inner_.compare_set_leased(key, expected, desired, lease);
  }
  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double timeout_s) override {
    return inner_.watch(prefixes, after_revision, timeout_s);
  }

 protected:
  Store& inner() const { return inner_; }

 private:
  Store& inner_;
};

}  // namespace meridian
