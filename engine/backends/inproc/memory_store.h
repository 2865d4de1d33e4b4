// MemoryStore: the Store of one process, a map guarded by a Runtime mutex and condition
// variable, so waits work under threads and under SimGrid actors alike. Not persistent and not
// reachable from another process: real runs use a TCP store with the same interface.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/runtime.h"
#include "engine/core/store.h"
#include "engine/core/store/lease_table.h"

namespace meridian {

// Thread-safety: every method may be called concurrently from activities of `runtime`.
// Waits block on the Runtime condition variable and end at the first change that satisfies
// them or at their timeout (TimeoutError naming the key). Leases end on the Runtime's clock:
// checked at every call, and a waiting caller wakes at the next lease's deadline to end it.
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(Runtime& runtime);

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
  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double timeout_s) override;

  // Number of successful writes so far (set, add, successful compare_set, erase of a present
  // key): a cheap change counter for tests and diagnostics.
  std::uint64_t version();

 private:
  // Waits (mutex held) until `ready()` or the deadline; false on timeout.
  template <typename Pred>
  bool wait_until_locked(Pred ready, double timeout_s);
  // Every write goes through these (mutex held): the change log, the lease table, the waiters.
  void put_locked(const std::string& key, std::string value);
  bool erase_locked(const std::string& key);
  // Ends the leases whose deadline has passed, erasing their keys.
  void expire_locked();
  std::optional<std::string> compare_set_locked(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired);

  Runtime& runtime_;
  std::unique_ptr<Mutex> mu_;
  std::unique_ptr<CondVar> changed_;
  std::map<std::string, std::string> data_;  // guarded by mu_
  std::uint64_t version_ = 0;                // guarded by mu_
  LeaseTable leases_;                        // guarded by mu_
  ChangeLog changes_;                        // guarded by mu_
};

}  // namespace meridian
