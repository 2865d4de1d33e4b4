// Store: the rendezvous and membership key-value store shared by all nodes of a run.
// In-memory (tests), an actor on a coordinator host (simulation), a TCP server (real runs).
// Keys and values are byte strings; every blocking call has a timeout.
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
};

}  // namespace meridian
