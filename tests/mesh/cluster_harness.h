// Test support: a cluster of DiLoCo nodes as threads of one process over the in-process
// transport and one MemoryStore, with a synthetic InnerWorker whose math is exact, crashes
// injected from outside (per-node store view, network kill, a send-counting transport
// wrapper), and the invariant checks of the fault matrix. Not a simulator: no timing model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/event_sinks/sinks.h"
#include "engine/backends/faults/cuttable_store.h"
#include "engine/backends/faults/fault_point.h"
#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/diloco/diloco.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"

namespace meridian::testing {

// Parameters start at p[i] = i on every node. Inner step k (counted per worker, from 1) of node
// `id` subtracts the integer ((id + k + i) mod 5) - 2 from p[i] and adds 1 to moment[i]: every
// value stays an exact small integer until the outer step. Progress is the step counter.
class SyntheticWorker final : public InnerWorker {
 public:
  SyntheticWorker(std::int64_t id, std::uint64_t count, std::vector<std::uint64_t> boundaries,
                  Runtime& runtime, double step_compute_s, bool phantom)
      : id_(id),
        count_(count),
        boundaries_(std::move(boundaries)),
        runtime_(runtime),
        step_compute_s_(step_compute_s),
        phantom_(phantom),
        params_(phantom ? 0 : count),
        moment_(phantom ? 0 : count) {
    for (std::uint64_t i = 0; i < params_.size(); ++i) params_[i] = static_cast<float>(i);
  }

  // Inner steps done so far; read it from this worker's own hooks (they run on its activity).
  std::int64_t inner_steps_done() const { return step_; }

  InnerStepsResult run_inner_steps(int steps) override {
    std::function<void()> before, after;
    {
      std::lock_guard<std::mutex> lock(hooks_mu_);
      before = before_inner_;
      after = after_inner_;
    }
    if (before) before();
    InnerStepsResult r;
    for (int s = 0; s < steps; ++s) {
      read_samples();
      ++step_;
      for (std::uint64_t i = 0; i < params_.size(); ++i) {
        params_[i] -= static_cast<float>((id_ + step_ + static_cast<std::int64_t>(i)) % 5 - 2);
        moment_[i] += 1.0f;
      }
      runtime_.compute_s(step_compute_s_);
    }
    r.steps = steps;
    r.tokens = 100 * steps;
    r.loss = static_cast<double>(step_);
    r.compute_s = step_compute_s_ * steps;
    if (after) after();
    return r;
  }
  std::uint64_t parameter_count() const override { return count_; }
  // Elastic data: with set_samples_per_step(n > 0), each inner step reads n of the positions
  // the engine assigned, in order (a CheckError when none is left), and records them.
  std::int64_t samples_per_step() const override { return samples_; }
  void assign_samples(std::vector<SampleRange> ranges) override {
    std::lock_guard<std::mutex> lock(data_mu_);
    assigned_ = std::move(ranges);
  }
  void set_samples_per_step(std::int64_t n) { samples_ = n; }
  std::vector<std::int64_t> positions_read() const {
    std::lock_guard<std::mutex> lock(data_mu_);
    return read_;
  }
  std::span<float> parameters() override { return params_; }
  std::vector<std::uint64_t> bucket_boundaries() const override { return boundaries_; }
  std::vector<StateSection> state_sections() override {
    return {StateSection{"moment", moment_, count_}};
  }
  std::string progress() const override { return "step=" + std::to_string(step_); }
  void restore_progress(const std::string& p) override {
    MERIDIAN_CHECK(p.rfind("step=", 0) == 0);
    step_ = std::stoll(p.substr(5));
  }

  std::int64_t step() const { return step_; }
  std::span<const float> moment() const { return moment_; }
  // Hooks run by the node's own thread at the start / end of run_inner_steps (set from any).
  void set_before_inner(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(hooks_mu_);
    before_inner_ = std::move(f);
  }
  void set_after_inner(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(hooks_mu_);
    after_inner_ = std::move(f);
  }

 private:
  std::int64_t id_;
  std::uint64_t count_;
  std::vector<std::uint64_t> boundaries_;
  Runtime& runtime_;
  double step_compute_s_;
  bool phantom_;
  std::int64_t step_ = 0;
  std::vector<float> params_, moment_;
  std::mutex hooks_mu_;
  std::function<void()> before_inner_, after_inner_;
  std::int64_t samples_ = 0;
  mutable std::mutex data_mu_;
  std::vector<SampleRange> assigned_;  // guarded by data_mu_
  std::vector<std::int64_t> read_;     // guarded by data_mu_

  void read_samples() {
    std::lock_guard<std::mutex> lock(data_mu_);
    for (std::int64_t k = 0; k < samples_; ++k) {
      MERIDIAN_CHECK(!assigned_.empty());  // the engine planned fewer than the steps read
      read_.push_back(assigned_.front().begin);
      if (++assigned_.front().begin == assigned_.front().end) assigned_.erase(assigned_.begin());
    }
  }
};

// A node's view of the shared store (engine/backends/faults's CuttableStore, cut when the node is
// killed, noticed within 10 ms) whose keepalives can be muted: the node runs on, its lease starves.
class NodeStore final : public CuttableStore {
 public:
  explicit NodeStore(Store& inner) : CuttableStore(inner, "this node was killed", 0.01) {}
  void mute_heartbeat(bool muted) { muted_ = muted; }
  double keepalive(std::int64_t lease, double interval_s) override {
    check();
    if (muted_) return interval_s;  // a starved heartbeat
    return CuttableStore::keepalive(lease, interval_s);
  }
  // Runs before every list() of this node's, with its prefix (a test's interleaving).
  void before_list(std::function<void(const std::string&)> hook) { before_list_ = std::move(hook); }
  std::vector<std::string> list(const std::string& p) override {
    check();
    if (before_list_) before_list_(p);
    return CuttableStore::list(p);
  }

 private:
  std::atomic<bool> muted_{false};
  std::function<void(const std::string&)> before_list_;  // set before the node starts
};

// Forwards events until the node is killed (a crashed node writes nothing more).
class NodeSink final : public EventSink {
 public:
  void emit(const Event& e) override {
    if (!dead_) sink_.emit(e);
  }
  void kill() { dead_ = true; }
  std::vector<Event> events() const { return sink_.events(); }

 private:
  MemoryEventSink sink_;
  std::atomic<bool> dead_{false};
};

// Under ThreadSanitizer (the tsan label, tests/tsan) threads run several times slower, so a
// heartbeat starved for 0.3 s is common there and would look like a death (a retry or an
// eviction the test does not expect): that build waits 5 times longer.
#if defined(MERIDIAN_TSAN_TIMING)
inline constexpr double kDeathSlack = 5.0;
#else
inline constexpr double kDeathSlack = 1.0;
#endif

struct ClusterOptions {
  int initial = 4;
  std::int64_t outer_steps = 6;
  int inner_steps = 3;
  std::uint64_t params = 12;
  std::vector<std::uint64_t> boundaries = {0, 5, 6, 12};  // uneven layer groups
  int local_ranks = 1;
  bool blocking_recovery = false;
  int recovery_sources = 2;
  std::size_t recovery_chunk_bytes = 16;
  std::size_t max_chunk_bytes = 32;  // ring pieces: several per bucket even for tiny models
  double allreduce_timeout_s = 2.0;
  bool barrier = true;
  double inner_step_s = 0.001;
  bool phantom = false;
  CodecId codec = CodecId::kFp32;
  OuterOptimizerOptions outer{};
  std::function<double(std::int64_t, std::int64_t)> bandwidth_bps;  // null = uniform
  double heartbeat_s = 0.1;
  double dead_after_s = 0.3 * kDeathSlack;
  // Called for every node when its worker is made, before its activity starts: hooks installed
  // here cannot race the node's first steps.
  std::function<void(std::int64_t id, SyntheticWorker& worker)> on_launch;
  // A run resumed from a state at an outer-step boundary: round 0 computes this step, and
  // `resume_momentum` (when set) gives each node's outer momentum to start from.
  std::int64_t first_outer_step = 0;
  std::function<std::vector<float>(std::int64_t id)> resume_momentum;
  // Overlapped outer steps; with a resume, each node's pending pseudo-gradient (when set).
  Overlap overlap = Overlap::kNone;
  std::function<std::vector<float>(std::int64_t id)> resume_pending;
  // Streaming outer steps (DilocoOptions::fragments, fragment_delay, fragment_alpha); with a
  // resume, each node's local parameters (when set).
  int fragments = 1;
  int fragment_delay = 0;
  float fragment_alpha = 0.0f;
  std::function<std::vector<float>(std::int64_t id)> resume_local;
  // A sparse codec (topk): its parameters and the error feedback's beta; with a resume, each
  // node's error-feedback buffer (when set).
  CodecParams codec_params;
  float error_feedback = 0.0f;
  SparseCollective sparse_collective = SparseCollective::kAuto;
  std::function<std::vector<float>(std::int64_t id)> resume_error_feedback;
  // Another worker than the synthetic one (a TorchWorker: the thread-level reference of a
  // multi-process schedule, tests/gloo/process_fault_matrix_test.cc). Then worker(), on_launch
  // and `params`, `boundaries`, `inner_step_s`, `phantom` do not apply.
  std::function<std::unique_ptr<InnerWorker>(std::int64_t id)> make_worker;
  // Adjusts every node's DilocoOptions once the harness has set them (codec, outer optimizer,
  // chunk sizes of a run file).
  std::function<void(DilocoOptions&)> configure;
  // Node id -> the point of its own activity where it is killed
  // (engine/backends/faults/fault_point.h), counted as `meridian train --fault-kill` counts it.
  std::map<std::int64_t, FaultPoint> kill_at;
  // The store the nodes share (it must outlive the cluster); null = the cluster's MemoryStore.
  Store* store = nullptr;
};

// The text of one field of an event, as JSON ("" when absent; arrays and strings as written).
inline std::string field(const Event& e, const std::string& name) {
  const std::string s = e.fields.str();
  const std::string key = "\"" + name + "\":";
  const auto at = s.find(key);
  if (at == std::string::npos) return "";
  const auto end = s[at + key.size()] == '[' ? s.find(']', at + key.size()) + 1
                                             : s.find_first_of(",}", at + key.size());
  return s.substr(at + key.size(), end - at - key.size());
}

// One applied outer step as a node saw it.
struct StepRecord {
  std::uint64_t epoch = 0;
  std::vector<std::int64_t> members;
  bool fallback = false;
  std::vector<float> params, momentum;
  std::vector<float> pending;         // OuterStepView::pending (overlapped runs)
  std::vector<float> local;           // OuterStepView::local (streaming runs)
  std::vector<float> error_feedback;  // OuterStepView::error_feedback (sparse codecs)
  std::string data_ledger;            // OuterStepView::data_ledger (a worker reading planned data)
};

using StepRecords = std::map<std::int64_t, std::map<std::int64_t, StepRecord>>;

// Resuming `o` from what a whole run recorded (`ref`, Cluster::steps()) once outer steps
// [0, done) were applied: each node starts from its outer parameters and momentum of step
// done - 1, its synthetic worker as after `inner_done` inner steps (the progress and every
// moment), and from its pending pseudo-gradient when `pending` (overlapped runs). `ref` must
// outlive the resumed cluster.
// A resumed run's steps (`got`) equal the whole run's (`ref`) from step `done` to the end, bit
// for bit: the outer parameters, the momentum, and the pending or local vectors (empty where
// the mode has none).
inline void expect_resumed_matches(const StepRecords& got, const StepRecords& ref,
                                   std::int64_t done, std::int64_t outer_steps) {
  ASSERT_EQ(got.size(), static_cast<std::size_t>(outer_steps - done));
  for (const auto& [step, by_node] : got)
    for (const auto& [id, rec] : by_node) {
      const StepRecord& want = ref.at(step).at(id);
      EXPECT_EQ(rec.params, want.params) << "step " << step << " node " << id;
      EXPECT_EQ(rec.momentum, want.momentum) << "step " << step << " node " << id;
      EXPECT_EQ(rec.pending, want.pending) << "step " << step << " node " << id;
      EXPECT_EQ(rec.local, want.local) << "step " << step << " node " << id;
      EXPECT_EQ(rec.error_feedback, want.error_feedback) << "step " << step << " node " << id;
    }
}

inline void resume_from(ClusterOptions& o, const StepRecords& ref, std::int64_t done,
                        std::int64_t inner_done, bool pending = false) {
  o.first_outer_step = done;
  o.on_launch = [&ref, done, inner_done](std::int64_t id, SyntheticWorker& w) {
    const StepRecord& at = ref.at(done - 1).at(id);
    std::copy(at.params.begin(), at.params.end(), w.parameters().begin());
    w.restore_progress("step=" + std::to_string(inner_done));
    // The sections vector must outlive the loop (a range-for over a member of a temporary
    // reads freed memory: ThreadSanitizer found it).
    const std::vector<StateSection> sections = w.state_sections();
    for (float& m : sections[0].values) m = static_cast<float>(inner_done);
  };
  o.resume_momentum = [&ref, done](std::int64_t id) { return ref.at(done - 1).at(id).momentum; };
  if (pending)
    o.resume_pending = [&ref, done](std::int64_t id) { return ref.at(done - 1).at(id).pending; };
}

class Cluster {
 public:
  explicit Cluster(ClusterOptions o) : o_(std::move(o)), store_(runtime_), faults_(*this) {}
  ~Cluster() { join(); }

  // Starts the initial nodes with ids 1..initial.
  void start() {
    for (int i = 1; i <= o_.initial; ++i) launch(i, true);
  }
  // Starts a joiner with a fresh id and returns it once the joiner is in the join queue (so a
  // call from an at_step() action is admitted at the next outer-step boundary, deterministically),
  // or once it has ended: a joiner started after the run's final record was written finds the
  // run over and leaves at once, its queue entry erased with its lease, possibly before a wait
  // for the key saw it (the store-size test's last joiner did, now and then: 10 s and a failed
  // test).
  std::int64_t add_joiner() {
    std::int64_t id;
    Node* n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = next_id_++;
      launch_locked(id, false);
      n = nodes_.at(id).get();
    }
    char key[64];
    std::snprintf(key, sizeof key, "mesh/join/%012lld", static_cast<long long>(id));
    // A joiner queues within milliseconds; the bound only says when to give up on one (under
    // ThreadSanitizer on a loaded machine its thread may wait seconds for a core).
    const double bound_s = 10.0 * kDeathSlack;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
    while (!n->ended) {
      try {
        shared_store().wait({key}, 0.05);
        break;
      } catch (const TimeoutError&) {
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw TimeoutError("harness: joiner " + std::to_string(id) +
                           " neither queued nor ended within " + std::to_string(bound_s) + " s");
    }
    return id;
  }
  // Crashes a node: its store calls and transports fail from now on, its events stop.
  void kill(std::int64_t id) {
    Node* n = node(id);
    n->sink.kill();
    n->store.cut();
    network_.kill_node(id);
    std::lock_guard<std::mutex> lock(mu_);
    killed_.insert(id);
  }
  // The next `times` collective connects of node `id` fail with PeerLostError (as Gloo's does
  // when a stranger took a peer's place on a listening port); the node stays alive.
  void fail_connects(std::int64_t id, int times) {
    std::lock_guard<std::mutex> lock(mu_);
    connect_failures_[id] = times;
  }
  int connect_failures_left(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return connect_failures_[id];
  }
  // Runs `action` (once) when node `id` is about to send its k-th message from now on, on a
  // collective transport or (recovery_only) a recovery transport.
  void on_send(std::int64_t id, std::uint64_t k, bool recovery_only, std::function<void()> action) {
    std::lock_guard<std::mutex> lock(mu_);
    triggers_[id] = Trigger{k, recovery_only, std::move(action)};
  }
  // Runs `fn` once, when the first node applies outer step `step`.
  void at_step(std::int64_t step, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    at_step_[step] = std::move(fn);
  }
  // A joiner that arrives when the first node applies `step`; its id is joiner_of(step).
  void join_at(std::int64_t step) {
    at_step(step, [this, step] {
      const std::int64_t id = add_joiner();
      std::lock_guard<std::mutex> lock(mu_);
      joined_at_[step] = id;
    });
  }
  std::int64_t joiner_of(std::int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    return joined_at_.count(step) ? joined_at_[step] : -1;
  }
  // start(), join(), check_invariants().
  void run_and_check() {
    start();
    join();
    check_invariants();
  }
  void leave(std::int64_t id) { node(id)->diloco->request_leave(); }
  void mute_heartbeat(std::int64_t id, bool muted) { node(id)->store.mute_heartbeat(muted); }
  // `id` may end evicted (declared dead while alive): the invariants treat it like a crash.
  void allow_eviction(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    evictable_.insert(id);
  }
  // From now on node `id` flips the last byte of every ring message it sends (a bad checksum,
  // or a bad header for an empty chunk): its successor's ring rejects them.
  void corrupt_sends(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupting_.insert(id);
  }
  SyntheticWorker& worker(std::int64_t id) {
    Node* n = node(id);
    MERIDIAN_CHECK(n->worker != nullptr);  // not with ClusterOptions::make_worker
    return *n->worker;
  }

  void join() {
    for (;;) {
      std::unique_ptr<std::thread> t;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [id, n] : nodes_)
          if (n->thread) {
            t = std::move(n->thread);
            break;
          }
      }
      if (!t) return;
      t->join();
    }
  }

  // The coordinator lease holder right now (-1 if none).
  std::int64_t leader() {
    const auto v = shared_store().try_get("mesh/leader");
    if (!v) return -1;
    return std::stoll(v->substr(0, v->find(':')));
  }

  NodeResult result(std::int64_t id) { return node(id)->result; }
  std::vector<Event> events(std::int64_t id) { return node(id)->sink.events(); }
  std::vector<std::int64_t> ids() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::int64_t> out;
    for (auto& [id, n] : nodes_) out.push_back(id);
    return out;
  }
  bool evictable(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return evictable_.count(id) > 0;
  }
  bool corrupting(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return corrupting_.count(id) > 0;
  }
  bool killed(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return killed_.count(id) > 0;
  }
  StepRecords steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;  // step -> node -> record
  }

  // The fault matrix's invariants: every node that was not killed ended normally; for every
  // outer step, all nodes that applied it agree on epoch, members and (bit for bit) outer
  // parameters and momentum; survivors applied every step up to the end.
  void check_invariants(bool expect_no_fallback = true) {
    const auto recs = steps();
    for (std::int64_t id : ids()) {
      if (killed(id) || evictable(id)) continue;
      const NodeResult r = result(id);
      EXPECT_TRUE(r.exit == NodeExit::kFinished || r.exit == NodeExit::kLeft)
          << "node " << id << " ended " << node_exit_name(r.exit) << ": " << r.what;
    }
    for (const auto& [step, by_node] : recs) {
      const StepRecord& ref = by_node.begin()->second;
      for (const auto& [id, rec] : by_node) {
        EXPECT_EQ(rec.epoch, ref.epoch) << "step " << step << " node " << id;
        EXPECT_EQ(rec.members, ref.members) << "step " << step << " node " << id;
        EXPECT_EQ(rec.params, ref.params) << "step " << step << " node " << id;
        EXPECT_EQ(rec.momentum, ref.momentum) << "step " << step << " node " << id;
        if (expect_no_fallback) {
          EXPECT_FALSE(rec.fallback) << "step " << step;
        }
      }
      // Every member of the committing round that finished normally recorded the step.
      for (std::int64_t m : ref.members) {
        if (killed(m) || evictable(m)) continue;
        if (result(m).exit == NodeExit::kFinished) {
          EXPECT_TRUE(by_node.count(m)) << "node " << m << " missed step " << step;
        }
      }
    }
    EXPECT_EQ(recs.size(), static_cast<std::size_t>(o_.outer_steps - o_.first_outer_step));
    if (!recs.empty()) {
      EXPECT_EQ(recs.begin()->first, o_.first_outer_step);
    }
  }

  // Events of one type across all nodes.
  std::vector<Event> all_of_type(const std::string& type) {
    std::vector<Event> out;
    for (std::int64_t id : ids())
      for (const Event& e : events(id))
        if (e.type == type) out.push_back(e);
    return out;
  }

  // Collective messages node `id` has sent so far.
  std::uint64_t sends(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return sends_[id];
  }
  ThreadRuntime& runtime() { return runtime_; }
  MemoryStore& store() { return store_; }
  // The store the nodes use: ClusterOptions::store, or store().
  Store& shared_store() { return o_.store ? *o_.store : store_; }

 private:
  struct Trigger {
    std::uint64_t k = 0;
    bool recovery_only = false;
    std::function<void()> action;
  };

  struct Node {
    Node(Store& shared) : store(shared) {}
    NodeStore store;
    NodeSink sink;
    std::unique_ptr<InnerWorker> owned_worker;
    SyntheticWorker* worker = nullptr;  // when the worker is the synthetic one
    std::unique_ptr<FaultTrigger> trigger;
    std::unique_ptr<FaultTrigger::Worker> trigger_worker;
    std::unique_ptr<FaultTrigger::Factory> trigger_factory;
    std::unique_ptr<DilocoNode> diloco;
    NodeResult result;
    std::atomic<bool> ended{false};  // run() returned (result is final)
    std::unique_ptr<std::thread> thread;
  };

  // An exchange whose outgoing bytes are a corrupted copy it owns (declared before `inner`, so
  // they outlive it).
  struct CorruptedExchange final : PendingExchange {
    std::vector<std::byte> bytes;
    std::unique_ptr<PendingExchange> inner;
    Received wait(double timeout_s) override { return inner->wait(timeout_s); }
  };

  // Counts each node's sends, fires its trigger, corrupts what a lying node sends.
  class TriggerTransport final : public ForwardingTransport {
   public:
    TriggerTransport(std::unique_ptr<Transport> inner, Cluster& c, std::int64_t id, bool recovery)
        : ForwardingTransport(std::move(inner)), c_(c), id_(id), recovery_(recovery) {}
    void send(int to, Tag tag, Payload msg, double timeout_s) override {
      c_.before_send(id_, recovery_);
      ForwardingTransport::send(to, tag, msg, timeout_s);
    }
    std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                    std::span<std::byte> into, Tag tag) override {
      c_.before_send(id_, recovery_);
      if (recovery_ || out.bytes.empty() || !c_.corrupting(id_))
        return ForwardingTransport::start_exchange(to, out, from, into, tag);
      auto x = std::make_unique<CorruptedExchange>();
      x->bytes.assign(out.bytes.begin(), out.bytes.end());
      x->bytes.back() ^= std::byte{0xFF};
      x->inner = ForwardingTransport::start_exchange(to, Payload::of(x->bytes), from, into, tag);
      return x;
    }

   private:
    Cluster& c_;
    std::int64_t id_;
    bool recovery_;
  };

  class Faults final : public TransportFactory {
   public:
    explicit Faults(Cluster& c) : c_(c) {}
    std::unique_ptr<Transport> connect(const EpochSpec& spec) override {
      const bool recovery = is_recovery_epoch(spec.epoch);
      const std::int64_t id = spec.members[spec.rank];
      if (!recovery) {
        std::lock_guard<std::mutex> lock(c_.mu_);
        if (c_.connect_failures_[id] > 0) {
          --c_.connect_failures_[id];
          throw PeerLostError(-1, "injected connect failure");
        }
      }
      return std::make_unique<TriggerTransport>(c_.network_.connect(spec), c_, id, recovery);
    }

   private:
    Cluster& c_;
  };

  void before_send(std::int64_t id, bool recovery) {
    std::function<void()> fire;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!recovery) ++sends_[id];
      auto it = triggers_.find(id);
      if (it == triggers_.end() || it->second.recovery_only != recovery) return;
      if (--it->second.k > 0) return;
      fire = std::move(it->second.action);
      triggers_.erase(it);
    }
    fire();
    if (killed(id)) throw PeerLostError(-1, "killed while sending");
  }

  Node* node(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_.at(id).get();
  }

  void launch(std::int64_t id, bool initial) {
    std::lock_guard<std::mutex> lock(mu_);
    next_id_ = std::max(next_id_, id + 1);
    launch_locked(id, initial);
  }

  void launch_locked(std::int64_t id, bool initial) {
    auto n = std::make_unique<Node>(shared_store());
    if (o_.make_worker) {
      n->owned_worker = o_.make_worker(id);
    } else {
      auto w = std::make_unique<SyntheticWorker>(id, o_.params, o_.boundaries, runtime_,
                                                 o_.inner_step_s, o_.phantom);
      n->worker = w.get();
      n->owned_worker = std::move(w);
      if (o_.on_launch) o_.on_launch(id, *n->worker);
    }
    InnerWorker* worker = n->owned_worker.get();
    TransportFactory* transports = &faults_;
    if (const auto it = o_.kill_at.find(id); it != o_.kill_at.end()) {
      n->trigger = std::make_unique<FaultTrigger>(
          it->second, [this, id](const std::string&) { kill(id); }, o_.inner_steps);
      n->trigger_worker = std::make_unique<FaultTrigger::Worker>(*worker, *n->trigger);
      n->trigger_factory = std::make_unique<FaultTrigger::Factory>(faults_, *n->trigger);
      worker = n->trigger_worker.get();
      transports = n->trigger_factory.get();
    }
    DilocoOptions d;
    d.inner_steps = o_.inner_steps;
    d.outer_steps = o_.outer_steps;
    d.codec = o_.codec;
    d.outer = o_.outer;
    d.local_ranks = o_.local_ranks;
    d.allreduce_timeout_s = o_.allreduce_timeout_s;
    d.barrier_before_allreduce = o_.barrier;
    d.max_chunk_bytes = o_.max_chunk_bytes;
    d.recovery.chunk_bytes = o_.recovery_chunk_bytes;
    d.recovery.timeout_s = 2.0;
    d.recovery.max_sources = o_.recovery_sources;
    d.recovery.blocking = o_.blocking_recovery;
    d.mesh.heartbeat_interval_s = o_.heartbeat_s;
    d.mesh.dead_after_s = o_.dead_after_s;
    d.mesh.initial_world = o_.initial;
    d.mesh.bandwidth_bps = o_.bandwidth_bps;
    d.mesh.admission_timeout_s = 20.0;
    d.mesh.round_timeout_s = 20.0;
    d.first_outer_step = o_.first_outer_step;
    if (o_.resume_momentum) d.initial_momentum = o_.resume_momentum(id);
    d.overlap = o_.overlap;
    if (o_.resume_pending) d.initial_pending = o_.resume_pending(id);
    d.fragments = o_.fragments;
    d.fragment_delay = o_.fragment_delay;
    d.fragment_alpha = o_.fragment_alpha;
    if (o_.resume_local) d.initial_local = o_.resume_local(id);
    d.codec_params = o_.codec_params;
    d.error_feedback = o_.error_feedback;
    d.sparse_collective = o_.sparse_collective;
    if (o_.resume_error_feedback) d.initial_error_feedback = o_.resume_error_feedback(id);
    if (o_.configure) o_.configure(d);
    d.on_outer_step = [this](const OuterStepView& v) { observe(v); };
    n->diloco = std::make_unique<DilocoNode>(*worker, n->store, *transports, runtime_, n->sink, d);
    Node* raw = n.get();
    nodes_[id] = std::move(n);
    raw->thread = std::make_unique<std::thread>([raw, id, initial] {
      try {
        raw->result = raw->diloco->run(initial, id);
      } catch (const std::exception& e) {  // ConfigError, CheckError: fail the test, not abort
        raw->result.exit = NodeExit::kLost;
        raw->result.what = std::string("uncaught: ") + e.what();
      }
      raw->ended = true;
    });
  }

  void observe(const OuterStepView& v) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      StepRecord rec{v.epoch,
                     v.members,
                     v.fallback,
                     std::vector<float>(v.outer_parameters.begin(), v.outer_parameters.end()),
                     std::vector<float>(v.momentum.begin(), v.momentum.end()),
                     std::vector<float>(v.pending.begin(), v.pending.end()),
                     std::vector<float>(v.local.begin(), v.local.end()),
                     std::vector<float>(v.error_feedback.begin(), v.error_feedback.end()),
                     std::string(v.data_ledger)};
      records_[v.outer_step][v.node] = std::move(rec);
      auto it = at_step_.find(v.outer_step);
      if (it != at_step_.end()) {
        fn = std::move(it->second);
        at_step_.erase(it);
      }
    }
    if (fn) fn();
  }

  ClusterOptions o_;
  ThreadRuntime runtime_;
  MemoryStore store_;
  InProcNetwork network_;
  Faults faults_;
  std::mutex mu_;
  std::int64_t next_id_ = 1;
  std::map<std::int64_t, std::unique_ptr<Node>> nodes_;
  std::set<std::int64_t> killed_, evictable_, corrupting_;
  std::map<std::int64_t, Trigger> triggers_;
  std::map<std::int64_t, int> connect_failures_;  // guarded by mu_
  std::map<std::int64_t, std::uint64_t> sends_;   // collective messages sent per node
  std::map<std::int64_t, std::function<void()>> at_step_;
  std::map<std::int64_t, std::int64_t> joined_at_;
  std::map<std::int64_t, std::map<std::int64_t, StepRecord>> records_;
};

// The configuration error of a one-node cluster of `o`: thrown when its node is built (the
// DilocoNode constructor checks the options), or the node's own exit reason.
// Node 4 of `c` (not started yet) dies at its second collective message of outer step 2, inside
// that step's collective; the cluster runs to its end, its invariants hold (the survivors' outer
// state stays bit-identical), a retry happened, and steps 2 onwards ran on nodes 1, 2, 3.
inline void run_with_node_4_killed_in_step_2s_collective(Cluster& c, std::int64_t outer_steps) {
  c.at_step(1, [&c] { c.on_send(4, 2, false, [&c] { c.kill(4); }); });
  c.start();
  c.join();
  c.check_invariants();
  EXPECT_FALSE(c.all_of_type("retry").empty());
  const auto steps = c.steps();
  for (std::int64_t t = 2; t < outer_steps; ++t)
    EXPECT_EQ(steps.at(t).begin()->second.members, (std::vector<std::int64_t>{1, 2, 3}));
}

// Runs `c` with a node joining at outer step 1 and expects it to finish as a member of the last
// step; returns its id.
inline std::int64_t run_with_a_joiner_at_step_1(Cluster& c, std::int64_t outer_steps) {
  c.join_at(1);
  c.run_and_check();
  const std::int64_t j = c.joiner_of(1);
  EXPECT_GT(j, 0);
  EXPECT_EQ(c.result(j).exit, NodeExit::kFinished) << c.result(j).what;
  EXPECT_TRUE(c.steps().at(outer_steps - 1).count(j));
  return j;
}

// Resumes `o` at outer step 2 from what a whole run of it recorded, carrying each node's
// streaming local copy (`local`) or error-feedback buffer (`error_feedback`) as a checkpoint
// would (and, overlapped, its pending pseudo-gradient: step 2's inner steps ran), and expects
// the resumed run bit-identical to the whole one. Returns whether the same resume without that
// state (the pending one kept) still reaches the whole run's outer parameters at step 2 (where
// the state matters, it does not).
inline bool resume_matches_and_without_state_would(const ClusterOptions& o, bool local,
                                                   bool error_feedback, bool pending = false) {
  Cluster whole(o);
  whole.run_and_check();
  const auto ref = whole.steps();
  constexpr std::int64_t kDone = 2;
  ClusterOptions r = o;
  resume_from(r, ref, kDone, (kDone + (pending ? 1 : 0)) * o.inner_steps, pending);
  const auto at_done = [&ref](std::int64_t id) -> const StepRecord& {
    return ref.at(kDone - 1).at(id);
  };
  if (local) r.resume_local = [at_done](std::int64_t id) { return at_done(id).local; };
  if (error_feedback)
    r.resume_error_feedback = [at_done](std::int64_t id) { return at_done(id).error_feedback; };
  Cluster resumed(r);
  resumed.run_and_check();
  expect_resumed_matches(resumed.steps(), ref, kDone, o.outer_steps);
  ClusterOptions without = r;
  without.resume_local = nullptr;
  without.resume_error_feedback = nullptr;
  Cluster other(without);
  other.run_and_check();
  return other.steps().at(kDone).at(1).params == ref.at(kDone).at(1).params;
}

inline std::string node_config_error(ClusterOptions o) {
  o.initial = 1;
  try {
    Cluster c(o);
    c.start();
    c.join();
    return c.result(1).what;
  } catch (const ConfigError& e) {
    return e.what();
  }
}

}  // namespace meridian::testing
