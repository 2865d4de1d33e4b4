// Threads (`meridian train-diloco`): the in-process world of the thread emulation — the thread
// runtime's clock, one in-memory store and the in-process transport, which the nodes (threads of
// this process) share; nodes are built by compose::make_node.
#pragma once

#include <cstdint>

#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "trainer/diloco_emulation.h"

namespace meridian::compose {

class ThreadWorld final : public trainer::EmulationWorld {
 public:
  ThreadWorld() : store_(runtime_) {}
  Runtime& runtime() override { return runtime_; }
  Store& store() override { return store_; }
  TransportFactory& transports() override { return network_; }
  void cut_network(std::int64_t node) override { network_.kill_node(node); }
  std::unique_ptr<DilocoNode> make_node(const NodeParts& parts, DilocoOptions options) override;

 private:
  ThreadRuntime runtime_;
  MemoryStore store_;
  InProcNetwork network_;
};

}  // namespace meridian::compose
