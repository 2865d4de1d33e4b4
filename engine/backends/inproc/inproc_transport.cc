// In-process transport: one mutex per hub, one mailbox per (src, dst, tag), one condition
// variable per destination. Sends copy into the mailbox and never block; receives wait with a
// deadline. This backend runs on OS threads, so it uses std::mutex and the steady clock itself.
#include "engine/backends/inproc/inproc_transport.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backends/common/deadline.h"
#include "engine/core/error.h"

namespace meridian {

namespace {

using Clock = std::chrono::steady_clock;

struct Message {
  std::vector<std::byte> bytes;
  std::uint64_t wire_bytes = 0;
};

}  // namespace

namespace detail {

struct InProcHubState {
  InProcHubState(int world_size, std::uint64_t epoch_id)
      : world(world_size),
        epoch(epoch_id),
        dead(world_size, false),
        taken(world_size, false),
        arrivals(world_size) {}

  const int world;
  const std::uint64_t epoch;
  std::mutex mu;
  std::vector<bool> dead;   // killed, aborted or closed: guarded by mu
  std::vector<bool> taken;  // endpoint handed out: guarded by mu
  std::map<std::tuple<int, int, Tag>, std::deque<Message>> mailboxes;  // (src, dst, tag)
  std::vector<std::condition_variable> arrivals;                       // per destination rank
  // Message buffers handed back by receivers, reused by senders: steady traffic then touches
  // no fresh pages (page faults dominated large transfers without it). Guarded by mu.
  std::vector<std::vector<std::byte>> spare;
  static constexpr std::size_t kMaxSpare = 64;

  std::vector<std::byte> take_buffer(std::size_t bytes) {
    std::vector<std::byte> b;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!spare.empty()) {
        b = std::move(spare.back());
        spare.pop_back();
      }
    }
    b.resize(bytes);
    return b;
  }

  void give_back(std::vector<std::byte> b) {
    if (b.capacity() == 0) return;
    std::lock_guard<std::mutex> lock(mu);
    if (spare.size() < kMaxSpare) spare.push_back(std::move(b));
  }

  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= world)
      throw ConfigError(std::string("in-process transport: ") + what + " rank " +
                        std::to_string(r) + " is outside [0, " + std::to_string(world) + ")");
  }

  // Marks `r` dead and wakes everybody (any rank may be waiting on it).
  void mark_dead(int r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (dead[r]) return;
      dead[r] = true;
    }
    for (auto& cv : arrivals) cv.notify_all();
  }
};

}  // namespace detail

namespace {

[[noreturn]] void throw_self_dead(int rank, std::uint64_t epoch) {
  throw PeerLostError(rank, "in-process transport: rank " + std::to_string(rank) + " of epoch " +
                                std::to_string(epoch) +
                                " is dead or aborted; no further communication");
}

[[noreturn]] void throw_peer_dead(int peer, std::uint64_t epoch) {
  throw PeerLostError(peer, "in-process transport: peer rank " + std::to_string(peer) +
                                " of epoch " + std::to_string(epoch) + " is dead or aborted");
}

class InProcEndpoint;

// The in-process send half completes at start (the bytes are copied into the mailbox), so the
// exchange only has the receive left; a failed send is reported by wait(), like every error.
class InProcExchange final : public PendingExchange {
 public:
  InProcExchange(InProcEndpoint& owner, int from, std::span<std::byte> into, Tag tag,
                 std::exception_ptr send_error)
      : owner_(owner), from_(from), into_(into), tag_(tag), send_error_(std::move(send_error)) {}
  Received wait(double timeout_s) override;

 private:
  InProcEndpoint& owner_;
  int from_;
  std::span<std::byte> into_;
  Tag tag_;
  std::exception_ptr send_error_;
};

class InProcEndpoint final : public Transport {
 public:
  InProcEndpoint(std::shared_ptr<detail::InProcHubState> hub, int rank)
      : hub_(std::move(hub)), rank_(rank) {}
  // A destroyed endpoint is a closed peer.
  ~InProcEndpoint() override { hub_->mark_dead(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return hub_->world; }
  std::uint64_t epoch() const override { return hub_->epoch; }

  void send(int to, Tag tag, Payload msg, double /*timeout_s*/) override {
    hub_->check_rank(to, "send to");
    Message m;
    m.bytes = hub_->take_buffer(msg.bytes.size());  // filled outside the lock
    if (!msg.bytes.empty()) std::memcpy(m.bytes.data(), msg.bytes.data(), msg.bytes.size());
    m.wire_bytes = msg.wire_bytes;
    {
      std::lock_guard<std::mutex> lock(hub_->mu);
      if (hub_->dead[rank_]) throw_self_dead(rank_, hub_->epoch);
      if (hub_->dead[to]) throw_peer_dead(to, hub_->epoch);
      hub_->mailboxes[{rank_, to, tag}].push_back(std::move(m));
    }
    hub_->arrivals[to].notify_all();
  }

  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override {
    hub_->check_rank(from, "receive from");
    const auto deadline = deadline_after(timeout_s);
    Message m;
    {
      std::unique_lock<std::mutex> lock(hub_->mu);
      const auto key = std::make_tuple(from, rank_, tag);
      for (;;) {
        if (hub_->dead[rank_]) throw_self_dead(rank_, hub_->epoch);
        // Messages a peer sent before it died are still delivered, so a peer that finished and
        // closed never fails a receiver that is merely behind.
        auto it = hub_->mailboxes.find(key);
        if (it != hub_->mailboxes.end() && !it->second.empty()) {
          m = std::move(it->second.front());
          it->second.pop_front();
          if (it->second.empty()) hub_->mailboxes.erase(it);
          break;
        }
        if (hub_->dead[from]) throw_peer_dead(from, hub_->epoch);
        if (hub_->arrivals[rank_].wait_until(lock, deadline) == std::cv_status::timeout &&
            Clock::now() >= deadline) {
          // One last look: the message may have arrived together with the timeout.
          auto again = hub_->mailboxes.find(key);
          if (again == hub_->mailboxes.end() || again->second.empty()) {
            if (hub_->dead[from]) throw_peer_dead(from, hub_->epoch);
            throw TimeoutError("in-process transport: rank " + std::to_string(rank_) +
                               " received nothing from rank " + std::to_string(from) + " (tag " +
                               std::to_string(tag) + ") within " + std::to_string(timeout_s) +
                               " s");
          }
        }
      }
    }
    const std::size_t got = m.bytes.size();
    if (got > into.size()) {
      hub_->give_back(std::move(m.bytes));
      throw ProtocolError("in-process transport: message of " + std::to_string(got) +
                              " bytes from rank " + std::to_string(from) +
                              " does not fit the receive buffer of " + std::to_string(into.size()) +
                              " bytes",
                          from);
    }
    if (got != 0) std::memcpy(into.data(), m.bytes.data(), got);
    hub_->give_back(std::move(m.bytes));
    return Received{got, m.wire_bytes};
  }

  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    std::exception_ptr send_error;
    try {
      send(to, tag, out, 0);
    } catch (...) {
      send_error = std::current_exception();
    }
    return std::make_unique<InProcExchange>(*this, from, into, tag, std::move(send_error));
  }

  void abort() override { hub_->mark_dead(rank_); }

 private:
  std::shared_ptr<detail::InProcHubState> hub_;
  int rank_;
};

Received InProcExchange::wait(double timeout_s) {
  if (send_error_) std::rethrow_exception(std::exchange(send_error_, nullptr));
  return owner_.recv(from_, tag_, into_, timeout_s);
}

std::unique_ptr<Transport> take_endpoint(const std::shared_ptr<detail::InProcHubState>& state,
                                         int rank) {
  state->check_rank(rank, "endpoint for");
  {
    std::lock_guard<std::mutex> lock(state->mu);
    MERIDIAN_CHECK(!state->taken[rank]);  // each rank's endpoint is taken once
    state->taken[rank] = true;
  }
  return std::make_unique<InProcEndpoint>(state, rank);
}

}  // namespace

InProcHub::InProcHub(int world, std::uint64_t epoch) {
  if (world < 1)
    throw ConfigError("in-process hub: world size must be at least 1, got " +
                      std::to_string(world));
  state_ = std::make_shared<detail::InProcHubState>(world, epoch);
}

InProcHub::~InProcHub() = default;

std::unique_ptr<Transport> InProcHub::endpoint(int rank) { return take_endpoint(state_, rank); }

void InProcHub::kill(int rank) {
  state_->check_rank(rank, "kill");
  state_->mark_dead(rank);
}

// The network keeps each epoch's hub alive only as long as an endpoint of it exists (weak
// references), so finished epochs and their leftover messages are freed.
struct InProcNetwork::State {
  std::mutex mu;
  struct Epoch {
    std::vector<std::int64_t> members;
    std::weak_ptr<detail::InProcHubState> hub;
  };
  std::map<std::uint64_t, Epoch> epochs;
  std::set<std::int64_t> dead_nodes;
};

InProcNetwork::InProcNetwork() : state_(std::make_shared<State>()) {}
InProcNetwork::~InProcNetwork() = default;

std::unique_ptr<Transport> InProcNetwork::connect(const EpochSpec& spec) {
  const int world = static_cast<int>(spec.members.size());
  if (world < 1 || spec.rank < 0 || spec.rank >= world)
    throw ConfigError("in-process network: epoch " + std::to_string(spec.epoch) + " rank " +
                      std::to_string(spec.rank) + " is outside its " + std::to_string(world) +
                      " members");
  std::shared_ptr<detail::InProcHubState> hub;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& entry = state_->epochs[spec.epoch];
    hub = entry.hub.lock();
    if (hub && entry.members != spec.members)
      throw ConfigError("in-process network: epoch " + std::to_string(spec.epoch) +
                        " was formed with a different member list");
    if (!hub) {
      hub = std::make_shared<detail::InProcHubState>(world, spec.epoch);
      for (int r = 0; r < world; ++r) hub->dead[r] = state_->dead_nodes.count(spec.members[r]) > 0;
      entry.members = spec.members;
      entry.hub = hub;
    }
    // Drop the bookkeeping of epochs whose hubs are gone.
    for (auto it = state_->epochs.begin(); it != state_->epochs.end();) {
      it = it->second.hub.expired() ? state_->epochs.erase(it) : std::next(it);
    }
  }
  return take_endpoint(hub, spec.rank);
}

void InProcNetwork::kill_node(std::int64_t node_id) {
  std::vector<std::pair<std::shared_ptr<detail::InProcHubState>, int>> victims;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->dead_nodes.insert(node_id);
    for (auto& [epoch, entry] : state_->epochs) {
      auto hub = entry.hub.lock();
      if (!hub) continue;
      for (std::size_t r = 0; r < entry.members.size(); ++r)
        if (entry.members[r] == node_id) victims.emplace_back(hub, static_cast<int>(r));
    }
  }
  for (auto& [hub, r] : victims) hub->mark_dead(r);
}

void InProcNetwork::revive_node(std::int64_t node_id) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->dead_nodes.erase(node_id);
}

}  // namespace meridian
