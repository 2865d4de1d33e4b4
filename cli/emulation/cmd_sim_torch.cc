// Registers the `worker: torch` kind (cli/emulation) with `meridian sim`: compiled in when
// both the simulator and the trainer are. Not a subcommand of its own.
#include "cli/emulation/torch_sim_worker.h"
#include "netsim/worker_plugin.h"

namespace meridian::cli {
namespace {

const bool kTorchWorkerRegistered =
    netsim::register_worker_kind("torch", &emulation::torch_worker_plugin);

}  // namespace
}  // namespace meridian::cli
