// SimNetwork / SimTransport: host-to-host SimGrid transfers plus in-memory inboxes
// (see sim_transport.h for the delivery and error semantics).
#include "netsim/sim_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <simgrid/s4u.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "engine/diloco/diloco.h"
#include "engine/error.h"
#include "netsim/wait_list.h"
#include "netsim/wan.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

struct Message {
  std::vector<std::byte> content;
  std::uint64_t wire_bytes = 0;
};

// One rank's receive side in one epoch.
// No lock: actors are cooperative, and a lock could be left held by an actor killed with its host.
struct Inbox {
  WaitList waiters;
  std::map<std::pair<int, Tag>, std::deque<Message>> queues;
};

struct EpochState {
  std::uint64_t epoch = 0;
  int lane = 0;  // which of a node's parallel rings: its TCP connections are its own
  std::vector<std::int64_t> members;
  std::vector<sg4::Host*> hosts;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  std::vector<bool> aborted;
  // Rendezvous only: when each receive was posted, per (receiver, sender, tag), oldest first.
  std::map<std::tuple<int, int, Tag>, std::deque<double>> posted;
  WaitList posts;  // senders waiting for a receive to be posted

  void notify_all() {
    for (auto& in : inboxes) in->waiters.notify_all();
    posts.notify_all();
  }
};

}  // namespace

struct SimNetwork::State {
  std::map<std::int64_t, sg4::Host*> hosts;
  std::set<std::int64_t> dead;
  std::map<std::uint64_t, std::weak_ptr<EpochState>> epochs;
  std::uint64_t messages = 0;
  std::uint64_t wire_bytes = 0;
  int rendezvous_trips = 0;
  std::shared_ptr<WanModel> wan;
  std::map<std::pair<sg4::Host*, sg4::Host*>, double> latency_s;  // one way, per route

  // Starts a transfer; ended() must follow it, whatever becomes of it.
  sg4::CommPtr start_flow(sg4::Host* from, sg4::Host* to, std::uint64_t bytes, int lane) {
    return wan ? wan->start(from, to, bytes, lane) : sg4::Comm::sendto_async(from, to, bytes);
  }
  void ended(sg4::Host* from, sg4::Host* to, int lane) {
    if (wan) wan->ended(from, to, lane);
  }

  double one_way_latency_s(sg4::Host* from, sg4::Host* to) {
    auto [it, fresh] = latency_s.try_emplace({from, to}, 0.0);
    if (fresh) {
      std::vector<sg4::Link*> links;
      from->route_to(to, links, &it->second);
    }
    return it->second;
  }

  void notify_epochs() {
    for (auto it = epochs.begin(); it != epochs.end();) {
      if (auto e = it->second.lock()) {
        e->notify_all();
        ++it;
      } else {
        it = epochs.erase(it);
      }
    }
  }
};

namespace {

class SimTransport;

// Runs one transfer of `wire_bytes` from `from` to `to`; throws on failure or timeout.
void transfer(SimNetwork::State& net, EpochState& ep, int from, int to, std::uint64_t wire_bytes,
              sg4::CommPtr comm, double deadline_s) {
  auto peer_lost = [&](const char* why) {
    return PeerLostError(to, "netsim: rank " + std::to_string(to) + " (node " +
                                 std::to_string(ep.members[to]) + ") of epoch " +
                                 std::to_string(ep.epoch) + " " + why);
  };
  struct Ended {  // the connection goes idle however the transfer ends
    SimNetwork::State& net;
    sg4::Host *from, *to;
    int lane;
    ~Ended() { net.ended(from, to, lane); }
  } ended{net, ep.hosts[from], ep.hosts[to], ep.lane};
  try {
    comm->wait_for(std::max(0.0, deadline_s - sg4::Engine::get_clock()));
  } catch (const simgrid::TimeoutException&) {
    comm->cancel();
    throw TimeoutError("netsim: send to rank " + std::to_string(to) + " of epoch " +
                       std::to_string(ep.epoch) + " timed out");
  } catch (const simgrid::NetworkFailureException&) {
    throw peer_lost("became unreachable during a send");
  } catch (const simgrid::HostFailureException&) {
    throw peer_lost("failed during a send");
  }
  if (net.dead.count(ep.members[to]) || ep.aborted[to]) throw peer_lost("was lost during a send");
  net.messages++;
  net.wire_bytes += wire_bytes;
}

void deliver(EpochState& ep, int from, int to, Tag tag, const Payload& msg) {
  Inbox& in = *ep.inboxes[to];
  Message m;
  m.content.assign(msg.bytes.begin(), msg.bytes.end());
  m.wire_bytes = msg.wire_bytes;
  in.queues[{from, tag}].push_back(std::move(m));
  in.waiters.notify_all();
}

// Rendezvous: rank `me` has posted a receive from `from` with `tag`.
void post_receive(const SimNetwork::State& net, EpochState& ep, int me, int from, Tag tag) {
  if (net.rendezvous_trips == 0) return;
  ep.posted[{me, from, tag}].push_back(sg4::Engine::get_clock());
  ep.posts.notify_all();
}

// Rendezvous: blocks rank `me`'s send to `to` until it is posted (at `sent_s`) and the
// receiver's control trips, which start when the receive is posted, have crossed.
void rendezvous(SimNetwork::State& net, EpochState& ep, int me, int to, Tag tag, double sent_s,
                double deadline_s) {
  if (net.rendezvous_trips == 0) return;
  const std::tuple<int, int, Tag> key{to, me, tag};
  auto gone = [&] { return net.dead.count(ep.members[to]) || ep.aborted[to] || ep.aborted[me]; };
  const bool posted = ep.posts.wait_until(deadline_s, [&] {
    auto it = ep.posted.find(key);
    return (it != ep.posted.end() && !it->second.empty()) || gone();
  });
  if (!posted)
    throw TimeoutError("netsim: rank " + std::to_string(to) + " of epoch " +
                       std::to_string(ep.epoch) + " did not post its receive in time");
  if (gone())
    throw PeerLostError(to, "netsim: rank " + std::to_string(to) + " (node " +
                                std::to_string(ep.members[to]) + ") of epoch " +
                                std::to_string(ep.epoch) + " was lost before a rendezvous");
  auto it = ep.posted.find(key);
  const double recv_s = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) ep.posted.erase(it);
  const double start_s =
      std::max(sent_s, recv_s + net.rendezvous_trips *
                                    net.one_way_latency_s(ep.hosts[me], ep.hosts[to]));
  const double now_s = sg4::Engine::get_clock();
  if (start_s > deadline_s)
    throw TimeoutError("netsim: send to rank " + std::to_string(to) + " of epoch " +
                       std::to_string(ep.epoch) + " timed out in its rendezvous");
  if (start_s > now_s) sg4::this_actor::sleep_for(start_s - now_s);
}

Received receive(SimNetwork::State& net, EpochState& ep, int me, int from, Tag tag,
                 std::span<std::byte> into, double deadline_s) {
  Inbox& in = *ep.inboxes[me];
  for (;;) {
    auto it = in.queues.find({from, tag});
    if (it != in.queues.end() && !it->second.empty()) {
      Message m = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) in.queues.erase(it);
      if (m.content.size() > into.size())
        throw ProtocolError("netsim: message of " + std::to_string(m.content.size()) +
                            " bytes from rank " + std::to_string(from) + " exceeds the " +
                            std::to_string(into.size()) + "-byte receive buffer",
                            from);
      if (!m.content.empty()) std::memcpy(into.data(), m.content.data(), m.content.size());
      return {m.content.size(), m.wire_bytes};
    }
    if (net.dead.count(ep.members[from]) || ep.aborted[from] || ep.aborted[me])
      throw PeerLostError(from, "netsim: rank " + std::to_string(from) + " (node " +
                                    std::to_string(ep.members[from]) + ") of epoch " +
                                    std::to_string(ep.epoch) + " is lost");
    const bool woken = in.waiters.wait_until(deadline_s, [&] {
      auto q = in.queues.find({from, tag});
      return (q != in.queues.end() && !q->second.empty()) || net.dead.count(ep.members[from]) ||
             ep.aborted[from] || ep.aborted[me];
    });
    if (!woken)
      throw TimeoutError("netsim: receive from rank " + std::to_string(from) + " of epoch " +
                         std::to_string(ep.epoch) + " timed out");
  }
}

class SimExchange final : public PendingExchange {
 public:
  SimExchange(std::shared_ptr<SimNetwork::State> net, std::shared_ptr<EpochState> ep, int me,
              int to, Payload out, int from, std::span<std::byte> into, Tag tag)
      : net_(std::move(net)),
        ep_(std::move(ep)),
        me_(me),
        to_(to),
        out_(out),
        from_(from),
        into_(into),
        tag_(tag),
        posted_s_(sg4::Engine::get_clock()) {
    post_receive(*net_, *ep_, me_, from_, tag_);
    peer_ok_ = !net_->dead.count(ep_->members[to_]) && !ep_->aborted[to_];
    if (peer_ok_ && net_->rendezvous_trips == 0)  // eager: the data leaves now
      comm_ = net_->start_flow(ep_->hosts[me_], ep_->hosts[to_], out_.wire_bytes, ep_->lane);
  }
  ~SimExchange() override {
    if (comm_ && !done_) {
      comm_->cancel();
      net_->ended(ep_->hosts[me_], ep_->hosts[to_], ep_->lane);
    }
  }
  Received wait(double timeout_s) override {
    pay_deferred_time();
    const double deadline = sg4::Engine::get_clock() + timeout_s;
    if (!peer_ok_)
      throw PeerLostError(to_, "netsim: rank " + std::to_string(to_) + " of epoch " +
                                   std::to_string(ep_->epoch) + " is lost");
    if (!comm_) {  // rendezvous: the data leaves once the handshake is done
      rendezvous(*net_, *ep_, me_, to_, tag_, posted_s_, deadline);
      comm_ = net_->start_flow(ep_->hosts[me_], ep_->hosts[to_], out_.wire_bytes, ep_->lane);
    }
    done_ = true;
    transfer(*net_, *ep_, me_, to_, out_.wire_bytes, comm_, deadline);
    deliver(*ep_, me_, to_, tag_, out_);
    return receive(*net_, *ep_, me_, from_, tag_, into_, deadline);
  }

 private:
  std::shared_ptr<SimNetwork::State> net_;
  std::shared_ptr<EpochState> ep_;
  int me_, to_;
  Payload out_;
  int from_;
  std::span<std::byte> into_;
  Tag tag_;
  double posted_s_;
  bool peer_ok_ = false;
  sg4::CommPtr comm_;
  bool done_ = false;
};

class SimTransport final : public Transport {
 public:
  SimTransport(std::shared_ptr<SimNetwork::State> net, std::shared_ptr<EpochState> ep, int rank)
      : net_(std::move(net)), ep_(std::move(ep)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ep_->members.size()); }
  std::uint64_t epoch() const override { return ep_->epoch; }

  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    pay_deferred_time();
    check_peer(to);
    const double now_s = sg4::Engine::get_clock(), deadline = now_s + timeout_s;
    rendezvous(*net_, *ep_, rank_, to, tag, now_s, deadline);
    auto comm = net_->start_flow(ep_->hosts[rank_], ep_->hosts[to], msg.wire_bytes, ep_->lane);
    transfer(*net_, *ep_, rank_, to, msg.wire_bytes, comm, deadline);
    deliver(*ep_, rank_, to, tag, msg);
  }

  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override {
    pay_deferred_time();
    check_peer(from);
    post_receive(*net_, *ep_, rank_, from, tag);
    return receive(*net_, *ep_, rank_, from, tag, into, sg4::Engine::get_clock() + timeout_s);
  }

  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    pay_deferred_time();
    check_peer(to);
    check_peer(from);
    return std::make_unique<SimExchange>(net_, ep_, rank_, to, out, from, into, tag);
  }

  void abort() override {
    pay_deferred_time();
    if (ep_->aborted[rank_]) return;
    ep_->aborted[rank_] = true;
    ep_->notify_all();
  }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size())
      throw ProtocolError("netsim: rank " + std::to_string(peer) + " outside epoch of size " +
                          std::to_string(size()));
  }

  std::shared_ptr<SimNetwork::State> net_;
  std::shared_ptr<EpochState> ep_;
  int rank_;
};

}  // namespace

SimNetwork::SimNetwork() : state_(std::make_shared<State>()) {}
SimNetwork::~SimNetwork() = default;

void SimNetwork::add_node(std::int64_t node, sg4::Host* host) { state_->hosts[node] = host; }

sg4::Host* SimNetwork::host_of(std::int64_t node) const {
  auto it = state_->hosts.find(node);
  if (it == state_->hosts.end())
    throw ConfigError("netsim: node " + std::to_string(node) + " has no host");
  return it->second;
}

std::unique_ptr<Transport> SimNetwork::connect(const EpochSpec& spec) {
  MERIDIAN_CHECK(spec.rank >= 0 && spec.rank < static_cast<int>(spec.members.size()));
  pay_deferred_time();
  std::shared_ptr<EpochState> ep = state_->epochs[spec.epoch].lock();
  if (!ep) {
    auto fresh = std::make_shared<EpochState>();
    fresh->epoch = spec.epoch;
    fresh->lane = ring_shard_of(spec.epoch);
    fresh->members = spec.members;
    for (auto m : spec.members) {
      fresh->hosts.push_back(host_of(m));
      fresh->inboxes.push_back(std::make_unique<Inbox>());
    }
    fresh->aborted.assign(spec.members.size(), false);
    // host_of() and allocation never yield, but keep the second look cheap and explicit: an
    // epoch must have one state object whoever connects first.
    ep = state_->epochs[spec.epoch].lock();
    if (!ep) {
      ep = fresh;
      state_->epochs[spec.epoch] = ep;
    }
  }
  if (ep->members != spec.members) {
    throw ProtocolError("netsim: epoch " + std::to_string(spec.epoch) +
                        " connected with two different member lists");
  }
  return std::make_unique<SimTransport>(state_, ep, spec.rank);
}

void SimNetwork::node_failed(std::int64_t node) {
  state_->dead.insert(node);
  state_->notify_epochs();
}

void SimNetwork::node_revived(std::int64_t node) { state_->dead.erase(node); }
bool SimNetwork::is_dead(std::int64_t node) const { return state_->dead.count(node) > 0; }
void SimNetwork::set_rendezvous_trips(int trips) {
  MERIDIAN_CHECK(trips >= 0);
  state_->rendezvous_trips = trips;
}
void SimNetwork::set_wan(std::shared_ptr<WanModel> wan) { state_->wan = std::move(wan); }
std::uint64_t SimNetwork::messages() const { return state_->messages; }
std::uint64_t SimNetwork::wire_bytes() const { return state_->wire_bytes; }

}  // namespace meridian::netsim
