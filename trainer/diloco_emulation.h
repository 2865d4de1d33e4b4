// DiLoCo emulation on one machine: N TorchWorker nodes as threads of one process, running the
// engine's DilocoNode over an in-process world (a transport, a store and a clock the nodes share:
// cli/compose/thread_world.h builds it), with a churn schedule (nodes fail after an outer step;
// joiners arrive and recover live). Not the simulator (no network or time model) and not a
// launcher for real runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/diloco/diloco.h"
#include "engine/core/events/event_sink.h"
#include "trainer/torch_worker.h"

namespace meridian::trainer {

struct EmulationOptions {
  TorchWorkerOptions worker;  // model, data, seed (the data each node reads is the engine's plan)
  DilocoOptions diloco;       // H, outer steps, codec, outer optimizer, timeouts
  int nodes = 4;              // initial members, ids 1..nodes
  // Churn: node id -> the outer step (1-based) after which it fails (store and network cut).
  std::multimap<std::int64_t, std::int64_t> fail_after;  // outer step -> node id
  // Outer steps after which a new node joins (the data plan gives it a member's share).
  std::vector<std::int64_t> join_after;
  // Echoed into the run's `config` event (the first record).
  std::string command;
  std::string version;
};

// One applied outer step, as the first member to report it saw it.
struct EmulatedStep {
  std::int64_t outer_step = 0;  // 1-based
  std::size_t members = 0;
  std::int64_t tokens = 0;      // consumed by every node so far (failed nodes included)
  double train_loss = 0;        // mean over members of their last inner steps' mean loss
  double val_loss = 0;          // of the outer parameters
  double elapsed_s = 0;
  bool fallback = false;
};

struct EmulatedNode {
  std::int64_t id = 0;
  NodeResult result;
};

struct EmulationResult {
  std::vector<EmulatedStep> steps;
  std::vector<EmulatedNode> nodes;
};

// The world the emulated nodes share, from the composition layer: its clock, its store (each
// node sees it through its own cuttable view), its transport, and the node factory.
class EmulationWorld {
 public:
  virtual ~EmulationWorld() = default;
  virtual Runtime& runtime() = 0;
  virtual Store& store() = 0;
  virtual TransportFactory& transports() = 0;
  // From now on `node`'s messages fail and its peers see it as lost (the churn's failure).
  virtual void cut_network(std::int64_t node) = 0;
  virtual std::unique_ptr<DilocoNode> make_node(const NodeParts& parts, DilocoOptions options) = 0;
};

// Checks the options before any work (corpus, threads): positive counts, and a churn schedule
// that names initial nodes (1..nodes) at outer steps inside the run. ConfigError names the
// option as the command line spells it (`--fail NODE@STEP`, `--join STEP`).
void validate_emulation(const EmulationOptions& options);

// Runs to the end (every node finished, left or lost). Emits the run-level `config` record
// first and `run_finished` last (engine/core/events/SCHEMA.md), the nodes' events in between.
// `on_step` is called for each applied outer step (from a node's thread, serialised), e.g. to
// stream a CSV.
EmulationResult run_emulation(EmulationOptions options, EmulationWorld& world, EventSink& events,
                              const std::function<void(const EmulatedStep&)>& on_step = {},
                              std::function<void(const std::string&)> log = {});

}  // namespace meridian::trainer
