// DiLoCo emulation: TorchWorker nodes as threads over the in-process transport (see the header).
#include "trainer/diloco_emulation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "engine/backends/faults/cuttable_store.h"
#include "engine/core/error.h"
#include "engine/core/events/config_record.h"
#include "trainer/precision.h"
#include "trainer/run_config.h"

namespace meridian::trainer {
namespace {

// Records each worker's last inner-step result (loss, tokens) for the CSV.
class RecordingWorker final : public ForwardingWorker {
 public:
  explicit RecordingWorker(std::unique_ptr<TorchWorker> w)
      : ForwardingWorker(std::move(w)), torch_(static_cast<TorchWorker&>(inner())) {}
  InnerStepsResult run_inner_steps(int steps) override {
    const auto r = ForwardingWorker::run_inner_steps(steps);
    last_loss = r.loss;
    tokens += r.tokens;
    return r;
  }
  TorchWorker& torch() { return torch_; }

  std::atomic<double> last_loss{0.0};
  std::atomic<std::int64_t> tokens{0};

 private:
  TorchWorker& torch_;
};

struct Node {
  explicit Node(Store& shared) : store(shared, "this node was failed by the churn schedule") {}
  CuttableStore store;
  std::unique_ptr<RecordingWorker> worker;
  std::unique_ptr<DilocoNode> diloco;
  std::unique_ptr<std::thread> thread;
  NodeResult result;
};

class Emulation {
 public:
  Emulation(EmulationOptions o, EmulationWorld& world, EventSink& events,
            const std::function<void(const EmulatedStep&)>& on_step,
            std::function<void(const std::string&)> log)
      : o_(std::move(o)), world_(world), runtime_(world.runtime()), events_(events),
        on_step_(on_step), log_(std::move(log)) {
    validate_emulation(o_);
    if (!log_) log_ = [](const std::string&) {};
    auto w = o_.worker;
    w.data.vocab = w.config.model.vocab;
    corpus_ = prepare_corpus(w.data);
    o_.diloco.mesh.initial_world = o_.nodes;
    o_.diloco.on_outer_step = [this](const OuterStepView& v) { observe(v); };
    t0_ = std::chrono::steady_clock::now();
  }

  EmulationResult run() {
    emit_config();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int id = 1; id <= o_.nodes; ++id) launch_locked(id, true);
    }
    // Joiners may be launched while we wait: take threads until none is left.
    while (auto t = take_thread()) t->join();
    for (auto& [id, n] : nodes_) result_.nodes.push_back({id, n->result});
    Event done{runtime_.now_s(), -1, "run_finished", {}};
    done.fields.add("simulated_s", runtime_.now_s() - start_s_)
        .add("outer_steps", static_cast<std::int64_t>(result_.steps.size()));
    events_.emit(done);
    return result_;
  }

 private:
  void emit_config() {
    const auto& m = o_.worker.config.model;
    const auto& t = o_.worker.config.train;
    const auto& d = o_.diloco;
    JsonObject model, train, diloco, churn;
    model.add("name", m.name).add("layers", m.layers).add("hidden", m.hidden)
        .add("heads", m.heads).add("kv_heads", m.kv_heads).add("ffn", m.ffn)
        .add("vocab", m.vocab).add("seq_len", m.seq_len).add("rope_theta", m.rope_theta);
    // bf16_autocast: what this machine trains in; the setting and the CPU say why.
    const CpuFeatures& cpu = host_cpu_features();
    train.add("batch", t.batch).add("bf16_autocast", resolve_bf16(t.bf16_autocast, cpu).bf16);
    train.add("bf16_autocast_setting", bf16_autocast_name(t.bf16_autocast));
    train.add("cpu", describe(cpu)).add("lr", t.optim.lr);
    train.add("beta1", t.optim.beta1).add("beta2", t.optim.beta2);
    train.add("weight_decay", t.optim.weight_decay).add("grad_clip", t.optim.grad_clip);
    train.add("warmup_steps", t.optim.warmup_steps).add("z_loss_weight", t.optim.z_loss_weight);
    diloco.add("nodes", o_.nodes).add("H", d.inner_steps).add("outer_steps", d.outer_steps)
        .add("codec", codec_name(d.codec)).add("outer_lr", static_cast<double>(d.outer.lr))
        .add("outer_momentum", static_cast<double>(d.outer.momentum))
        .add("local_ranks", d.local_ranks);
    add_variant_fields(diloco, d);
    std::vector<std::int64_t> fail_steps, fail_nodes;
    for (const auto& [step, node] : o_.fail_after) {
      fail_steps.push_back(step);
      fail_nodes.push_back(node);
    }
    churn.add("fail_after_steps", fail_steps).add("fail_nodes", fail_nodes)
        .add("join_after_steps", o_.join_after);
    JsonObject config;
    config.add("model", model).add("train", train).add("diloco", diloco).add("churn", churn)
        .add("corpus", corpus_.corpus_checksum)
        .add("train_tokens", static_cast<std::uint64_t>(corpus_.train->size()));
    ConfigRecord record;
    record.mode = "emulate";
    record.seed = o_.worker.seed;
    record.command = o_.command;
    record.versions.add("meridian", o_.version);
    record.metrics = {parameter_count(m),
                      flops_per_token(m),
                      std::int64_t{t.batch} * m.seq_len,
                      0,
                      0.0,
                      d.inner_steps,
                      std::string(codec_name(d.codec)),
                      d.local_ranks};
    record.config = config;
    events_.emit(Event{runtime_.now_s(), -1, "config", config_record_fields(record)});
    start_s_ = runtime_.now_s();
  }

  std::unique_ptr<std::thread> take_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& entry : nodes_)
      if (entry.second->thread) return std::move(entry.second->thread);
    return nullptr;
  }

  void launch_locked(std::int64_t id, bool initial) {
    auto n = std::make_unique<Node>(world_.store());
    n->worker =
        std::make_unique<RecordingWorker>(std::make_unique<TorchWorker>(o_.worker, corpus_));
    n->diloco =
        world_.make_node({*n->worker, n->store, world_.transports(), runtime_, events_}, o_.diloco);
    Node* raw = n.get();
    nodes_[id] = std::move(n);
    raw->thread = std::make_unique<std::thread>(
        [raw, id, initial] { raw->result = raw->diloco->run(initial, id); });
  }

  // Runs on the node that applied the step; the first node to report a step evaluates the
  // outer parameters (identical on every member) and applies the churn schedule.
  void observe(const OuterStepView& v) {
    Node* self = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!reported_.insert(v.outer_step).second) return;
      self = nodes_.at(v.node).get();
    }
    EmulatedStep s;
    s.val_loss = self->worker->torch().evaluate();
    std::lock_guard<std::mutex> lock(mu_);
    s.outer_step = v.outer_step + 1;
    s.members = v.members.size();
    s.fallback = v.fallback;
    int counted = 0;
    for (auto& [id, n] : nodes_) {
      s.tokens += n->worker->tokens;
      if (std::find(v.members.begin(), v.members.end(), id) != v.members.end()) {
        s.train_loss += n->worker->last_loss;
        ++counted;
      }
    }
    if (counted) s.train_loss /= counted;
    s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    result_.steps.push_back(s);
    if (on_step_) on_step_(s);
    for (auto [it, end] = o_.fail_after.equal_range(s.outer_step); it != end; ++it) {
      Node& n = *nodes_.at(it->second);
      n.store.cut();
      world_.cut_network(it->second);
      log_("churn: node " + std::to_string(it->second) + " fails after outer step " +
           std::to_string(s.outer_step));
    }
    for (std::int64_t step : o_.join_after) {
      if (step != s.outer_step) continue;
      const std::int64_t id = 100 + static_cast<std::int64_t>(nodes_.size());
      log_("churn: node " + std::to_string(id) + " joins after outer step " +
           std::to_string(s.outer_step));
      launch_locked(id, false);
    }
  }

  EmulationOptions o_;
  EmulationWorld& world_;
  Runtime& runtime_;
  EventSink& events_;
  const std::function<void(const EmulatedStep&)>& on_step_;
  std::function<void(const std::string&)> log_;
  TokenizedCorpus corpus_;
  std::mutex mu_;
  std::map<std::int64_t, std::unique_ptr<Node>> nodes_;
  std::set<std::int64_t> reported_;
  std::chrono::steady_clock::time_point t0_;
  EmulationResult result_;
  double start_s_ = 0;
};

}  // namespace

void validate_emulation(const EmulationOptions& o) {
  if (o.nodes < 1)
    throw ConfigError("--nodes: expected at least 1, got " + std::to_string(o.nodes));
  if (o.diloco.inner_steps < 1 || o.diloco.outer_steps < 1)
    throw ConfigError("--inner-steps and --outer-steps must be positive");
  const std::int64_t steps = o.diloco.outer_steps;
  std::set<std::int64_t> failing;
  for (const auto& [step, node] : o.fail_after) {
    const std::string what = "--fail " + std::to_string(node) + "@" + std::to_string(step);
    if (node < 1 || node > o.nodes)
      throw ConfigError(what + ": no node " + std::to_string(node) + " (the initial nodes are 1.." +
                        std::to_string(o.nodes) + ")");
    if (step < 1 || step >= steps)
      throw ConfigError(what + ": the outer step must be in [1, " + std::to_string(steps - 1) +
                        "] (the run has " + std::to_string(steps) + " outer steps)");
    if (!failing.insert(node).second)
      throw ConfigError(what + ": node " + std::to_string(node) + " fails twice");
  }
  for (const std::int64_t step : o.join_after)
    if (step < 1 || step >= steps)
      throw ConfigError("--join " + std::to_string(step) + ": the outer step must be in [1, " +
                        std::to_string(steps - 1) + "] (the run has " + std::to_string(steps) +
                        " outer steps)");
}

EmulationResult run_emulation(EmulationOptions options, EmulationWorld& world, EventSink& events,
                              const std::function<void(const EmulatedStep&)>& on_step,
                              std::function<void(const std::string&)> log) {
  Emulation e(std::move(options), world, events, on_step, std::move(log));
  return e.run();
}

}  // namespace meridian::trainer
