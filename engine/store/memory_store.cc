// MemoryStore implementation.
#include "engine/store/memory_store.h"

#include <charconv>
#include <mutex>
#include <system_error>

#include "engine/error.h"

namespace meridian {

MemoryStore::MemoryStore(Runtime& runtime)
    : runtime_(runtime), mu_(runtime.make_mutex()), changed_(runtime.make_condvar()) {}

template <typename Pred>
bool MemoryStore::wait_until_locked(Pred ready, double timeout_s) {
  const double deadline_s = runtime_.now_s() + timeout_s;
  while (!ready()) {
    const double left_s = deadline_s - runtime_.now_s();
    if (left_s <= 0) return false;
    changed_->wait_for(*mu_, left_s);
  }
  return true;
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<Mutex> lock(*mu_);
  data_[key] = value;
  ++version_;
  changed_->notify_all();
}

std::string MemoryStore::get(const std::string& key, double timeout_s) {
  std::lock_guard<Mutex> lock(*mu_);
  if (!wait_until_locked([&] { return data_.count(key) != 0; }, timeout_s))
    throw TimeoutError("store: key '" + key + "' did not appear within " +
                       std::to_string(timeout_s) + " s");
  return data_.at(key);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key) {
  std::lock_guard<Mutex> lock(*mu_);
  const auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  std::lock_guard<Mutex> lock(*mu_);
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
  std::lock_guard<Mutex> lock(*mu_);
  std::int64_t value = 0;
  if (const auto it = data_.find(key); it != data_.end()) {
    const std::string& s = it->second;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      throw ProtocolError("store: add on key '" + key + "' whose value '" + s +
                          "' is not an integer");
  }
  value += delta;
  data_[key] = std::to_string(value);
  ++version_;
  changed_->notify_all();
  return value;
}

std::optional<std::string> MemoryStore::compare_set(const std::string& key,
                                                    const std::optional<std::string>& expected,
                                                    const std::string& desired) {
  std::lock_guard<Mutex> lock(*mu_);
  const auto it = data_.find(key);
  const std::optional<std::string> current =
      it == data_.end() ? std::nullopt : std::optional<std::string>(it->second);
  if (current != expected) return current;
  data_[key] = desired;
  ++version_;
  changed_->notify_all();
  return desired;
}

bool MemoryStore::erase(const std::string& key) {
  std::lock_guard<Mutex> lock(*mu_);
  if (data_.erase(key) == 0) return false;
  ++version_;
  changed_->notify_all();
  return true;
}

std::vector<std::string> MemoryStore::list(const std::string& prefix) {
  std::lock_guard<Mutex> lock(*mu_);
  std::vector<std::string> out;
  for (auto it = data_.lower_bound(prefix); it != data_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.push_back(it->first);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> MemoryStore::read_prefix(
    const std::string& prefix) {
  std::lock_guard<Mutex> lock(*mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = data_.lower_bound(prefix); it != data_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.emplace_back(it->first, it->second);
  }
  return out;
}

std::uint64_t MemoryStore::version() {
  std::lock_guard<Mutex> lock(*mu_);
  return version_;
}

}  // namespace meridian
