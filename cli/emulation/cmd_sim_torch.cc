// Registers the `worker: torch` kind (trainer/emulation) with `meridian sim`: compiled in when
// both the simulator and the trainer are. Not a subcommand of its own.
#include "netsim/worker_plugin.h"
#include "trainer/emulation/torch_sim_worker.h"

namespace meridian::cli {
namespace {

const bool kTorchWorkerRegistered =
    netsim::register_worker_kind("torch", &trainer::torch_worker_plugin);

}  // namespace
}  // namespace meridian::cli
