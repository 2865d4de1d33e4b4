// SimNetwork: the engine's TransportFactory over a SimGrid platform. Every message is a
// host-to-host SimGrid communication of its simulated wire size; when the transfer completes the
// message (its real content, if any) is delivered to the receiver's inbox for that epoch. Not a
// packet model: timing is whatever the configured SimGrid network model gives the flow.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>

#include "engine/core/transport.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

class WanModel;

// Delivery semantics: a send returns when its bytes have crossed the network (buffered, like TCP
// with a large socket buffer: the receiver need not have posted its recv). A receive from a peer
// that is dead (node_failed) or has aborted the epoch raises PeerLostError at once; a silent peer
// raises TimeoutError at the deadline. A send to a peer that dies before the transfer ends raises
// PeerLostError. Content is copied when the transfer completes, so the sender's buffer is read
// at arrival time, as a zero-copy pointer hand-off would be.
class SimNetwork final : public TransportFactory {
 public:
  SimNetwork();
  ~SimNetwork() override;

  // Registers a node's host. Must happen before any epoch naming the node is connected.
  void add_node(std::int64_t node, simgrid::s4u::Host* host);
  simgrid::s4u::Host* host_of(std::int64_t node) const;

  std::unique_ptr<Transport> connect(const EpochSpec& spec) override;

  // Called (from an actor) right after a node's host was turned off / on: pending and future
  // receives from it fail with PeerLostError until it is revived.
  void node_failed(std::int64_t node);
  void node_revived(std::int64_t node);
  bool is_dead(std::int64_t node) const;

  // Rendezvous protocol (NetworkSpec::rendezvous_trips): a message's data starts only once its
  // sender has posted it and `trips` one-way control messages, starting when the receiver posted
  // the receive, have crossed the route (receiver-driven, like Gloo's receive-ready notice: a
  // receive posted early has its notice waiting). 0 (default): eager, as described above.
  // With trips > 0 a message's data leaves no earlier than the sender's wait() on it (a send
  // posted ahead of time does its handshake ahead of time, but its transfer starts at the wait).
  void set_rendezvous_trips(int trips);

  // Phantom ring rounds (a timing-only all-reduce's buckets) timed whole, `segments` flows per
  // rank and round, instead of a flow per message (Transport::run_phantom_rings;
  // netsim/README.md, "Aggregation"): one follows the paths' latency changes message by
  // message; more sample a link's bandwidth or loss process at more points of the round. Off:
  // every message is its own flow (the message-level reference). Default off.
  void set_merge_phantom_rings(bool on, int segments = 1);

  // Per-connection TCP bounds and slow start for every transfer (netsim/wan.h); without one, a
  // transfer is a plain SimGrid flow.
  void set_wan(std::shared_ptr<WanModel> wan);

  // Totals over the run (all epochs).
  std::uint64_t messages() const;
  std::uint64_t wire_bytes() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meridian::netsim
