// SimStore: the rendezvous / membership store of a simulated run. Its table lives on a
// coordinator host that does not churn; every call made through a node's client costs a request
// and a reply transfer between that node's host and the coordinator, so store traffic takes
// network time: a message of at most kStoreSmallMessageBytes costs its route's latency plus
// bytes / bottleneck bandwidth on the caller's clock (no flow), a larger one is a SimGrid flow.
// Leases end on simulated time (a kernel timer per lease). Keepalives over a client's connection
// (analytic, fixed latency: always stable while its host is on) are accounted for analytically by
// default: the first one of an activity stands for all of them, at the same instants, until the
// activity ends (its host fails, or it returns); the lease then ends one ttl after the last one
// that would have been sent. Not persistent; replication is modelled as a delay only (a quorum
// round trip at the leader), never as members that fail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/store.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

// Store messages up to this size (framing included) are charged analytically, not as flows.
inline constexpr std::uint64_t kStoreSmallMessageBytes = 64 * 1024;

class SimStoreServer {
 public:
  // `analytic_keepalives` false: every keepalive is a call (the message-level reference that
  // tests compare the analytic accounting with).
  // `quorum_rtt_s` > 0: a replicated (etcd-like) store led by the coordinator host; every call
  // but keepalive and watch also waits this long at the leader (a Raft write's commit, or a
  // linearizable read's ReadIndex heartbeat round: netsim/README.md, "A replicated store").
  explicit SimStoreServer(simgrid::s4u::Host* coordinator, bool analytic_keepalives = true,
                          double quorum_rtt_s = 0.0);
  ~SimStoreServer();
  // The Store as seen from a node on `host` (one client per node; cheap).
  std::unique_ptr<Store> client(simgrid::s4u::Host* host);
  // Calls served so far, by kind ("add", "read_prefix", ...; kinds never called are left out):
  // what the membership protocol costs the simulator (results/bench/netsim.md).
  std::vector<std::pair<std::string, std::uint64_t>> calls() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meridian::netsim
