// SimStore: the rendezvous / membership store of a simulated run. Its table lives on a
// coordinator host that does not churn; every call made through a node's client costs a request
// and a reply transfer between that node's host and the coordinator, so store traffic takes
// network time: a message of at most kStoreSmallMessageBytes costs its route's latency plus
// bytes / bottleneck bandwidth on the caller's clock (no flow), a larger one is a SimGrid flow.
// Not persistent and not replicated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/store.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

// Store messages up to this size (framing included) are charged analytically, not as flows.
inline constexpr std::uint64_t kStoreSmallMessageBytes = 64 * 1024;

class SimStoreServer {
 public:
  explicit SimStoreServer(simgrid::s4u::Host* coordinator);
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
