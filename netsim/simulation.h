// The simulated run: builds the platform, the SimGrid backends, one actor per node running the
// engine's DilocoNode (ElasticMesh membership through the simulated store, live recovery of
// joiners, H modelled inner steps, the ring all-reduce, retries, outer step, checkpoint), the
// store on a coordinator host and the churn replay; writes events. One run per process (SimGrid's
// engine is a process-wide singleton).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/worker_plugin.h"

namespace meridian::netsim {

struct SimOptions {
  std::string command;  // echoed in the config record
  // SimGrid's own log threshold (critical, error, warning, info, debug): info lists the blocked
  // actors if the simulation ever deadlocks.
  std::string simgrid_log = "critical";
  // Called as simulated time advances (every few hundred clock advances) with simulated seconds
  // and outer steps done. The caller throttles its drawing.
  std::function<void(double simulated_s, int outer_done, int outer_total)> on_progress;
  // Polled as simulated time advances: a non-empty answer (the reason, e.g. "SIGINT") stops the
  // run at once; it then ends with `run_interrupted` instead of `run_finished`.
  std::function<std::string()> interrupt_reason;
  // The nodes' workers (resolve_worker(sc)); the default is the ModeledWorker. A scenario whose
  // `worker` is not "modeled" needs the plugin of its kind here.
  WorkerPlugin worker;
  // Builds each simulated node on the parts its host provides (cli/compose: compose::make_node,
  // or compose::simulation_options for all of the above). Required.
  NodeFactory make_node;
  // Every lease keepalive is a simulated store call (the message-level reference)
  // instead of being accounted for analytically (netsim/README.md, "Heartbeats"). Events and
  // detection times agree within the tolerance tests/netsim/keepalive_test.cc states.
  bool message_level_keepalives = false;
};

struct SimOutcome {
  double simulated_s = 0.0;
  int outer_steps = 0;
  int outer_steps_planned = 0;
  std::string interrupted;  // the reason the run was stopped early; empty when it ran to its end
  std::uint64_t messages = 0;    // simulated point-to-point transfers
  std::uint64_t wire_bytes = 0;  // their total size
  // Store calls by kind (SimStoreServer::calls): the membership protocol's cost to the simulator.
  std::vector<std::pair<std::string, std::uint64_t>> store_calls;
};

// Runs the scenario to its end; events go to `sink` in emission order (deterministic for a
// given scenario and seed). Throws ConfigError for bad scenarios or traces.
SimOutcome run_simulation(const Scenario& sc, EventSink& sink, const SimOptions& options = {});

}  // namespace meridian::netsim
