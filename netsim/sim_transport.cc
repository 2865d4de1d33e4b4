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
#include <utility>
#include <vector>

#include "engine/core/diloco/diloco.h"
#include "engine/core/error.h"
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

// Phantom ring rounds being timed whole (SimTransport::run_phantom_rings): what each rank brought
// to them, and once every rank's sends are timed, when each rank's rounds start and end.
// Per round b and rank r, index b * n + r.
struct PhantomRounds {
  PhantomRounds(int n, std::size_t rounds)
      : n(n),
        rounds(rounds),
        entry_s(n),
        span_s(rounds * n),
        first_s(n),
        transfers(rounds * n),
        send_bytes(rounds * n),
        recv_bytes(rounds * n),
        rendezvous_s(n),
        flows(n) {}
  int n;
  std::size_t rounds;
  int entered = 0;              // ranks that entered
  int timed = 0;                // ranks whose sends are timed
  int left = 0;                 // ranks that returned (or gave up)
  std::vector<double> entry_s;  // when each rank entered
  std::vector<double> span_s;   // the time a rank's sends of a round take, in all
  std::vector<double> first_s;  // of its first round's first message, timed alone (per rank)
  std::vector<std::uint64_t> transfers, send_bytes, recv_bytes;
  // Rendezvous: how long after its successor posts a receive each rank's send may leave (the
  // receiver's control trips, SimNetwork::set_rendezvous_trips); < 0 when eager (a send leaves
  // when posted, whatever the successor does).
  std::vector<double> rendezvous_s;
  std::vector<double> start_s, end_s;  // each round's, per rank (empty until all are timed)
  std::vector<sg4::CommPtr> flows;     // each rank's flow in progress, if any
  WaitList waiters;
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
  // Phantom ring rounds in progress, by (outer step, first round's tag).
  std::map<std::pair<std::uint64_t, Tag>, std::shared_ptr<PhantomRounds>> rounds;
  int lost = -1;  // the first rank found dead or aborted (-1: none)

  void notify_all() {
    for (auto& in : inboxes) in->waiters.notify_all();
    posts.notify_all();
    for (auto& [key, round] : rounds) round->waiters.notify_all();
  }
  // A rank is dead or gave up: every rank fails the epoch's rounds now, as message by message
  // it would at its next message (phantom rounds' flows stop where they are).
  void mark_lost(int rank) {
    if (lost >= 0) return;
    lost = rank;
    for (auto& [key, p] : rounds)
      for (sg4::CommPtr& flow : p->flows)
        if (flow) std::exchange(flow, nullptr)->cancel();
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
  bool merge_phantom_rings = false;
  std::uint64_t phantom_segments = 1;  // flows per rank and round when merged
  std::shared_ptr<WanModel> wan;
  std::map<std::pair<sg4::Host*, sg4::Host*>, double> latency_s;  // one way, per route

  // Starts a transfer; ended() must follow it, whatever becomes of it.
  // A flow may stand for `messages` messages sent back to back: the WAN model charges their
  // latencies in the flow (WanModel::start); without it the caller first waits
  // unpaid_latency_s(), the latency of all but one.
  sg4::CommPtr start_flow(sg4::Host* from, sg4::Host* to, std::uint64_t bytes, int lane,
                          std::uint64_t messages = 1, std::uint64_t first_message_bytes = 0) {
    return wan ? wan->start(from, to, bytes, lane, messages, first_message_bytes)
               : sg4::Comm::sendto_async(from, to, bytes);
  }
  double unpaid_latency_s(sg4::Host* from, sg4::Host* to, std::uint64_t messages) {
    return wan || messages <= 1 ? 0
                                : static_cast<double>(messages - 1) * one_way_latency_s(from, to);
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

// PeerLostError naming rank `rank` of the epoch and its node: "... `why`".
PeerLostError peer_lost(const EpochState& ep, int rank, const std::string& why) {
  return PeerLostError(rank, "netsim: rank " + std::to_string(rank) + " (node " +
                                 std::to_string(ep.members[rank]) + ") of epoch " +
                                 std::to_string(ep.epoch) + " " + why);
}

// Waits for `comm` until `deadline_s`; false when it has not completed by then (a network or
// host failure throws as SimGrid does). A wait of zero is never asked of SimGrid: 3.32 then
// raises its TimeoutException in kernel mode, where it escapes every handler of it as another
// exception ("simgrid::TimeoutException raised in kernel mode"), ending the simulation.
bool wait_comm_until(const sg4::CommPtr& comm, double deadline_s) {
  const double left_s = deadline_s - sg4::Engine::get_clock();
  if (left_s <= 0) return comm->test();
  try {
    comm->wait_for(left_s);
    return true;
  } catch (const simgrid::TimeoutException&) {
    return false;
  }
}

// Runs one transfer of `wire_bytes` from `from` to `to`; throws on failure or timeout.
void transfer(SimNetwork::State& net, EpochState& ep, int from, int to, std::uint64_t wire_bytes,
              sg4::CommPtr comm, double deadline_s) {
  struct Ended {  // the connection goes idle however the transfer ends
    SimNetwork::State& net;
    sg4::Host *from, *to;
    int lane;
    ~Ended() { net.ended(from, to, lane); }
  } ended{net, ep.hosts[from], ep.hosts[to], ep.lane};
  try {
    if (!wait_comm_until(comm, deadline_s)) {
      comm->cancel();
      throw TimeoutError("netsim: send to rank " + std::to_string(to) + " of epoch " +
                         std::to_string(ep.epoch) + " timed out");
    }
  } catch (const simgrid::NetworkFailureException&) {
    throw peer_lost(ep, to, "became unreachable during a send");
  } catch (const simgrid::HostFailureException&) {
    throw peer_lost(ep, to, "failed during a send");
  }
  if (net.dead.count(ep.members[to]) || ep.aborted[to])
    throw peer_lost(ep, to, "was lost during a send");
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
  if (gone()) throw peer_lost(ep, to, "was lost before a rendezvous");
  auto it = ep.posted.find(key);
  const double recv_s = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) ep.posted.erase(it);
  const double start_s = std::max(
      sent_s, recv_s + net.rendezvous_trips * net.one_way_latency_s(ep.hosts[me], ep.hosts[to]));
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
      throw peer_lost(ep, from, "is lost");
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

  bool run_phantom_rings(std::span<const PhantomRing> rounds,
                         std::span<PhantomRingTimes> times) override;

  void abort() override {
    // An actor killed with its host unwinds through the ring's abort: it must not wake anyone
    // (its simcalls may not happen, and the waiters it took off the lists would never wake);
    // node_failed() tells the others.
    if (!sg4::this_actor::get_host()->is_on()) return;
    pay_deferred_time();
    if (ep_->aborted[rank_]) return;
    ep_->aborted[rank_] = true;
    ep_->mark_lost(rank_);
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

// Whether round `round` of a run, of `messages` messages per rank, has its first message timed
// alone: the run's first round's, which carries the slow start after the outer step's idle time.
bool first_message_alone(std::size_t round, std::uint64_t messages) {
  return round == 0 && messages > 1;
}

// When each rank's phantom ring rounds start and end, message by message
// (engine/core/collective/ring_allreduce.cc with one piece per share): within a round, rank r's
// transfer t + 1 starts once its transfer t has completed both ways. Rank r posts transfer t
// (its receive with it) at T_r(t); its send leaves at S_r(t) = T_r(t) when eager, or with a
// rendezvous once its successor's receive is posted and the control trips have crossed,
// S_r(t) = max(T_r(t), T_{r+1}(t) + R_r) (R_r: the trips' one-way latencies, as `rendezvous`
// charges a message). With d_r the time one of rank r's sends takes and T_r(0) the round's
// start, T_r(t + 1) = max(S_r(t) + d_r, S_{r-1}(t) + d_{r-1}), and the round ends at
// T_r(transfers); the next round starts then. d_r is rank r's sends of the round timed
// together, divided by the transfers (they cross the same route back to back; a rendezvous's
// wait is shorter than an RTO, so it restarts no slow start).
void ring_schedule(PhantomRounds& p) {
  const std::size_t n = static_cast<std::size_t>(p.n);
  p.start_s.assign(p.rounds * n, 0);
  p.end_s.assign(p.rounds * n, 0);
  // d_first: each rank's first message of a round, d_rest: each of its others.
  std::vector<double> d_first(n), d_rest(n), t(p.entry_s), next(n), leave(n);
  for (std::size_t b = 0; b < p.rounds; ++b) {
    const std::size_t base = b * n;
    const std::uint64_t k = p.transfers[base];
    std::copy(t.begin(), t.end(), p.start_s.begin() + static_cast<std::ptrdiff_t>(base));
    // The first round's first message was timed alone (a slow start, after the outer step's
    // idle time, makes it the longest); the others share the rest alike.
    const bool lone = first_message_alone(b, k);
    for (std::size_t i = 0; i < n; ++i) {
      d_first[i] = lone ? p.first_s[i] : p.span_s[base + i] / static_cast<double>(k);
      d_rest[i] = lone ? (p.span_s[i] - p.first_s[i]) / static_cast<double>(k - 1) : d_first[i];
    }
    for (std::uint64_t m = 0; m < k; ++m) {
      const std::vector<double>& d = m == 0 ? d_first : d_rest;
      for (std::size_t i = 0; i < n; ++i)
        leave[i] = p.rendezvous_s[i] < 0
                       ? t[i]
                       : std::max(t[i], t[i + 1 == n ? 0 : i + 1] + p.rendezvous_s[i]);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t prev = i == 0 ? n - 1 : i - 1;
        next[i] = std::max(leave[i] + d[i], leave[prev] + d[prev]);
      }
      t.swap(next);
    }
    std::copy(t.begin(), t.end(), p.end_s.begin() + static_cast<std::ptrdiff_t>(base));
  }
}

// A rank's connection to its successor while its phantom rounds run: busy until the rank's last
// message would have ended (run_phantom_rings returns), however it returns.
struct PhantomConnection {
  SimNetwork::State& net;
  sg4::Host *from, *to;
  int lane;
  sg4::CommPtr& flow;  // in flight, if any (EpochState::mark_lost may cancel it)
  ~PhantomConnection() {
    if (flow) std::exchange(flow, nullptr)->cancel();
    net.ended(from, to, lane);
  }
};

// Times rank `rank`'s sends of `rounds` to its successor `to` for run_phantom_rings (p's
// first_s and span_s) on `conn`, as one flow per run of messages, each bounded by
// `entry_s + bound_s`; throws as a message-level send would (`what` prefixes the messages).
void time_phantom_sends(SimNetwork::State& net, EpochState& ep, PhantomRounds& p,
                        PhantomConnection& conn, int rank, int to,
                        std::span<const PhantomRing> rounds, double entry_s, double bound_s,
                        const std::string& what) {
  auto gone = [&] { return ep.lost >= 0; };
  sg4::Host* me = ep.hosts[rank];
  sg4::Host* next = ep.hosts[to];
  bool first = true;
  for (std::size_t b = 0; b < rounds.size(); ++b) {
    const PhantomRing& round = rounds[b];
    const double round_start_s = sg4::Engine::get_clock();
    const std::uint64_t k = round.transfers,
                        segments = std::min<std::uint64_t>(k, net.phantom_segments);
    const auto bytes_to = [&](std::uint64_t m) {  // the bytes of messages [0, m)
      return static_cast<std::uint64_t>(static_cast<long double>(round.send_bytes) * m / k);
    };
    // Runs of messages [edge[j], edge[j + 1]): the first round's first message alone (its slow
    // start), then `segments` runs of the rest.
    std::vector<std::uint64_t> edge;
    const std::uint64_t lone = first_message_alone(b, k) ? 1 : 0;
    if (lone) edge.push_back(0);
    for (std::uint64_t j = 0; j < segments; ++j) edge.push_back(lone + (k - lone) * j / segments);
    edge.push_back(k);
    edge.erase(std::unique(edge.begin(), edge.end()), edge.end());
    // With a rendezvous, message by message each send waits about R for its successor's
    // receive, so the round's messages spread over a longer time than its flows take back to
    // back: a run of m messages first waits m R (the connection kept busy: each real wait is
    // shorter than an RTO and restarts no slow start), so that the flows sample the bandwidth
    // and loss processes over the time the messages cross. The waits are not the sends' time.
    double rendezvous_waited_s = 0;
    for (std::size_t j = 0; j + 1 < edge.size(); ++j) {
      const std::uint64_t m0 = edge[j], m1 = edge[j + 1];
      if (const double r_s = p.rendezvous_s[rank]; r_s > 0) {
        const double wait_s = r_s * static_cast<double>(m1 - m0);
        p.waiters.wait_until(sg4::Engine::get_clock() + wait_s, gone);
        if (gone()) throw peer_lost(ep, ep.lost, "is lost");
        rendezvous_waited_s += wait_s;
      }
      if (!first) net.ended(me, next, ep.lane);  // the next message leaves at once
      if (const double wait_s = net.unpaid_latency_s(me, next, m1 - m0); wait_s > 0) {
        const double until_s = sg4::Engine::get_clock() + wait_s;
        p.waiters.wait_until(until_s, gone);
        if (gone()) throw peer_lost(ep, ep.lost, "is lost");
      }
      const sg4::CommPtr flow = net.start_flow(me, next, bytes_to(m1) - bytes_to(m0), ep.lane,
                                               m1 - m0, first ? round.first_send_bytes : 0);
      conn.flow = flow;
      first = false;
      try {
        if (!wait_comm_until(flow, entry_s + bound_s))
          throw TimeoutError(what + "rank " + std::to_string(rank) + "'s sends to rank " +
                             std::to_string(to) + " took longer than " + std::to_string(bound_s) +
                             " s");
        conn.flow = nullptr;
      } catch (const simgrid::CancelException&) {  // another rank was lost (mark_lost)
        conn.flow = nullptr;
      } catch (const simgrid::NetworkFailureException&) {
        conn.flow = nullptr;
        ep.mark_lost(to);
        throw peer_lost(ep, to, "became unreachable during a send");
      } catch (const simgrid::HostFailureException&) {
        conn.flow = nullptr;
        ep.mark_lost(to);
        throw peer_lost(ep, to, "failed during a send");
      }
      if (gone()) throw peer_lost(ep, ep.lost, "is lost");
      if (lone && j == 0)
        p.first_s[rank] = sg4::Engine::get_clock() - round_start_s - rendezvous_waited_s;
    }
    p.span_s[b * static_cast<std::size_t>(p.n) + static_cast<std::size_t>(rank)] =
        sg4::Engine::get_clock() - round_start_s - rendezvous_waited_s;
  }
}

// The rounds are timed whole: each rank sends each round's bytes to its successor as one flow,
// or a few back to back (SimNetwork::set_merge_phantom_rings: each standing for a run of
// consecutive messages), with the messages' latencies stepped along the path's changes and the
// WAN model's slow start on the first message only (message by message the window is open from
// the second on; the first round's first message is timed alone, as it carries the slow start
// after the outer step's idle time), and goes on to the next round's at once: its sends sample the
// network as the critical rank's do message by message (it never waits). Once every rank's sends
// are timed, the message-level schedule (ring_schedule) gives when each rank's rounds start and
// end; each returns at its last round's end. Exact when the network does not change within a round
// and the ring's flows share no link (each node's split-duplex access link carries its send one way
// and its receive the other): a message-level send then takes the same time at every transfer.
// Measured against message level: netsim/README.md, "Aggregation".
bool SimTransport::run_phantom_rings(std::span<const PhantomRing> rounds,
                                     std::span<PhantomRingTimes> times) {
  MERIDIAN_CHECK_EQ(rounds.size(), times.size());
  if (!net_->merge_phantom_rings || rounds.empty()) return false;
  for (const PhantomRing& round : rounds)
    if (round.transfers == 0) return false;
  pay_deferred_time();
  EpochState& ep = *ep_;
  const int n = size(), to = (rank_ + 1) % n, from = (rank_ + n - 1) % n;
  const std::size_t count = rounds.size();
  const double entry_s = sg4::Engine::get_clock();
  const std::string what = "netsim: ring rounds of epoch " + std::to_string(ep.epoch) + ": ";
  auto gone = [&] { return ep.lost >= 0; };
  for (int peer : {to, from})
    if (net_->dead.count(ep.members[peer]) || ep.aborted[peer]) ep.mark_lost(peer);
  if (gone()) throw peer_lost(ep, ep.lost, "is lost");

  const std::pair<std::uint64_t, Tag> key{rounds[0].outer_step, rounds[0].tag};
  auto& slot = ep.rounds[key];
  if (!slot) slot = std::make_shared<PhantomRounds>(n, count);
  const std::shared_ptr<PhantomRounds> p = slot;
  struct Leave {  // the rounds are forgotten once every rank has left them, however
    EpochState& ep;
    std::pair<std::uint64_t, Tag> key;
    PhantomRounds& p;
    ~Leave() {
      if (++p.left == p.n) ep.rounds.erase(key);
    }
  } leave{ep, key, *p};
  if (p->rounds != count)
    throw ProtocolError(what + "rank " + std::to_string(rank_) + " brings " +
                            std::to_string(count) + " rounds, another rank " +
                            std::to_string(p->rounds),
                        rank_);
  p->entry_s[rank_] = entry_s;
  p->rendezvous_s[rank_] =
      net_->rendezvous_trips == 0
          ? -1.0
          : net_->rendezvous_trips * net_->one_way_latency_s(ep.hosts[rank_], ep.hosts[to]);
  double bound_s = 0;  // every transfer within its timeout
  for (std::size_t b = 0; b < count; ++b) {
    const std::size_t i = b * static_cast<std::size_t>(n) + static_cast<std::size_t>(rank_);
    p->transfers[i] = rounds[b].transfers;
    p->send_bytes[i] = rounds[b].send_bytes;
    p->recv_bytes[i] = rounds[b].recv_bytes;
    bound_s += static_cast<double>(rounds[b].transfers) *
               (rounds[b].timeout_s + std::max(0.0, p->rendezvous_s[rank_]));
  }
  if (++p->entered == n) p->waiters.notify_all();

  PhantomConnection conn{*net_, ep.hosts[rank_], ep.hosts[to], ep.lane, p->flows[rank_]};
  time_phantom_sends(*net_, ep, *p, conn, rank_, to, rounds, entry_s, bound_s, what);
  if (++p->timed == n) {
    for (std::size_t b = 0; b < count; ++b)
      for (int r = 0; r < n; ++r)
        if (const std::size_t i = b * static_cast<std::size_t>(n);
            p->transfers[i + r] != p->transfers[i])
          throw ProtocolError(what + "round " + std::to_string(b) + ": rank " + std::to_string(r) +
                                  " runs " + std::to_string(p->transfers[i + r]) +
                                  " transfers, rank 0 " + std::to_string(p->transfers[i]),
                              r);
    ring_schedule(*p);
    p->waiters.notify_all();
  }
  // Everyone enters within a transfer's timeout of this rank, as every message-level wait must
  // see its message; then the others' sends are bounded like this rank's.
  if (!p->waiters.wait_until(entry_s + rounds[0].timeout_s,
                             [&] { return p->entered == n || gone(); }))
    throw TimeoutError(what + std::to_string(n - p->entered) + " of " + std::to_string(n) +
                       " ranks did not join within " + std::to_string(rounds[0].timeout_s) + " s");
  if (gone()) throw peer_lost(ep, ep.lost, "is lost");
  const double last_entry_s = *std::max_element(p->entry_s.begin(), p->entry_s.end());
  if (!p->waiters.wait_until(last_entry_s + bound_s, [&] { return !p->end_s.empty() || gone(); }))
    throw TimeoutError(what + "the other ranks' sends took longer than " + std::to_string(bound_s) +
                       " s");
  if (gone()) throw peer_lost(ep, ep.lost, "is lost");
  const std::size_t last =
      (count - 1) * static_cast<std::size_t>(n) + static_cast<std::size_t>(rank_);
  // Until this rank's last message would have arrived (a rank lost meanwhile fails it, as its
  // messages would still be on their way round the ring).
  p->waiters.wait_until(p->end_s[last], gone);
  if (gone()) throw peer_lost(ep, ep.lost, "is lost");
  for (std::size_t b = 0; b < count; ++b) {
    const std::size_t base = b * static_cast<std::size_t>(n);
    if (p->send_bytes[base + from] != rounds[b].recv_bytes)
      throw ProtocolError(what + "round " + std::to_string(b) + ": rank " + std::to_string(from) +
                              " sent " + std::to_string(p->send_bytes[base + from]) +
                              " wire bytes, rank " + std::to_string(rank_) + " expected " +
                              std::to_string(rounds[b].recv_bytes),
                          from);
    times[b] = {p->start_s[base + rank_], p->end_s[base + rank_]};
    net_->messages += rounds[b].transfers;
    net_->wire_bytes += rounds[b].send_bytes;
  }
  return true;
}

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
  for (auto& [id, weak] : state_->epochs) {
    if (auto ep = weak.lock()) {
      auto it = std::find(ep->members.begin(), ep->members.end(), node);
      if (it != ep->members.end()) ep->mark_lost(static_cast<int>(it - ep->members.begin()));
    }
  }
  state_->notify_epochs();
}

void SimNetwork::node_revived(std::int64_t node) { state_->dead.erase(node); }
bool SimNetwork::is_dead(std::int64_t node) const { return state_->dead.count(node) > 0; }
void SimNetwork::set_rendezvous_trips(int trips) {
  MERIDIAN_CHECK(trips >= 0);
  state_->rendezvous_trips = trips;
}
void SimNetwork::set_wan(std::shared_ptr<WanModel> wan) { state_->wan = std::move(wan); }
void SimNetwork::set_merge_phantom_rings(bool on, int segments) {
  MERIDIAN_CHECK(segments >= 1);
  state_->merge_phantom_rings = on;
  state_->phantom_segments = static_cast<std::uint64_t>(segments);
}
std::uint64_t SimNetwork::messages() const { return state_->messages; }
std::uint64_t SimNetwork::wire_bytes() const { return state_->wire_bytes; }

}  // namespace meridian::netsim
