// In-process transport: ranks are threads of one process exchanging messages through shared
// mailboxes. For tests and single-machine studies; every wait has a timeout. Not a shared-memory
// fast path for production runs.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/core/transport.h"

namespace meridian {
namespace detail {
struct InProcHubState;  // mailboxes and liveness of one epoch (inproc_transport.cc)
}  // namespace detail

// A hub of `world` endpoints for one epoch. Thread-safe. Endpoints keep the hub's state alive,
// so the hub object may be destroyed before them; a destroyed endpoint counts as a closed peer.
class InProcHub {
 public:
  InProcHub(int world, std::uint64_t epoch);
  ~InProcHub();
  // The endpoint of `rank`. Each rank's endpoint is taken once.
  std::unique_ptr<Transport> endpoint(int rank);
  // Marks `rank` dead: its peers' pending and future operations with it raise PeerLostError.
  void kill(int rank);

 private:
  std::shared_ptr<detail::InProcHubState> state_;
};

// A TransportFactory over in-process hubs: the members of an epoch that call connect() with the
// same EpochSpec meet in one hub. kill_node() makes a node's endpoints dead in every epoch
// (current and future), as a crash would. Thread-safe. Connecting never waits for the other
// members (messages wait in mailboxes), so connect() cannot time out.
class InProcNetwork final : public TransportFactory {
 public:
  InProcNetwork();
  ~InProcNetwork() override;
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override;
  void kill_node(std::int64_t node_id);
  // Undoes kill_node for a node id that comes back (tests of rejoin use fresh ids instead).
  void revive_node(std::int64_t node_id);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace meridian
