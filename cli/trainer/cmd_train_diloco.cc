// `meridian train-diloco`: N DiLoCo nodes as threads of one process, each a TorchWorker on its
// own data shard, over the in-process transport and an in-memory store, with an optional churn
// schedule (a node fails at an outer step, a joiner arrives and recovers live). Prints the
// validation loss of the outer parameters per outer step as CSV. The emulation of the
// convergence study on one machine; not the simulator (no network model).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "engine/codec/codec.h"
#include "engine/diloco/diloco.h"
#include "engine/error.h"
#include "engine/events/event_sink.h"
#include "engine/runtime/thread_runtime.h"
#include "engine/store/memory_store.h"
#include "engine/transport/inproc/inproc_transport.h"
#include "trainer/torch_worker.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian train-diloco [options]\n"
    "  --model NAME|FILE.yaml   (default small)\n"
    "  --nodes N                initial nodes (default 4)\n"
    "  --inner-steps H          (default 50)   --outer-steps S (default 4)\n"
    "  --codec fp32|bf16|int8|int8-minmax   ring all-reduce codec (default fp32)\n"
    "  --batch B --seq-len T --lr X --warmup N   override the model config\n"
    "  --seed S --val-sequences N --cache DIR --csv FILE --events FILE\n"
    "  --fail NODE@STEP         node id NODE (1..N) dies after outer step STEP (repeatable)\n"
    "  --join STEP              a new node joins after outer step STEP and takes the data\n"
    "                           shard of the most recently failed node (repeatable)\n";

// A node's view of the shared store that can be cut off: after kill() every call raises
// PeerLostError; blocking calls wait in short slices so they notice.
class CuttableStore final : public Store {
 public:
  explicit CuttableStore(Store& inner) : inner_(inner) {}
  void kill() { dead_ = true; }
  void set(const std::string& k, const std::string& v) override { alive(), inner_.set(k, v); }
  std::optional<std::string> try_get(const std::string& k) override {
    return alive(), inner_.try_get(k);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    return alive(), inner_.add(k, d);
  }
  std::optional<std::string> compare_set(const std::string& k,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override {
    return alive(), inner_.compare_set(k, expected, desired);
  }
  bool erase(const std::string& k) override { return alive(), inner_.erase(k); }
  std::vector<std::string> list(const std::string& p) override { return alive(), inner_.list(p); }
  std::string get(const std::string& k, double timeout_s) override {
    std::string out;
    in_slices(timeout_s, [&](double s) { out = inner_.get(k, s); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, double timeout_s) override {
    in_slices(timeout_s, [&](double s) { inner_.wait(keys, s); });
  }

 private:
  void alive() const {
    if (dead_) throw PeerLostError(-1, "this node was failed by the churn schedule");
  }
  template <typename F>
  void in_slices(double timeout_s, F f) {
    for (double left_s = timeout_s;;) {
      alive();
      const double slice_s = std::min(left_s, 0.05);
      try {
        return f(slice_s);
      } catch (const TimeoutError&) {
        if ((left_s -= slice_s) <= 0) throw;
      }
    }
  }
  Store& inner_;
  std::atomic<bool> dead_{false};
};

// Records each worker's last inner-step result (loss, tokens) for the CSV.
class RecordingWorker final : public InnerWorker {
 public:
  explicit RecordingWorker(std::unique_ptr<trainer::TorchWorker> w) : w_(std::move(w)) {}
  InnerStepsResult run_inner_steps(int steps) override {
    const auto r = w_->run_inner_steps(steps);
    last_loss = r.loss;
    tokens += r.tokens;
    return r;
  }
  std::uint64_t parameter_count() const override { return w_->parameter_count(); }
  std::span<float> parameters() override { return w_->parameters(); }
  void parameters_updated() override { w_->parameters_updated(); }
  std::vector<std::uint64_t> bucket_boundaries() const override {
    return w_->bucket_boundaries();
  }
  std::vector<StateSection> state_sections() override { return w_->state_sections(); }
  std::string progress() const override { return w_->progress(); }
  void restore_progress(const std::string& p) override { w_->restore_progress(p); }
  trainer::TorchWorker& torch() { return *w_; }

  std::atomic<double> last_loss{0.0};
  std::atomic<std::int64_t> tokens{0};

 private:
  std::unique_ptr<trainer::TorchWorker> w_;
};

struct Node {
  explicit Node(Store& shared) : store(shared) {}
  CuttableStore store;
  std::unique_ptr<RecordingWorker> worker;
  std::unique_ptr<DilocoNode> diloco;
  std::unique_ptr<std::thread> thread;
  NodeResult result;
  int shard = 0;
};

class Emulation {
 public:
  Emulation(trainer::TorchWorkerOptions base, DilocoOptions d, int nodes, std::ostream& csv,
            EventSink& events)
      : base_(std::move(base)), d_(std::move(d)), world_(nodes), csv_(csv), events_(events),
        store_(runtime_) {
    auto o = base_;
    o.data.vocab = o.config.model.vocab;
    corpus_ = trainer::prepare_corpus(o.data);
    d_.mesh.initial_world = nodes;
    d_.on_outer_step = [this](const OuterStepView& v) { observe(v); };
    t0_ = std::chrono::steady_clock::now();
  }

  void run(const std::multimap<std::int64_t, std::int64_t>& fails,
           const std::multimap<std::int64_t, int>& joins) {
    fails_ = fails;
    joins_ = joins;
    csv_ << "outer_step,inner_steps_per_node,members,tokens,train_loss,val_loss,elapsed_s\n";
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int id = 1; id <= world_; ++id) launch_locked(id, id - 1, true);
    }
    // Joiners may be launched while we wait: take threads until none is left.
    while (auto t = take_thread()) t->join();
    for (auto& [id, n] : nodes_)
      std::cerr << "node " << id << " (shard " << n->shard << "): "
                << node_exit_name(n->result.exit) << " after "
                << n->result.outer_steps_applied << " outer steps " << n->result.what << "\n";
  }

 private:
  std::unique_ptr<std::thread> take_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& entry : nodes_)
      if (entry.second->thread) return std::move(entry.second->thread);
    return nullptr;
  }

  void launch_locked(std::int64_t id, int shard, bool initial) {
    auto n = std::make_unique<Node>(store_);
    auto o = base_;
    o.rank = shard;
    o.world = world_;
    n->shard = shard;
    n->worker = std::make_unique<RecordingWorker>(
        std::make_unique<trainer::TorchWorker>(o, corpus_));
    n->diloco = std::make_unique<DilocoNode>(*n->worker, n->store, network_, runtime_, events_, d_);
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
    const double val = self->worker->torch().evaluate();
    std::int64_t tokens = 0;
    double loss = 0;
    int counted = 0;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, n] : nodes_) {
      tokens += n->worker->tokens;
      if (std::find(v.members.begin(), v.members.end(), id) != v.members.end()) {
        loss += n->worker->last_loss;
        ++counted;
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    csv_ << v.outer_step + 1 << "," << d_.inner_steps << "," << v.members.size() << "," << tokens
         << "," << (counted ? loss / counted : 0.0) << "," << val << "," << elapsed << std::endl;
    for (auto [it, end] = fails_.equal_range(v.outer_step + 1); it != end; ++it) {
      Node& n = *nodes_.at(it->second);
      n.store.kill();
      network_.kill_node(it->second);
      failed_shards_.push_back(n.shard);
      std::cerr << "churn: node " << it->second << " fails after outer step "
                << v.outer_step + 1 << "\n";
    }
    for (auto [it, end] = joins_.equal_range(v.outer_step + 1); it != end; ++it) {
      const int shard = failed_shards_.empty() ? 0 : failed_shards_.back();
      if (!failed_shards_.empty()) failed_shards_.pop_back();
      const std::int64_t id = 100 + static_cast<std::int64_t>(nodes_.size());
      std::cerr << "churn: node " << id << " joins after outer step " << v.outer_step + 1
                << " on shard " << shard << "\n";
      launch_locked(id, shard, false);
    }
  }

  trainer::TorchWorkerOptions base_;
  DilocoOptions d_;
  int world_;
  std::ostream& csv_;
  EventSink& events_;
  trainer::TokenizedCorpus corpus_;
  ThreadRuntime runtime_;
  MemoryStore store_;
  InProcNetwork network_;
  std::mutex mu_;
  std::map<std::int64_t, std::unique_ptr<Node>> nodes_;
  std::set<std::int64_t> reported_;
  std::multimap<std::int64_t, std::int64_t> fails_;
  std::multimap<std::int64_t, int> joins_;
  std::vector<int> failed_shards_;
  std::chrono::steady_clock::time_point t0_;
};

int run_train_diloco(const std::vector<std::string>& argv) {
  trainer::TorchWorkerOptions o;
  DilocoOptions d;
  int nodes = 4;
  std::string csv_path, events_path;
  std::multimap<std::int64_t, std::int64_t> fails;
  std::multimap<std::int64_t, int> joins;
  try {
    std::map<std::string, std::string> kv;
    for (std::size_t i = 0; i < argv.size(); ++i) {
      if (argv[i].rfind("--", 0) != 0 || i + 1 >= argv.size())
        throw ConfigError("expected --option VALUE pairs, got '" + argv[i] + "'");
      const std::string k = argv[i].substr(2), v = argv[++i];
      if (k == "fail") {
        const auto at = v.find('@');
        if (at == std::string::npos) throw ConfigError("--fail: expected NODE@STEP");
        fails.emplace(std::stoll(v.substr(at + 1)), std::stoll(v.substr(0, at)));
      } else if (k == "join") {
        joins.emplace(std::stoll(v), 0);
      } else {
        kv[k] = v;
      }
    }
    auto take = [&](const std::string& k, const std::string& def) {
      auto it = kv.find(k);
      std::string v = it == kv.end() ? def : it->second;
      if (it != kv.end()) kv.erase(it);
      return v;
    };
    o.config = trainer::load_named_config(take("model", "small"));
    auto& t = o.config.train;
    t.batch = std::stoi(take("batch", std::to_string(t.batch)));
    o.config.model.seq_len = std::stoi(take("seq-len", std::to_string(o.config.model.seq_len)));
    trainer::validate(o.config.model, "--seq-len");
    t.optim.lr = std::stod(take("lr", std::to_string(t.optim.lr)));
    t.optim.warmup_steps = std::stoll(take("warmup", std::to_string(t.optim.warmup_steps)));
    o.seed = std::stoull(take("seed", "0"));
    o.validation_sequences = std::stoi(take("val-sequences", "32"));
    o.data.cache_dir = take("cache", ".cache/meridian-trainer");
    nodes = std::stoi(take("nodes", "4"));
    d.inner_steps = std::stoi(take("inner-steps", "50"));
    d.outer_steps = std::stoll(take("outer-steps", "4"));
    d.codec = parse_codec(take("codec", "fp32"));
    csv_path = take("csv", "");
    events_path = take("events", "");
    if (!kv.empty()) throw ConfigError("unknown option --" + kv.begin()->first);
    if (nodes < 1 || d.inner_steps < 1 || d.outer_steps < 1)
      throw ConfigError("--nodes, --inner-steps and --outer-steps must be positive");
  } catch (const std::invalid_argument&) {
    std::cerr << "meridian train-diloco: a numeric option has a non-numeric value\n" << kUsage;
    return kExitUsage;
  } catch (const ConfigError& e) {
    std::cerr << "meridian train-diloco: " << e.what() << "\n" << kUsage;
    return kExitUsage;
  }
  // Nodes share one core here: bounds are generous, a failed node is cut off explicitly.
  d.allreduce_timeout_s = 1800;
  d.recovery.timeout_s = 1800;
  d.mesh.admission_timeout_s = 3600;
  d.mesh.round_timeout_s = 3600;
  d.mesh.outer_steps = d.outer_steps;
  try {
    std::ofstream csv_file, events_file;
    if (!csv_path.empty()) csv_file.open(csv_path);
    if (!events_path.empty()) events_file.open(events_path);
    NullEventSink null_sink;
    JsonlEventSink jsonl(events_file);
    EventSink& sink = events_path.empty() ? static_cast<EventSink&>(null_sink) : jsonl;
    std::cerr << trainer::describe(o.config.model);
    Emulation e(o, d, nodes, csv_path.empty() ? std::cout : csv_file, sink);
    e.run(fails, joins);
  } catch (const ConfigError& e) {
    std::cerr << "meridian train-diloco: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "meridian train-diloco: " << e.what() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

MERIDIAN_COMMAND("train-diloco",
                 "emulate DiLoCo: N LibTorch nodes as threads, in-process ring, optional churn",
                 kUsage, run_train_diloco);

}  // namespace
}  // namespace meridian::cli
