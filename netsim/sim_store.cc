// SimStore: one table on the coordinator host; clients pay a request and a reply transfer per
// call (see sim_store.h): a small one as its route's latency plus bytes / bottleneck bandwidth
// on the caller's clock (deferred: see deferred_time.h), a large one as a SimGrid flow.
#include "netsim/sim_store.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/core/store/lease_table.h"
#include "netsim/deferred_time.h"
#include "netsim/wait_list.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

// The key-value table: ordered for list(), with a hash index for the point reads that dominate
// (every heartbeat reads every member's counter: N^2 reads per interval).
class Table {
 public:
  const std::string* find(const std::string& key) const {
    auto it = index_.find(std::string_view(key));
    return it == index_.end() ? nullptr : it->second;
  }
  std::string& operator[](const std::string& key) {
    if (std::string* v = const_cast<std::string*>(find(key))) return *v;
    auto& entry = *ordered_.emplace(key, std::string()).first;
    index_.emplace(std::string_view(entry.first), &entry.second);  // map nodes never move
    return entry.second;
  }
  bool erase(const std::string& key) {
    if (index_.erase(std::string_view(key)) == 0) return false;
    ordered_.erase(key);
    return true;
  }
  // The entries whose key starts with `prefix`, in key order.
  template <typename F>
  void for_prefix(const std::string& prefix, F f) const {
    for (auto it = ordered_.lower_bound(prefix);
         it != ordered_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      f(it->first, it->second);
  }

 private:
  std::map<std::string, std::string> ordered_;
  std::unordered_map<std::string_view, std::string*> index_;
};

}  // namespace

// The kinds of call counted by SimStoreServer::calls().
enum class Call {
  kSet,
  kGet,
  kTryGet,
  kWait,
  kAdd,
  kCompareSet,
  kErase,
  kList,
  kReadPrefix,
  kLeaseGrant,
  kKeepalive,
  kLeaseRevoke,
  kCompareSetLeased,
  kWatch,
  kKeepaliveAnalytic,  // keepalives accounted for, not called (one per would-be call)
  kLeaseExpired,
  kCount
};
constexpr const char* kCallNames[] = {
    "set",        "get",         "try_get",      "wait",      "add",
    "compare_set", "erase",      "list",         "read_prefix", "lease_grant",
    "keepalive",  "lease_revoke", "compare_set_leased", "watch", "keepalive_analytic",
    "lease_expired"};
static_assert(std::size(kCallNames) == static_cast<std::size_t>(Call::kCount));

// What a waiter waits for, as the tag notify_if matches a changed key against: the keys
// themselves (get, wait) or prefixes of them (watch).
struct WaitTag {
  const std::vector<std::string>* keys;
  bool prefixes;
  bool matches(const std::string& key) const {
    for (const auto& k : *keys)
      if (prefixes ? key.compare(0, k.size(), k) == 0 : key == k) return true;
    return false;
  }
};

struct SimStoreServer::State {
  sg4::Host* coordinator = nullptr;
  bool analytic_keepalives = true;
  double quorum_rtt_s = 0.0;  // a replicated store's commit (or ReadIndex) wait at the leader
  Table table;
  WaitList changed;  // no lock: see wait_list.h
  LeaseTable leases;  // on simulated time
  ChangeLog changes;
  std::map<std::int64_t, simgrid::kernel::timer::Timer*> timers;  // pending lease ends
  std::uint64_t calls[static_cast<std::size_t>(Call::kCount)] = {};
  void count(Call c, std::uint64_t n = 1) { calls[static_cast<std::size_t>(c)] += n; }

  // A key was written or erased: the change log, its lease, and the waiters for it only (a
  // keepalive is no change, and a report must not wake every node waiting for a record).
  void changed_key(const std::string& key) {
    leases.detach(key);
    changes.record(key);
    changed.notify_if([&](const void* tag) { return static_cast<const WaitTag*>(tag)->matches(key); });
  }
  bool erase(const std::string& key) {
    if (!table.erase(key)) {
      leases.detach(key);
      return false;
    }
    changed_key(key);
    return true;
  }
  // (Re)arms the kernel timer that ends `lease` at its deadline. Runs in actors and in the
  // maestro (an activity's end); a timer's callback runs in the maestro and needs no simcall.
  void arm(std::int64_t lease) {
    if (auto it = timers.find(lease); it != timers.end()) {
      it->second->remove();
      timers.erase(it);
    }
    const double deadline_s = leases.deadline_s(lease);
    if (!std::isfinite(deadline_s)) return;
    timers[lease] = simgrid::kernel::timer::Timer::set(deadline_s, [this, lease] {
      timers.erase(lease);
      for (const std::string& key : leases.expire(sg4::Engine::get_clock())) {
        count(Call::kLeaseExpired);
        erase(key);
      }
    });
  }
  bool revoke(std::int64_t lease) {
    const bool alive = leases.alive(lease);
    for (const std::string& key : leases.revoke(lease)) erase(key);
    arm(lease);  // removes its timer
    return alive;
  }
};

namespace {

// Fixed per-message framing cost (header of a small TCP request/response).
constexpr std::uint64_t kStoreHeaderBytes = 64;

// One direction of a client's route to the coordinator: the sum of its links' latencies and its
// bottleneck bandwidth (read when the client is made; variability profiles are not followed).
struct RoutePath {
  double latency_s = 0.0;
  double bandwidth_Bps = 0.0;
};

RoutePath route_path(sg4::Host* from, sg4::Host* to) {
  std::vector<sg4::Link*> links;
  RoutePath p;
  from->route_to(to, links, &p.latency_s);
  p.bandwidth_Bps = std::numeric_limits<double>::infinity();
  for (auto* l : links) p.bandwidth_Bps = std::min(p.bandwidth_Bps, l->get_bandwidth());
  return p;
}

class SimStoreClient final : public Store {
 public:
  SimStoreClient(std::shared_ptr<SimStoreServer::State> s, sg4::Host* host)
      : s_(std::move(s)),
        host_(host),
        up_(route_path(host, s_->coordinator)),
        down_(route_path(s_->coordinator, host)) {}

  void set(const std::string& key, const std::string& value) override {
    s_->count(Call::kSet);
    const double up_s = request(key.size() + value.size());
    s_->table[key] = value;
    s_->changed_key(key);
    reply(up_s, 0);
  }

  std::string get(const std::string& key, double timeout_s) override {
    s_->count(Call::kGet);
    const double up_s = request(key.size());
    wait_keys({key}, timeout_s);
    std::string v = *s_->table.find(key);  // wait_keys saw it
    reply(up_s, v.size());
    return v;
  }

  std::optional<std::string> try_get(const std::string& key) override {
    s_->count(Call::kTryGet);
    const double up_s = request(key.size());
    std::optional<std::string> v;
    if (const std::string* found = s_->table.find(key)) v = *found;
    reply(up_s, v ? v->size() : 0);
    return v;
  }

  void wait(const std::vector<std::string>& keys, double timeout_s) override {
    s_->count(Call::kWait);
    std::size_t n = 0;
    for (auto& k : keys) n += k.size();
    const double up_s = request(n);
    wait_keys(keys, timeout_s);
    reply(up_s, 0);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    s_->count(Call::kAdd);
    const double up_s = request(key.size() + 8);
    std::int64_t v = 0;
    if (const std::string* found = s_->table.find(key)) {
      try {
        v = std::stoll(*found);
      } catch (const std::exception&) {
        throw ProtocolError("store: add on key '" + key + "' whose value is not an integer");
      }
    }
    v += delta;
    s_->table[key] = std::to_string(v);
    s_->changed_key(key);
    reply(up_s, 8);
    return v;
  }

  std::optional<std::string> compare_set(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override {
    s_->count(Call::kCompareSet);
    const double up_s = request(key.size() + desired.size() + (expected ? expected->size() : 0));
    std::optional<std::string> cur;
    if (const std::string* found = s_->table.find(key)) cur = *found;
    if (cur == expected) {
      s_->table[key] = desired;
      cur = desired;
      s_->changed_key(key);
    }
    reply(up_s, cur ? cur->size() : 0);
    return cur;
  }

  std::optional<std::string> compare_set_leased(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired,
                                                std::int64_t lease) override {
    s_->count(Call::kCompareSetLeased);
    const double up_s = request(key.size() + desired.size() + (expected ? expected->size() : 0));
    std::optional<std::string> cur;
    if (const std::string* found = s_->table.find(key)) cur = *found;
    if (cur == expected && s_->leases.alive(lease)) {
      s_->table[key] = desired;
      cur = desired;
      s_->changed_key(key);
      s_->leases.attach(lease, key);
    }
    reply(up_s, cur ? cur->size() : 0);
    return cur;
  }

  std::int64_t lease_grant(double ttl_s) override {
    s_->count(Call::kLeaseGrant);
    const double up_s = request(8);
    const std::int64_t lease = s_->leases.grant(ttl_s, sg4::Engine::get_clock());
    s_->arm(lease);
    reply(up_s, 8);
    return lease;
  }

  double keepalive(std::int64_t lease, double interval_s) override {
    s_->count(Call::kKeepalive);
    const double up_s = request(8, /*quorum=*/false);  // etcd's leader renews leases alone
    const double now_s = sg4::Engine::get_clock();
    double next_s = -1.0;
    if (!s_->analytic_keepalives) {
      if (s_->leases.keepalive(lease, now_s)) {
        s_->arm(lease);
        next_s = interval_s;
      }
    } else if (s_->leases.set_deadline(lease, std::numeric_limits<double>::infinity())) {
      // This keepalive stands for all of this activity's: the next would be sent interval_s
      // after it, and so on, each taking effect like this one, at its call. When the activity
      // ends (its host fails, or it returns) the lease ends one ttl after the last of them.
      s_->arm(lease);  // no deadline while they last
      sg4::this_actor::on_exit([s = s_, lease, start_s = now_s, interval_s](bool) {
        const double end_s = sg4::Engine::get_clock();
        const double sent = std::floor((end_s - start_s) / interval_s);
        s->count(Call::kKeepaliveAnalytic, static_cast<std::uint64_t>(sent));
        if (s->leases.set_deadline(lease,
                                   start_s + sent * interval_s + s->leases.ttl_s(lease)))
          s->arm(lease);
      });
      next_s = std::numeric_limits<double>::infinity();
    }
    reply(up_s, 8);
    return next_s;
  }

  bool lease_revoke(std::int64_t lease) override {
    s_->count(Call::kLeaseRevoke);
    const double up_s = request(8);
    const bool alive = s_->revoke(lease);
    reply(up_s, 0);
    return alive;
  }

  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double timeout_s) override {
    s_->count(Call::kWatch);
    std::size_t n = 16;
    for (auto& p : prefixes) n += p.size();
    const double up_s = request(n, /*quorum=*/false);
    const auto changed = [&] { return s_->changes.changed_since(prefixes, after_revision); };
    if (timeout_s > 0 && !changed()) {
      // Waits like a blocking get: from when what the caller owes is paid.
      const WaitTag tag{&prefixes, true};
      s_->changed.wait_until(sg4::Engine::get_clock() + deferred_time_s() + timeout_s, changed,
                             &tag);
    }
    const std::uint64_t revision = s_->changes.revision();
    reply(up_s, 8);
    return revision;
  }

  bool erase(const std::string& key) override {
    s_->count(Call::kErase);
    const double up_s = request(key.size());
    const bool existed = s_->erase(key);
    reply(up_s, 0);
    return existed;
  }

  std::vector<std::string> list(const std::string& prefix) override {
    s_->count(Call::kList);
    const double up_s = request(prefix.size());
    std::vector<std::string> keys;
    std::size_t n = 0;
    s_->table.for_prefix(prefix, [&](const std::string& key, const std::string&) {
      keys.push_back(key);
      n += key.size();
    });
    reply(up_s, n);
    return keys;
  }

  std::vector<std::pair<std::string, std::string>> read_prefix(const std::string& prefix) override {
    s_->count(Call::kReadPrefix);
    const double up_s = request(prefix.size());
    std::vector<std::pair<std::string, std::string>> out;
    std::size_t n = 0;
    s_->table.for_prefix(prefix, [&](const std::string& key, const std::string& value) {
      out.emplace_back(key, value);
      n += key.size() + value.size();
    });
    reply(up_s, n);
    return out;
  }

 private:
  // A message of at most kStoreSmallMessageBytes is charged analytically (route latency + bytes
  // / bottleneck bandwidth); a larger one is a SimGrid flow. SimGrid's flow model is weakest for
  // tiny messages (each briefly takes a max-min share of every link on its route, and with
  // crosstraffic 5 % of the reverse path) and a flow costs solver passes at its start and end,
  // which made heartbeat traffic dominate the engine driver's wall time. The table is read and
  // written when the call is made; the small round trip's cost is deferred (deferred_time.h):
  // the caller pays it, with any calls that follow, before it next touches the clock.
  static double small_cost_s(const RoutePath& path, std::uint64_t bytes) {
    return path.latency_s + static_cast<double>(bytes) / path.bandwidth_Bps;
  }
  void flow(sg4::Host* from, sg4::Host* to, std::uint64_t bytes) {
    pay_deferred_time();
    try {
      sg4::Comm::sendto(from, to, bytes);
    } catch (const simgrid::NetworkFailureException&) {
      throw PeerLostError(-1, "store: coordinator unreachable");
    }
  }
  // Returns the small request's cost, to be charged with the reply (a large one is sent now).
  // A host that is off reaches nobody: its actors may still call while a crash unwinds their
  // stacks (a destructor ending a lease), and must not.
  // `quorum` (every call but keepalive and watch): a replicated store's leader also waits for
  // its quorum round trip before it answers.
  double request(std::uint64_t bytes, bool quorum = true) {
    if (!host_->is_on()) throw PeerLostError(-1, "store: this host is down");
    bytes += kStoreHeaderBytes;
    const double wait_s = quorum ? s_->quorum_rtt_s : 0.0;
    if (bytes <= kStoreSmallMessageBytes) return small_cost_s(up_, bytes) + wait_s;
    flow(host_, s_->coordinator, bytes);
    return wait_s;
  }
  void reply(double up_s, std::uint64_t bytes) {
    bytes += kStoreHeaderBytes;
    if (bytes <= kStoreSmallMessageBytes) {
      defer_time(up_s + small_cost_s(down_, bytes));
      return;
    }
    defer_time(up_s);
    flow(s_->coordinator, host_, bytes);
  }

  void wait_keys(const std::vector<std::string>& keys, double timeout_s) {
    auto all_present = [&] {
      for (auto& k : keys)
        if (!s_->table.find(k)) return false;
      return true;
    };
    // Keys already there: answered at once like any small call, its cost deferred (no wait).
    if (all_present()) return;
    // A blocking call: the wait starts once what the caller owes is paid (wait_until pays it).
    const double deadline = sg4::Engine::get_clock() + deferred_time_s() + timeout_s;
    const WaitTag tag{&keys, false};
    if (!s_->changed.wait_until(deadline, all_present, &tag))
      throw TimeoutError("store: waited " + std::to_string(timeout_s) + " s for key '" +
                         (keys.empty() ? std::string() : keys.front()) + "'");
  }

  std::shared_ptr<SimStoreServer::State> s_;
  sg4::Host* host_;
  RoutePath up_, down_;
};

}  // namespace

SimStoreServer::SimStoreServer(sg4::Host* coordinator, bool analytic_keepalives,
                               double quorum_rtt_s)
    : state_(std::make_shared<State>()) {
  state_->coordinator = coordinator;
  state_->quorum_rtt_s = quorum_rtt_s;
  state_->analytic_keepalives = analytic_keepalives;
  // A pending kernel timer keeps SimGrid's clock going after the last actor has ended (see
  // wait_list.cc): the lease of a node that crashed in the run's last seconds would stretch the
  // run to its end. This daemon is killed when the last node actor ends, and takes the pending
  // lease timers with it.
  sg4::Actor::create("store-lease-timers", coordinator, [s = state_] {
    struct RemoveTimers {
      SimStoreServer::State* s;
      ~RemoveTimers() {
        for (auto& [lease, timer] : s->timers) timer->remove();
        s->timers.clear();
      }
    } guard{s.get()};
    sg4::Semaphore::create(0)->acquire();  // until killed
  })->daemonize();
}
SimStoreServer::~SimStoreServer() = default;

std::unique_ptr<Store> SimStoreServer::client(sg4::Host* host) {
  return std::make_unique<SimStoreClient>(state_, host);
}

std::vector<std::pair<std::string, std::uint64_t>> SimStoreServer::calls() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(Call::kCount); ++i)
    if (state_->calls[i] > 0) out.emplace_back(kCallNames[i], state_->calls[i]);
  return out;
}

}  // namespace meridian::netsim
