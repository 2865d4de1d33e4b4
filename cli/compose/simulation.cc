// Simulate and emulate (simulation.h).
#include "cli/compose/simulation.h"

#include "cli/compose/compose.h"

namespace meridian::compose {

netsim::SimOptions simulation_options(netsim::Scenario& sc,
                                      const netsim::SlowStepFn& on_slow_step) {
  netsim::SimOptions o;
  o.worker = netsim::resolve_worker(sc, on_slow_step);
  o.make_node = make_node;
  return o;
}

}  // namespace meridian::compose
