// The simulator's `worker: torch` kind: every node actor of `meridian sim` trains a real
// TorchWorker on its data shard while the network, the membership and the clock are SimGrid's.
// Not a second simulator and not a launcher: netsim runs the engine's DilocoNode as for modelled
// workers; this only makes the workers and evaluates the outer parameters after each outer step.
#pragma once

#include "netsim/scenario.h"
#include "netsim/worker_plugin.h"

namespace meridian::emulation {

// The plugin for a run file with `worker: torch`: trains `model` with `train` on `data`
// (trainer/run_config.h converts them, errors name the file and the key), as a real run of the
// same file would; checks that the run file's model is the trainer's decoder (untied
// embeddings), and tokenizes the corpus once (cached). Each node
// gets a TorchWorker on shard = its host slot of world = the scenario's host slots (a host that
// rejoins trains its old shard), seeded with run.seed.
//
// Time: an inner-step batch charges the scenario's modelled step time (hardware.step_time_s or
// the FLOPs model, / speed factor) on the node's simulated Runtime, as ModeledWorker does; the
// real computation takes no simulated time. So the timing metrics are those of the modelled
// cluster, runs are deterministic (no wall-clock in the simulated clock), and the losses are real.
//
// After each applied outer step every node emits an `evaluation` event: the validation loss of
// its outer parameters at the modelled time `t`, the tokens the node consumed so far, and the
// parameters' CRC-32C (engine/core/events/SCHEMA.md). The summary puts the steps' mean validation
// loss against the modelled clock and all nodes' tokens (summary.json `val_curve`, `target`).
netsim::WorkerPlugin torch_worker_plugin(netsim::Scenario& sc,
                                         const netsim::SlowStepFn& on_slow_step = {});

// SimGrid actor stacks for LibTorch (raw contexts here: every actor runs on its own stack in
// the one OS thread). Measured with LibTorch 1.13: `tiny` and `small` (bf16 autocast) train with
// 256 KiB stacks and crash with 64 KiB; 64 MiB (SimGrid's default is 8 MiB) leaves a wide margin
// for other kernels and versions. Virtual memory: pages are touched only as deep as used.
inline constexpr int kTorchActorStackKiB = 64 * 1024;

}  // namespace meridian::emulation
