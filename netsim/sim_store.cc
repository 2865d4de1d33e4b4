// SimStore: one table on the coordinator host; clients pay a request and a reply transfer per
// call (see sim_store.h).
#include "netsim/sim_store.h"

#include <map>
#include <mutex>
#include <simgrid/s4u.hpp>
#include <string>

#include "engine/error.h"
#include "netsim/wait_list.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

struct SimStoreServer::State {
  sg4::Host* coordinator = nullptr;
  std::map<std::string, std::string> table;
  WaitList changed;  // no lock: see wait_list.h
};

namespace {

// Fixed per-message framing cost (header of a small TCP request/response).
constexpr std::uint64_t kStoreHeaderBytes = 64;

class SimStoreClient final : public Store {
 public:
  SimStoreClient(std::shared_ptr<SimStoreServer::State> s, sg4::Host* host)
      : s_(std::move(s)), host_(host) {}

  void set(const std::string& key, const std::string& value) override {
    request(key.size() + value.size());
    s_->table[key] = value;
    s_->changed.notify_all();
    reply(0);
  }

  std::string get(const std::string& key, double timeout_s) override {
    request(key.size());
    wait_keys({key}, timeout_s);
    std::string v = s_->table.at(key);
    reply(v.size());
    return v;
  }

  std::optional<std::string> try_get(const std::string& key) override {
    request(key.size());
    auto it = s_->table.find(key);
    std::optional<std::string> v;
    if (it != s_->table.end()) v = it->second;
    reply(v ? v->size() : 0);
    return v;
  }

  void wait(const std::vector<std::string>& keys, double timeout_s) override {
    std::size_t n = 0;
    for (auto& k : keys) n += k.size();
    request(n);
    wait_keys(keys, timeout_s);
    reply(0);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    request(key.size() + 8);
    std::int64_t v = 0;
    auto it = s_->table.find(key);
    if (it != s_->table.end()) {
      try {
        v = std::stoll(it->second);
      } catch (const std::exception&) {
        throw ProtocolError("store: add on key '" + key + "' whose value is not an integer");
      }
    }
    v += delta;
    s_->table[key] = std::to_string(v);
    s_->changed.notify_all();
    reply(8);
    return v;
  }

  std::optional<std::string> compare_set(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override {
    request(key.size() + desired.size() + (expected ? expected->size() : 0));
    auto it = s_->table.find(key);
    std::optional<std::string> cur;
    if (it != s_->table.end()) cur = it->second;
    if (cur == expected) {
      s_->table[key] = desired;
      cur = desired;
      s_->changed.notify_all();
    }
    reply(cur ? cur->size() : 0);
    return cur;
  }

  bool erase(const std::string& key) override {
    request(key.size());
    bool existed = s_->table.erase(key) > 0;
    reply(0);
    return existed;
  }

  std::vector<std::string> list(const std::string& prefix) override {
    request(prefix.size());
    std::vector<std::string> keys;
    std::size_t n = 0;
    for (auto it = s_->table.lower_bound(prefix);
         it != s_->table.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      keys.push_back(it->first);
      n += it->first.size();
    }
    reply(n);
    return keys;
  }

 private:
  void transfer(sg4::Host* from, sg4::Host* to, std::uint64_t bytes) {
    try {
      sg4::Comm::sendto(from, to, kStoreHeaderBytes + bytes);
    } catch (const simgrid::NetworkFailureException&) {
      throw PeerLostError(-1, "store: coordinator unreachable");
    }
  }
  void request(std::uint64_t bytes) { transfer(host_, s_->coordinator, bytes); }
  void reply(std::uint64_t bytes) { transfer(s_->coordinator, host_, bytes); }

  void wait_keys(const std::vector<std::string>& keys, double timeout_s) {
    const double deadline = sg4::Engine::get_clock() + timeout_s;
    auto all_present = [&] {
      for (auto& k : keys)
        if (!s_->table.count(k)) return false;
      return true;
    };
    if (!s_->changed.wait_until(deadline, all_present))
      throw TimeoutError("store: waited " + std::to_string(timeout_s) + " s for key '" +
                         (keys.empty() ? std::string() : keys.front()) + "'");
  }

  std::shared_ptr<SimStoreServer::State> s_;
  sg4::Host* host_;
};

}  // namespace

SimStoreServer::SimStoreServer(sg4::Host* coordinator) : state_(std::make_shared<State>()) {
  state_->coordinator = coordinator;
}
SimStoreServer::~SimStoreServer() = default;

std::unique_ptr<Store> SimStoreServer::client(sg4::Host* host) {
  return std::make_unique<SimStoreClient>(state_, host);
}

}  // namespace meridian::netsim
