// LeaseTable and ChangeLog (see lease_table.h).
#include "engine/core/store/lease_table.h"

#include <algorithm>
#include <limits>

namespace meridian {

std::int64_t LeaseTable::grant(double ttl_s, double now_s) {
  const std::int64_t id = next_id_++;
  leases_[id] = Lease{ttl_s, now_s + ttl_s, {}};
  return id;
}

bool LeaseTable::keepalive(std::int64_t lease, double now_s) {
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return false;
  it->second.deadline_s = now_s + it->second.ttl_s;
  return true;
}

bool LeaseTable::set_deadline(std::int64_t lease, double deadline_s) {
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return false;
  it->second.deadline_s = deadline_s;
  return true;
}

double LeaseTable::ttl_s(std::int64_t lease) const {
  const auto it = leases_.find(lease);
  return it == leases_.end() ? 0.0 : it->second.ttl_s;
}

double LeaseTable::deadline_s(std::int64_t lease) const {
  const auto it = leases_.find(lease);
  return it == leases_.end() ? std::numeric_limits<double>::infinity() : it->second.deadline_s;
}

void LeaseTable::attach(std::int64_t lease, const std::string& key) {
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return;
  detach(key);
  it->second.keys.insert(key);
  owner_[key] = lease;
}

void LeaseTable::detach(const std::string& key) {
  const auto it = owner_.find(key);
  if (it == owner_.end()) return;
  if (const auto l = leases_.find(it->second); l != leases_.end()) l->second.keys.erase(key);
  owner_.erase(it);
}

std::vector<std::string> LeaseTable::revoke(std::int64_t lease) {
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return {};
  std::vector<std::string> keys(it->second.keys.begin(), it->second.keys.end());
  for (const auto& k : keys) owner_.erase(k);
  leases_.erase(it);
  return keys;
}

std::vector<std::string> LeaseTable::expire(double now_s) {
  std::vector<std::int64_t> ended;
  for (const auto& [id, l] : leases_)
    if (l.deadline_s <= now_s) ended.push_back(id);
  std::vector<std::string> keys;
  for (std::int64_t id : ended)
    for (std::string& k : revoke(id)) keys.push_back(std::move(k));
  return keys;
}

double LeaseTable::next_deadline_s() const {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& [id, l] : leases_) t = std::min(t, l.deadline_s);
  return t;
}

std::uint64_t ChangeLog::record(const std::string& key) {
  log_.emplace_back(++revision_, key);
  if (log_.size() > kKept) log_.pop_front();
  return revision_;
}

bool ChangeLog::changed_since(const std::vector<std::string>& prefixes,
                              std::uint64_t after) const {
  if (after >= revision_ || prefixes.empty()) return false;
  if (log_.empty() || log_.front().first > after + 1) return true;  // older than the log reaches
  for (auto it = log_.rbegin(); it != log_.rend() && it->first > after; ++it)
    for (const auto& p : prefixes)
      if (it->second.compare(0, p.size(), p) == 0) return true;
  return false;
}

}  // namespace meridian
