// LeaseTable and ChangeLog: the bookkeeping behind the Store's leases and watches, shared by
// every store that keeps its own table (MemoryStore, the TCP store server, the simulated store).
// Pure data, no clock and no locking: the owner passes the time, erases the keys of an ended
// lease from its table, records its changes and wakes its own waiters.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace meridian {

// Leases with a time to live and the keys attached to them (etcd's model, see Store).
class LeaseTable {
 public:
  // A new lease that ends at now_s + ttl_s unless kept alive; ids start at 1, never reused.
  std::int64_t grant(double ttl_s, double now_s);
  // Renews a live lease: it now ends at now_s + its ttl. False when it has ended.
  bool keepalive(std::int64_t lease, double now_s);
  // Sets when a live lease ends (infinity: not until told otherwise), for a store that accounts
  // for keepalives itself. False when it has ended.
  bool set_deadline(std::int64_t lease, double deadline_s);
  bool alive(std::int64_t lease) const { return leases_.count(lease) != 0; }
  double ttl_s(std::int64_t lease) const;       // 0 when ended
  double deadline_s(std::int64_t lease) const;  // infinity when ended
  // Attaches `key` to a live lease (taking it from any other); no-op when the lease has ended.
  void attach(std::int64_t lease, const std::string& key);
  // `key` was written or erased by a plain call: it belongs to no lease any more.
  void detach(const std::string& key);
  // Ends the lease now; returns its keys for the caller to erase (none when already ended).
  std::vector<std::string> revoke(std::int64_t lease);
  // Ends every lease whose deadline is at or before now_s; returns their keys.
  std::vector<std::string> expire(double now_s);
  // The earliest deadline of a live lease; infinity when none.
  double next_deadline_s() const;

 private:
  struct Lease {
    double ttl_s = 0;
    double deadline_s = 0;
    std::set<std::string> keys;
  };
  std::map<std::int64_t, Lease> leases_;
  std::map<std::string, std::int64_t> owner_;  // key -> lease
  std::int64_t next_id_ = 1;
};

// The store's revision and the latest changes, for watches: which keys changed after a
// revision. Bounded: a watcher further behind than the log reaches is told "changed" (it re-reads;
// never a missed change).
class ChangeLog {
 public:
  static constexpr std::size_t kKept = 4096;
  // Records a change of `key` and returns the new revision.
  std::uint64_t record(const std::string& key);
  std::uint64_t revision() const { return revision_; }
  // Whether a key that starts with one of `prefixes` changed after revision `after`.
  bool changed_since(const std::vector<std::string>& prefixes, std::uint64_t after) const;

 private:
  std::deque<std::pair<std::uint64_t, std::string>> log_;  // (revision, key), oldest first
  std::uint64_t revision_ = 0;
};

}  // namespace meridian
