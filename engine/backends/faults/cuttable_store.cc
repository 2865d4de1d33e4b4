// CuttableStore.
#include "engine/backends/faults/cuttable_store.h"

#include <algorithm>
#include <utility>

#include "engine/core/error.h"

namespace meridian {

CuttableStore::CuttableStore(Store& inner, std::string reason, double slice_s)
    : ForwardingStore(inner), reason_(std::move(reason)), slice_s_(slice_s) {}

void CuttableStore::check() const {
  if (cut_) throw PeerLostError(-1, "store unreachable: " + reason_);
}

template <typename F>
auto CuttableStore::sliced(double timeout_s, F call) -> decltype(call(0.0)) {
  for (double left_s = timeout_s;;) {
    check();
    const double slice_s = std::min(left_s, slice_s_);
    try {
      return call(slice_s);
    } catch (const TimeoutError&) {
      if ((left_s -= slice_s) <= 0) throw;
    }
  }
}

void CuttableStore::set(const std::string& key, const std::string& value) {
  check();
  ForwardingStore::set(key, value);
}

std::string CuttableStore::get(const std::string& key, double timeout_s) {
  return sliced(timeout_s, [&](double s) { return ForwardingStore::get(key, s); });
}

std::optional<std::string> CuttableStore::try_get(const std::string& key) {
  check();
  return ForwardingStore::try_get(key);
}

void CuttableStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  sliced(timeout_s, [&](double s) {
    ForwardingStore::wait(keys, s);
    return 0;
  });
}

std::int64_t CuttableStore::add(const std::string& key, std::int64_t delta) {
  check();
  return ForwardingStore::add(key, delta);
}

std::optional<std::string> CuttableStore::compare_set(const std::string& key,
                                                      const std::optional<std::string>& expected,
                                                      const std::string& desired) {
  check();
  return ForwardingStore::compare_set(key, expected, desired);
}

bool CuttableStore::erase(const std::string& key) {
  check();
  return ForwardingStore::erase(key);
}

std::vector<std::string> CuttableStore::list(const std::string& prefix) {
  check();
  return ForwardingStore::list(prefix);
}

std::vector<std::pair<std::string, std::string>> CuttableStore::read_prefix(
    const std::string& prefix) {
  check();
  return ForwardingStore::read_prefix(prefix);
}

std::int64_t CuttableStore::lease_grant(double ttl_s) {
  check();
  return ForwardingStore::lease_grant(ttl_s);
}

double CuttableStore::keepalive(std::int64_t lease, double interval_s) {
  check();
  return ForwardingStore::keepalive(lease, interval_s);
}

bool CuttableStore::lease_revoke(std::int64_t lease) {
  check();
  return ForwardingStore::lease_revoke(lease);
}

std::optional<std::string> CuttableStore::compare_set_leased(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired, std::int64_t lease) {
  check();
  return ForwardingStore::compare_set_leased(key, expected, desired, lease);
}

std::uint64_t CuttableStore::watch(const std::vector<std::string>& prefixes,
                                   std::uint64_t after_revision, double timeout_s) {
  check();
  return ForwardingStore::watch(prefixes, after_revision, std::min(timeout_s, slice_s_));
}

}  // namespace meridian
