// The simulated run (see simulation.h): every node actor runs the engine's DilocoNode on the
// simulated backends (membership, recovery and the ring all-reduce are the engine's own code);
// the churn controller replays the trace against SimGrid's hosts.
#include "netsim/simulation.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <simgrid/s4u.hpp>

// After s4u.hpp (its own block, so include sorting keeps it there): it needs SimGrid's macros.
#include <simgrid/version.h>

#include "engine/core/codec/codec.h"
#include "engine/core/diloco/diloco.h"
#include "engine/core/error.h"
#include "engine/core/events/config_record.h"
#include "netsim/churn.h"
#include "netsim/modeled_worker.h"
#include "netsim/platform.h"
#include "netsim/sim_runtime.h"
#include "netsim/sim_store.h"
#include "netsim/sim_transport.h"
#include "netsim/wait_list.h"
#include "netsim/wan.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();

// The run's progress as the churn controller sees it: outer steps applied by some node (for
// step-based churn events) and whether the run is over. Actors run cooperatively in one OS
// thread and nothing here yields except the wait, so no lock is needed.
class Progress {
 public:
  explicit Progress(int inner_steps) : inner_steps_(inner_steps) {}

  // The churn controller waits here: until `time_s`, until progress reaches `inner_step`, or
  // until the run ends (the churn actor is a daemon: it ends with the last node).
  void wait_for_event(double time_s, std::int64_t inner_step) {
    auto due = [&] {
      return inner_step >= 0 ? std::int64_t(applied_) * inner_steps_ >= inner_step
                             : sg4::Engine::get_clock() >= time_s;
    };
    waiters_.wait_until(inner_step >= 0 ? kForever : time_s, due);
  }

  // A node applied outer step `outer_step`.
  void outer_step_applied(int outer_step) {
    if (outer_step + 1 <= applied_) return;
    applied_ = outer_step + 1;
    waiters_.notify_all();
  }

 private:
  const int inner_steps_;
  WaitList waiters_;
  int applied_ = 0;  // outer steps applied by some node
};

// Passes events through and remembers the highest outer step completed (the engine's nodes end
// the run, so the simulator learns the count from their events).
class OuterStepCounter final : public EventSink {
 public:
  explicit OuterStepCounter(EventSink& inner) : inner_(inner) {}
  void emit(const Event& e) override {
    if (e.type == "outer_step") {
      const std::string body = e.fields.str();
      const auto pos = body.find("\"outer_step\":");
      if (pos != std::string::npos)
        max_step_ = std::max(max_step_, std::atoi(body.c_str() + pos + 13));
    }
    inner_.emit(e);
  }
  int outer_steps() const { return max_step_ + 1; }

 private:
  EventSink& inner_;
  int max_step_ = -1;
};

// Everything the node actors share.
struct World {
  World(const Scenario& s, EventSink& k, Platform p) : sc(s), sink(k), pf(std::move(p)) {
    net.set_rendezvous_trips(s.network.rendezvous_trips);
  }
  const Scenario& sc;
  EventSink& sink;
  Platform pf;
  SimNetwork net;
  std::unique_ptr<SimStoreServer> store;
  std::unique_ptr<Progress> progress;
  std::vector<std::shared_ptr<double>> speed;  // per host slot
  std::map<int, std::int64_t> node_on_slot;    // running node id per slot
  std::int64_t next_node_id = 0;
  std::vector<std::uint64_t> buckets;
  int lanes = 1;             // simulated ring flows per node
  int lane_scale = 1;        // local ranks folded into one flow
  DilocoOptions options;     // the run file's, before what each node adds (engine_node_main)
  std::exception_ptr error;  // first unexpected error of any actor
  int initial_world = 0;     // nodes running at t = 0
  WorkerPlugin plugin;       // makes the nodes' workers (default: ModeledWorker)
  NodeFactory make_node;     // builds each node (cli/compose)

  void emit(std::int64_t node, const char* type, JsonObject f) {
    sink.emit(Event{sg4::Engine::get_clock(), node, type, std::move(f)});
  }
};

// Runs an actor body; an unexpected error ends the whole simulation and is rethrown by
// run_simulation (ForcefulKillException is not a std::exception and passes through).
template <typename F>
void guarded(World& w, F&& body) {
  try {
    body();
  } catch (const std::exception&) {
    if (!w.error) w.error = std::current_exception();
    sg4::Actor::kill_all();
  }
}

// A node: the engine's DilocoNode with ElasticMesh membership (heartbeats through the simulated
// store), the engine's live recovery and its ring all-reduce. Aggregation folds the L local
// ranks into one ring (local_ranks 1, L× window and chunk).
void node_main(World& w, std::int64_t me, int slot, bool initial, int initial_world) {
  SimRuntime rt(w.pf.hosts[slot]);
  const NodeWorkerContext ctx{me, slot, static_cast<int>(w.pf.hosts.size()), &rt, w.speed[slot]};
  std::unique_ptr<InnerWorker> owned_worker =
      w.plugin.make_worker ? w.plugin.make_worker(ctx)
                           : std::make_unique<ModeledWorker>(w.sc, rt, w.speed[slot]);
  InnerWorker& worker = *owned_worker;
  auto store = w.store->client(w.pf.hosts[slot]);
  DilocoOptions o = w.options;
  // What only the simulator knows: the L local ranks folded into one ring when aggregated (L×
  // chunks), the host's name for node_started, the initial world.
  o.local_ranks = w.lanes;
  o.max_chunk_bytes *= w.lane_scale;
  o.recovery.chunk_bytes *= w.lane_scale;
  // A source serves its joiners only after the outer step's blocking checkpoint (below, in
  // on_outer_step), while a joiner asks as soon as the record names it: the first reply can come
  // checkpoint_s late on top of any transfer's own bound.
  o.recovery.timeout_s += std::max(0.0, w.sc.diloco.checkpoint_s);
  o.mesh.initial_world = initial_world;
  o.mesh.host = w.pf.names[slot];
  // After every applied outer step: progress for step-based churn, then the blocking checkpoint
  // (before the next inner steps).
  o.on_outer_step = [&w, &rt, &worker, &ctx, me](const OuterStepView& v) {
    w.progress->outer_step_applied(static_cast<int>(v.outer_step));
    if (w.plugin.after_outer_step) w.plugin.after_outer_step(ctx, worker, v, w.sink);
    if (w.sc.diloco.checkpoint_s <= 0) return;
    const double t_ck = rt.now_s();
    rt.compute_s(w.sc.diloco.checkpoint_s);
    JsonObject f;
    f.add("outer_step", v.outer_step)
        .add("bytes", std::uint64_t(worker.parameter_count()) * 4 * w.sc.recovery.state_copies)
        .add("elapsed_s", rt.now_s() - t_ck);
    w.emit(me, "checkpoint", f);
  };
  const std::unique_ptr<DilocoNode> node = w.make_node({worker, *store, w.net, rt, w.sink}, o);
  node->run(initial, me);
}

std::int64_t start_node(World& w, int slot, bool initial) {
  const std::int64_t id = w.next_node_id++;
  w.node_on_slot[slot] = id;
  w.net.add_node(id, w.pf.hosts[slot]);
  sg4::Actor::create("node" + std::to_string(id), w.pf.hosts[slot], [&w, id, slot, initial] {
    guarded(w, [&] { node_main(w, id, slot, initial, w.initial_world); });
  });
  return id;
}

void replay_churn(World& w, const ChurnTrace& trace) {
  for (const auto& e : trace.events) {
    if (trace.by_step)
      w.progress->wait_for_event(0, static_cast<std::int64_t>(e.at));
    else
      w.progress->wait_for_event(e.at, -1);
    const int slot = w.pf.index_of(e.host);
    sg4::Host* h = w.pf.hosts[slot];
    switch (e.kind) {
      case ChurnKind::kJoin:
        h->turn_on();
        start_node(w, slot, false);
        break;
      case ChurnKind::kLeave:
      case ChurnKind::kFail: {
        const std::int64_t id = w.node_on_slot.at(slot);
        const bool graceful = e.kind == ChurnKind::kLeave;
        JsonObject f;
        f.add("graceful", graceful);
        w.emit(id, "node_left", f);
        h->turn_off();
        w.net.node_failed(id);
        w.node_on_slot.erase(slot);
        break;
      }
      case ChurnKind::kSlow:
        *w.speed[slot] = e.arg;
        break;
    }
  }
}

// SimGrid's engine signals are process-wide and s4u offers no way to disconnect a slot: the one
// slot, connected once, calls whatever the running simulation installed.
std::function<void()>& time_advance_hook() {
  static std::function<void()> hook;
  return hook;
}

void connect_time_advance_hook() {
  static const bool connected = [] {
    sg4::Engine::on_time_advance_cb([](double) {
      if (auto& hook = time_advance_hook()) hook();
    });
    return true;
  }();
  (void)connected;
}

}  // namespace

namespace {

// The scenario's churn trace (churn.trace, resolved against the run file's folder by its
// reader), checked against the host slots and which of them start.
ChurnTrace scenario_churn(const Scenario& sc, const std::vector<std::string>& slots) {
  std::set<std::string> running;
  {
    std::size_t i = 0;
    for (auto& g : sc.network.nodes)
      for (int c = 0; c < g.count; ++c, ++i)
        if (g.start) running.insert(slots[i]);
  }
  ChurnTrace trace;
  if (!sc.churn_trace.empty()) trace = load_churn(sc.churn_trace, slots, running);
  return trace;
}

// The run's `config` record: the resolved scenario, the platform and what SimGrid was given.
void emit_config(const Scenario& sc, const SimOptions& options, const World& w, const WanModel& wan,
                 int L, EventSink& sink) {
  ConfigRecord record;
  record.mode = options.worker.mode;
  record.seed = sc.run.seed;
  record.command = options.command;
  record.metrics = {sc.model.param_count(),
                    sc.model.flops_per_token(),
                    sc.tokens_per_inner_step(),
                    sc.hardware.gpus_per_node,
                    sc.hardware.peak_flops_per_gpu,
                    sc.diloco.H,
                    sc.diloco.codec,
                    L};
  record.versions.add("meridian", MERIDIAN_VERSION).add("simgrid", SIMGRID_VERSION_STRING);
  JsonObject& cfg = record.config = sc.to_json();
  cfg.add("platform", w.pf.to_json());
  // What SimGrid was actually given: aggregated lanes carry L flows' bytes and window.
  JsonObject simulated;
  simulated.add("network_model", sc.network.model)
      .add("tcp_gamma_bytes", sc.network.tcp_gamma_bytes * wan.connections_per_flow())
      .add("ring_flows_per_node", w.lanes)
      .add("local_ranks_per_flow", w.lane_scale)
      .add("driver", sc.run.driver)
      .add("store_small_message_bytes", kStoreSmallMessageBytes)
      .add("store_small_message_cost", "route latency + bytes / bottleneck bandwidth, no flow")
      .add("store_keepalives", options.message_level_keepalives ? "message" : "analytic");
  simulated.add("wan", wan.to_json());
  cfg.add("simulated", simulated);
  if (options.worker.make_worker) cfg.add("trainer", options.worker.config);
  sink.emit(Event{0.0, -1, "config", config_record_fields(record)});
}

// Runs the simulation to its end, or until options.interrupt_reason gives a reason (returned),
// reporting progress from SimGrid's clock.
std::string run_until_done(sg4::Engine& e, const SimOptions& options,
                           const OuterStepCounter& counting, int planned, sg4::Host* host) {
  // Interruption and progress, from SimGrid's clock: the hook runs in the maestro on every
  // advance; a stop request wakes an actor that ends every other one (a kill unwinds each
  // actor's stack, as at a crash), and the run ends with `run_interrupted`.
  std::string interrupted;
  auto stop = sg4::Semaphore::create(0);
  sg4::Actor::create("interrupt", host, [stop] {
    stop->acquire();
    sg4::Actor::kill_all();
  })->daemonize();
  std::uint64_t advances = 0;
  connect_time_advance_hook();
  time_advance_hook() = [&] {
    if (++advances % 256 != 0) return;
    if (options.on_progress)
      options.on_progress(sg4::Engine::get_clock(), counting.outer_steps(), planned);
    if (interrupted.empty() && options.interrupt_reason) {
      interrupted = options.interrupt_reason();
      if (!interrupted.empty()) stop->release();
    }
  };
  try {
    e.run();
  } catch (...) {
    time_advance_hook() = nullptr;
    throw;
  }
  time_advance_hook() = nullptr;
  return interrupted;
}

}  // namespace

SimOutcome run_simulation(const Scenario& sc, EventSink& sink, const SimOptions& options) {
  // Validate inputs before any SimGrid state exists.
  const auto slots = host_slot_names(sc);
  const ChurnTrace trace = scenario_churn(sc, slots);
  // Once, before SimGrid starts: the run file's options for every node (an error is the file's).
  const DilocoOptions options_of_file = config::diloco_options(sc, config::Mode::kSimulate);
  if (sc.worker != options.worker.kind)
    throw ConfigError(sc.file + ": key 'worker': '" + sc.worker +
                      "' needs its worker plugin (netsim::resolve_worker), got '" +
                      options.worker.kind + "'");
  if (!options.make_node)
    throw Error(
        "netsim::run_simulation: SimOptions::make_node is not set "
        "(compose::simulation_options sets it)");

  int argc = 2;
  std::string log_arg = "--log=root.thresh:" + options.simgrid_log;
  char arg0[] = "meridian";
  char* argv[] = {arg0, log_arg.data(), nullptr};
  // SimGrid replaces SIGINT's handler with its own, which prints every actor and calls exit():
  // a caller that handles SIGINT itself (`meridian sim` ends the run with run_interrupted)
  // keeps its handler.
  const auto caller_sigint = std::signal(SIGINT, SIG_DFL);
  sg4::Engine e(&argc, argv);
  if (caller_sigint != SIG_DFL && caller_sigint != SIG_ERR) std::signal(SIGINT, caller_sigint);
  for (const auto& item : options.worker.simgrid_config) e.set_config(item);
  const int L = sc.diloco.local_ranks;
  // TCP connections one simulated flow stands for: a lane's K connections per peer
  // (transport.connections_per_peer), times the L lanes where they are aggregated.
  const int K = sc.transport.connections_per_peer;
  const int lane_scale = sc.diloco.aggregate ? L : 1;
  const int per_flow = lane_scale * K;
  configure_network(e, sc, per_flow);

  OuterStepCounter counting(sink);
  World w(sc, counting, build_platform(e, sc, per_flow));
  auto wan = std::make_shared<WanModel>(sc, w.pf, per_flow, L * K);
  wan->install(e);
  w.net.set_wan(wan);
  // A round's flows follow path changes message by message; a shared path's bandwidth process
  // or a loss process is sampled at 8 points of each round. A node's access variation needs no
  // more than one flow per round: its link's bandwidth changes reach a flow in progress, and
  // with one flow the rounds matched message level as closely as with 8 (netsim/README.md,
  // "Aggregation"), at an eighth of the solver's work.
  const VariationSpec& variation = sc.network.variation;
  w.net.set_merge_phantom_rings(sc.diloco.aggregate,
                                variation.bandwidth_varies() || variation.loss_episodes() ? 8 : 1);
  w.options = options_of_file;
  w.plugin = options.worker;
  w.make_node = options.make_node;
  start_notifier(w.pf.coordinator);
  w.store = std::make_unique<SimStoreServer>(w.pf.coordinator, !options.message_level_keepalives,
                                             sc.network.store_quorum_rtt_s());
  w.progress = std::make_unique<Progress>(sc.diloco.H);
  w.buckets = scenario_buckets(sc);
  w.lanes = sc.diloco.aggregate ? 1 : L;
  w.lane_scale = lane_scale;
  for (std::size_t i = 0; i < w.pf.hosts.size(); ++i)
    w.speed.push_back(std::make_shared<double>(w.pf.speed_factor[i]));

  emit_config(sc, options, w, *wan, L, sink);

  std::vector<int> initial_slots;
  for (std::size_t i = 0; i < w.pf.hosts.size(); ++i) {
    if (w.pf.start[i])
      initial_slots.push_back(static_cast<int>(i));
    else
      w.pf.hosts[i]->turn_off();
  }
  w.initial_world = static_cast<int>(initial_slots.size());
  for (auto slot : initial_slots) start_node(w, slot, true);
  auto churn = sg4::Actor::create("churn", w.pf.coordinator,
                                  [&w, &trace] { guarded(w, [&] { replay_churn(w, trace); }); });
  // The nodes end the run themselves; pending churn events then no longer matter.
  churn->daemonize();

  const int planned = sc.outer_steps();
  const std::string interrupted = run_until_done(e, options, counting, planned, w.pf.coordinator);
  if (w.error) std::rethrow_exception(w.error);
  const double end = sg4::Engine::get_clock();
  const int outer_done = counting.outer_steps();
  JsonObject f;
  f.add("simulated_s", end).add("outer_steps", outer_done).add("outer_steps_planned", planned);
  if (!interrupted.empty()) f.add("reason", interrupted);
  sink.emit(Event{end, -1, interrupted.empty() ? "run_finished" : "run_interrupted", f});
  SimOutcome out{end,
                 outer_done,
                 planned,
                 interrupted,
                 w.net.messages(),
                 w.net.wire_bytes(),
                 w.store->calls()};
  return out;
}

}  // namespace meridian::netsim
