// Simulate and emulate: the options of netsim's run for a run file — the worker kind it names
// (modeled, or torch when the trainer is built: netsim/worker_plugin.h's registry) and the node
// factory (compose.h). The simulated Runtime, Store and Transport are netsim's, one per host.
#pragma once

#include <string>

#include "netsim/simulation.h"

namespace meridian::compose {

// `sc` may be adjusted by its worker kind (netsim::resolve_worker). `on_slow_step` is told each
// slow preparation step (e.g. tokenizing a corpus) so that a command can say why it waits.
netsim::SimOptions simulation_options(netsim::Scenario& sc,
                                      const netsim::SlowStepFn& on_slow_step = {});

}  // namespace meridian::compose
