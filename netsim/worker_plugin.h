// Who computes a simulated node's inner steps: the scenario's `worker:` key. `modeled` (default)
// is netsim's ModeledWorker (phantom buffers); other kinds (`torch`: cli/emulation, real
// LibTorch training) are registered by libraries linked into the executable. Not a worker itself:
// only the seam through which simulation.cc makes workers and reports outer steps to them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/diloco/diloco.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/events/json.h"
#include "engine/core/inner_worker.h"
#include "engine/core/runtime.h"
#include "netsim/scenario.h"

namespace meridian::netsim {

// What a worker factory knows about the node it makes a worker for.
struct NodeWorkerContext {
  std::int64_t node = -1;      // unique node id (never reused)
  int slot = 0;                // host slot (scenario order); a rejoining host keeps its slot
  int slots = 1;               // number of host slots in the scenario
  Runtime* runtime = nullptr;  // the node's simulated Runtime (clock, compute_s)
  std::shared_ptr<const double> speed_factor;  // read at each inner-step batch (churn `slow`)
};

struct WorkerPlugin {
  std::string kind = "modeled";
  std::string mode = "simulate";  // the `config` event's mode (emulate for real training)
  JsonObject config;              // echoed as config.config.trainer (the resolved settings)
  // SimGrid configuration items ("contexts/stack-size:65536") set before the platform loads.
  std::vector<std::string> simgrid_config;
  // Makes node `ctx.node`'s worker in its actor (a joiner's before its recovery). Empty: the
  // ModeledWorker.
  std::function<std::unique_ptr<InnerWorker>(const NodeWorkerContext& ctx)> make_worker;
  // Called in the node's actor after every applied outer step (before the checkpoint), e.g. to
  // evaluate the outer parameters and emit events on `sink` at the node's simulated time.
  std::function<void(const NodeWorkerContext& ctx, InnerWorker& worker, const OuterStepView& v,
                     EventSink& sink)>
      after_outer_step;
};

// Makes the plugin of one kind for a scenario; may complete the scenario (e.g. the model shapes
// from the real model). Throws ConfigError naming the scenario file and key for bad settings.
// `on_slow_step` is told of each slow preparation step before it starts (e.g. building a
// corpus cache on the first run), so that the command can say why it is quiet.
using SlowStepFn = std::function<void(const std::string& step)>;
using WorkerKindFactory = std::function<WorkerPlugin(Scenario& sc, const SlowStepFn& on_slow_step)>;

// Registers a kind (static initialisation of a file linked into the executable). Returns true.
bool register_worker_kind(const std::string& kind, WorkerKindFactory factory);

// The plugin for `sc.worker`: the default for "modeled", else the registered factory's. Throws
// ConfigError naming the file when the kind is not part of this build (e.g. `worker: torch`
// without LibTorch).
WorkerPlugin resolve_worker(Scenario& sc, const SlowStepFn& on_slow_step = {});

}  // namespace meridian::netsim
