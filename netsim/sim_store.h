// SimStore: the rendezvous / membership store of a simulated run. Its table lives on a
// coordinator host that does not churn; every call made through a node's client costs a request
// and a reply transfer between that node's host and the coordinator, so store traffic takes
// network time. Not persistent and not replicated.
#pragma once

#include <memory>

#include "engine/store.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

class SimStoreServer {
 public:
  explicit SimStoreServer(simgrid::s4u::Host* coordinator);
  ~SimStoreServer();
  // The Store as seen from a node on `host` (one client per node; cheap).
  std::unique_ptr<Store> client(simgrid::s4u::Host* host);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meridian::netsim
