// MemoryStore implementation.
#include "engine/backends/inproc/memory_store.h"

#include <algorithm>
#include <charconv>
#include <system_error>

#include "engine/core/error.h"

namespace meridian {

MemoryStore::MemoryStore(Runtime& runtime)
    : runtime_(runtime), mu_(runtime.make_mutex()), changed_(runtime.make_condvar()) {}

template <typename Pred>
bool MemoryStore::wait_until_locked(Pred ready, double timeout_s) {
  const double deadline_s = runtime_.now_s() + timeout_s;
  for (;;) {
    expire_locked();
    if (ready()) return true;
    const double now_s = runtime_.now_s();
    const double left_s = deadline_s - now_s;
    if (left_s <= 0) return false;
    // Wake at the next lease's end too: nobody else may call to end it.
    changed_->wait_for(*mu_, std::min(left_s, std::max(0.0, leases_.next_deadline_s() - now_s)));
  }
}

void MemoryStore::put_locked(const std::string& key, std::string value) {
  data_[key] = std::move(value);
  leases_.detach(key);
  changes_.record(key);
  ++version_;
  changed_->notify_all();
}

bool MemoryStore::erase_locked(const std::string& key) {
  leases_.detach(key);
  if (data_.erase(key) == 0) return false;
  changes_.record(key);
  ++version_;
  changed_->notify_all();
  return true;
}

void MemoryStore::expire_locked() {
  if (leases_.next_deadline_s() > runtime_.now_s()) return;
  for (const std::string& key : leases_.expire(runtime_.now_s())) erase_locked(key);
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  LockGuard lock(*mu_);
  expire_locked();
  put_locked(key, value);
}

std::string MemoryStore::get(const std::string& key, double timeout_s) {
  LockGuard lock(*mu_);
  if (!wait_until_locked([&] { return data_.count(key) != 0; }, timeout_s))
    throw TimeoutError("store: key '" + key + "' did not appear within " +
                       std::to_string(timeout_s) + " s");
  return data_.at(key);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key) {
  LockGuard lock(*mu_);
  expire_locked();
  const auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  LockGuard lock(*mu_);
  std::string missing;
  const auto all_present = [&] {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) {
        missing = k;
        return false;
      }
    }
    return true;
  };
  if (!wait_until_locked(all_present, timeout_s))
    throw TimeoutError("store: key '" + missing + "' did not appear within " +
                       std::to_string(timeout_s) + " s");
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  LockGuard lock(*mu_);
  expire_locked();
  std::int64_t value = 0;
  if (const auto it = data_.find(key); it != data_.end()) {
    const std::string& s = it->second;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      throw ProtocolError("store: add on key '" + key + "' whose value '" + s +
                          "' is not an integer");
  }
  value += delta;
  put_locked(key, std::to_string(value));
  return value;
}

std::optional<std::string> MemoryStore::compare_set_locked(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired) {
  const auto it = data_.find(key);
  const std::optional<std::string> current =
      it == data_.end() ? std::nullopt : std::optional<std::string>(it->second);
  if (current != expected) return current;
  put_locked(key, desired);
  return desired;
}

std::optional<std::string> MemoryStore::compare_set(const std::string& key,
                                                    const std::optional<std::string>& expected,
                                                    const std::string& desired) {
  LockGuard lock(*mu_);
  expire_locked();
  return compare_set_locked(key, expected, desired);
}

bool MemoryStore::erase(const std::string& key) {
  LockGuard lock(*mu_);
  expire_locked();
  return erase_locked(key);
}

std::int64_t MemoryStore::lease_grant(double ttl_s) {
  LockGuard lock(*mu_);
  expire_locked();
  return leases_.grant(ttl_s, runtime_.now_s());
}

double MemoryStore::keepalive(std::int64_t lease, double interval_s) {
  LockGuard lock(*mu_);
  expire_locked();
  return leases_.keepalive(lease, runtime_.now_s()) ? interval_s : -1.0;
}

bool MemoryStore::lease_revoke(std::int64_t lease) {
  LockGuard lock(*mu_);
  expire_locked();
  const bool alive = leases_.alive(lease);
  for (const std::string& key : leases_.revoke(lease)) erase_locked(key);
  return alive;
}

std::optional<std::string> MemoryStore::compare_set_leased(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired, std::int64_t lease) {
  LockGuard lock(*mu_);
  expire_locked();
  if (!leases_.alive(lease)) {
    const auto it = data_.find(key);
    return it == data_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  auto out = compare_set_locked(key, expected, desired);
  if (out == desired) leases_.attach(lease, key);
  return out;
}

std::uint64_t MemoryStore::watch(const std::vector<std::string>& prefixes,
                                 std::uint64_t after_revision, double timeout_s) {
  LockGuard lock(*mu_);
  wait_until_locked([&] { return changes_.changed_since(prefixes, after_revision); }, timeout_s);
  return changes_.revision();
}

std::vector<std::string> MemoryStore::list(const std::string& prefix) {
  LockGuard lock(*mu_);
  expire_locked();
  std::vector<std::string> out;
  for (auto it = data_.lower_bound(prefix); it != data_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.push_back(it->first);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> MemoryStore::read_prefix(
    const std::string& prefix) {
  LockGuard lock(*mu_);
  expire_locked();
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = data_.lower_bound(prefix); it != data_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.emplace_back(it->first, it->second);
  }
  return out;
}

std::uint64_t MemoryStore::version() {
  LockGuard lock(*mu_);
  return version_;
}

}  // namespace meridian
