// The composition layer (ARCHITECTURE.md "Layers"): maps a resolved run file and a mode to seams a
// node runs on (Runtime, Store, TransportFactory, InnerWorker, DilocoOptions) and builds the
// node. make_node is the one place a DilocoNode is constructed; the modes (the simulator's
// driver, the thread emulation, a real process) assemble the parts and ask it for the node.
// The concrete backends of each mode are named here and in the files beside this one:
//   simulate / emulate  simulation.h  (netsim's simulated world; the worker kind: modeled, torch)
//   real                real_node.h   (ThreadRuntime; TCP or etcd store; Gloo or NCCL; TorchWorker)
//   threads             thread_world.h (`train-diloco`: ThreadRuntime, MemoryStore, in-process)
#pragma once

#include <memory>

#include "engine/core/diloco/diloco.h"

namespace meridian::compose {

// A NodeFactory (engine/core/diloco/diloco.h): builds the node on `parts` with `options`.
std::unique_ptr<DilocoNode> make_node(const NodeParts& parts, DilocoOptions options);

}  // namespace meridian::compose
