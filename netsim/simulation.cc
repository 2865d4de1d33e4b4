// The simulated run (see simulation.h). Engine driver (default): every node actor runs the
// engine's DilocoNode on the simulated backends. Model driver: the timeline per node and the
// membership protocol are modelled here on the engine's seams and the engine's ring all-reduce,
// heartbeats analytically (a crashed member is evicted dead_after_s after its crash, a leaving
// one at once: deathrattle).
#include "netsim/simulation.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <simgrid/s4u.hpp>

// After s4u.hpp (its own block, so include sorting keeps it there): it needs SimGrid's macros.
#include <simgrid/version.h>

#include "engine/codec/codec.h"
#include "engine/collective/ring_allreduce.h"
#include "engine/diloco/diloco.h"
#include "engine/error.h"
#include "netsim/churn.h"
#include "netsim/deferred_time.h"
#include "netsim/modeled_worker.h"
#include "netsim/platform.h"
#include "netsim/sim_runtime.h"
#include "netsim/sim_store.h"
#include "netsim/sim_transport.h"
#include "netsim/wan.h"
#include "netsim/wait_list.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();
// Recovery epochs live in their own number range so they never meet a membership epoch or one
// of its lanes' ring epochs (ring_epoch_id: the lane in bits 40 and up).
constexpr std::uint64_t kRecoveryEpochBase = std::uint64_t{1} << 61;

// What a node learns when a barrier completes.
struct SyncResult {
  bool finished = false;
  bool all_ok = true;
  std::uint64_t epoch = 0;
  std::vector<std::int64_t> members;
  int outer_step = 0;
  // Joiners this node must serve: (joiner node id, recovery epoch).
  std::vector<std::pair<std::int64_t, std::uint64_t>> serve;
};

struct Assignment {
  bool finished = false;
  bool founder = false;  // no members were left: the joiner starts the run again alone
  std::int64_t source = -1;
  std::uint64_t recovery_epoch = 0;
  std::uint64_t done_bytes = 0;
  int resumed = 0;
};

template <typename T>
T finished_result() {
  T r;
  r.finished = true;
  return r;
}

// Membership: the store-side state of the mesh (members, epochs, joiners, barriers). Nodes call
// it from their actors; every barrier arrival also costs a store round trip (charged by the
// caller). Actors run cooperatively in one OS thread and nothing here yields except the waits,
// so no lock is needed (and none could be left held by an actor killed with its host).
class Coordinator {
 public:
  Coordinator(const Scenario& sc, const Platform& pf, EventSink& sink, SimOptions opts)
      : sc_(sc), pf_(pf), sink_(sink), opts_(std::move(opts)), target_(sc.outer_steps()) {
    for (std::size_t i = 0; i < sc.network.sites.size(); ++i)
      site_rank_[sc.network.sites[i].name] = i;
  }

  void set_initial(std::vector<std::int64_t> members, const std::map<std::int64_t, int>& slot) {
    slot_ = slot;
    members_ = order(std::move(members));
    epoch_ = 1;
  }

  void register_node(std::int64_t node, int slot) { slot_[node] = slot; }

  bool finished() const { return finished_; }
  // Inner steps reached by the run: the first inner step of the outer step now running.
  std::int64_t inner_progress() const {
    return std::int64_t(std::max({0, outer_started_ - 1, engine_applied_})) * sc_.diloco.H;
  }

  // Barrier at an outer-step boundary (boundary = true) or after an all-reduce attempt (vote).
  SyncResult sync(std::int64_t node, bool boundary, bool ok) {
    const std::uint64_t gen = gen_;
    arrived_.insert(node);
    barrier_ok_ = barrier_ok_ && ok;
    for (;;) {
      if (gen_ != gen) return result_for(node);
      double ready_at = 0;
      bool complete = true;
      for (auto m : members_) {
        if (arrived_.count(m)) continue;
        auto d = dead_.find(m);
        if (d == dead_.end()) {
          complete = false;
          break;
        }
        ready_at =
            std::max(ready_at, d->second.first + (d->second.second ? 0 : sc_.diloco.dead_after_s));
      }
      const double now = sg4::Engine::get_clock();
      if (complete && now >= ready_at) {
        finalize(node, boundary);
        return result_for(node);
      }
      waiters_.wait_until(complete ? ready_at : kForever, [&] { return gen_ != gen; });
    }
  }

  // A joiner waits for a recovery source (or the end of the run).
  Assignment join_wait(std::int64_t node) {
    waiting_.insert(node);
    for (;;) {
      if (finished_) return finished_result<Assignment>();
      auto a = assigned_.find(node);
      if (a != assigned_.end()) {
        Assignment r = a->second;
        assigned_.erase(a);
        return r;
      }
      if (members_.empty() && arrived_.empty()) {
        // Everyone is gone: this joiner restarts the run from the last checkpoint alone.
        waiting_.erase(node);
        members_ = {node};
        new_epoch();
        Assignment a;
        a.founder = true;
        return a;
      }
      const std::uint64_t gen = gen_;
      waiters_.wait_until(kForever, [&] {
        return gen_ != gen || finished_ || (members_.empty() && arrived_.empty());
      });
    }
  }

  void recovery_progress(std::int64_t node, std::uint64_t bytes) { progress_[node] += bytes; }
  std::uint64_t recovery_done_bytes(std::int64_t node) { return progress_[node]; }

  void recovery_failed(std::int64_t node) {
    resumed_[node]++;
    waiting_.insert(node);
  }

  // After recovery: waits until a boundary admits the node.
  SyncResult await_admission(std::int64_t node) {
    ready_.insert(node);
    waiters_.notify_all();
    for (;;) {
      auto it = admitted_.find(node);
      if (it != admitted_.end()) {
        SyncResult r = it->second;
        admitted_.erase(it);
        return r;
      }
      if (finished_) return finished_result<SyncResult>();
      waiters_.wait_until(kForever, [&] { return admitted_.count(node) > 0 || finished_; });
    }
  }

  void node_failed(std::int64_t node, bool graceful) {
    dead_[node] = {sg4::Engine::get_clock(), graceful};
    waiting_.erase(node);
    ready_.erase(node);
    assigned_.erase(node);
    waiters_.notify_all();
  }

  // The churn controller waits here: until `time_s`, until progress reaches `inner_step`, or
  // until the run finishes. Returns false when the run finished.
  bool wait_for_event(double time_s, std::int64_t inner_step) {
    auto due = [&] {
      return inner_step >= 0 ? inner_progress() >= inner_step : sg4::Engine::get_clock() >= time_s;
    };
    waiters_.wait_until(inner_step >= 0 ? kForever : time_s, [&] { return finished_ || due(); });
    return !finished_;
  }

  // Engine driver: a node applied outer step `outer_step` (progress for step-based churn).
  void outer_step_applied(int outer_step) {
    if (outer_step + 1 <= engine_applied_) return;
    engine_applied_ = outer_step + 1;
    waiters_.notify_all();
  }

  // Ends the run early (nobody left and nobody to come).
  void finish() {
    finished_ = true;
    waiters_.notify_all();
  }

  // Outer steps completed (all but the one running, unless the run is over).
  int outer_done() const { return finished_ ? outer_started_ : std::max(0, outer_started_ - 1); }
  bool has_members() const { return !members_.empty() || !waiting_.empty() || !ready_.empty(); }

 private:
  std::vector<std::int64_t> order(std::vector<std::int64_t> m) const {
    // Ring order: grouped by site (scenario order) so the ring crosses each WAN gap once, then
    // by node id. A bottleneck-TSP ordering from measured bandwidth would go here.
    std::sort(m.begin(), m.end(), [&](std::int64_t a, std::int64_t b) {
      auto sa = site_rank_.at(pf_.sites[slot_.at(a)]), sb = site_rank_.at(pf_.sites[slot_.at(b)]);
      return sa != sb ? sa < sb : a < b;
    });
    return m;
  }

  void new_epoch() { ++epoch_; }

  SyncResult make_result(std::int64_t node) const {
    SyncResult r;
    r.finished = finished_;
    r.all_ok = last_ok_;
    r.epoch = epoch_;
    r.members = members_;
    // The outer step about to run (after a boundary) or running (after a vote).
    r.outer_step = finished_ ? outer_started_ : outer_started_ - 1;
    auto s = serve_.find(node);
    if (s != serve_.end()) r.serve = s->second;
    return r;
  }

  SyncResult result_for(std::int64_t node) {
    auto it = results_.find(node);
    MERIDIAN_CHECK(it != results_.end());
    SyncResult r = it->second;
    results_.erase(it);
    return r;
  }

  void finalize(std::int64_t by, bool boundary) {
    const double now = sg4::Engine::get_clock();
    std::vector<std::int64_t> next;
    bool lost = false;
    for (auto m : members_) {
      if (dead_.count(m) && !arrived_.count(m)) {
        lost = true;
        Event e{now, by, "fail_detected", {}};
        e.fields.add("failed", m).add("by", dead_.at(m).second ? "deathrattle" : "heartbeat");
        sink_.emit(e);
      } else if (!dead_.count(m)) {
        next.push_back(m);
      } else {
        lost = true;  // voted, then died: evicted now
      }
    }
    last_ok_ = barrier_ok_;
    serve_.clear();
    bool changed = lost || !barrier_ok_;
    if (boundary) {
      for (auto j : ready_) {
        next.push_back(j);
        changed = true;
      }
      // Joiners waiting for a source get one, spread over the members in ring order.
      std::size_t k = 0;
      for (auto j : waiting_) {
        if (next.empty()) break;
        std::int64_t src = -1;
        for (std::size_t t = 0; t < next.size() && src < 0; ++t) {
          auto c = next[(k + t) % next.size()];
          if (!ready_.count(c)) src = c;
        }
        if (src < 0) break;
        ++k;
        const std::uint64_t rep = kRecoveryEpochBase + (++recovery_epochs_);
        Assignment& a = assigned_[j];
        a.source = src;
        a.recovery_epoch = rep;
        a.done_bytes = progress_[j];
        a.resumed = resumed_[j];
        serve_[src].push_back({j, rep});
      }
      for (auto& [j, a] : assigned_) waiting_.erase(j);
      if (outer_started_ >= target_) finished_ = true;
    }
    if (changed) {
      members_ = order(next);
      new_epoch();
    }
    if (boundary && !finished_) ++outer_started_;
    results_.clear();
    for (auto m : arrived_) results_[m] = make_result(m);
    if (boundary) {
      for (auto j : ready_) admitted_[j] = make_result(j);
      ready_.clear();
    }
    arrived_.clear();
    barrier_ok_ = true;
    ++gen_;
    waiters_.notify_all();
    if (boundary && opts_.on_progress) opts_.on_progress(now, outer_done(), target_);
  }

  const Scenario& sc_;
  const Platform& pf_;
  EventSink& sink_;
  SimOptions opts_;
  const int target_;
  std::map<std::string, std::size_t> site_rank_;
  std::map<std::int64_t, int> slot_;

  WaitList waiters_;  // every state change notifies; waiters re-check their predicate
  std::uint64_t epoch_ = 0;
  std::vector<std::int64_t> members_;
  int outer_started_ = 0;
  int engine_applied_ = 0;  // engine driver: outer steps applied by some node
  bool finished_ = false;
  bool last_ok_ = true;
  std::uint64_t gen_ = 0;
  std::set<std::int64_t> arrived_;
  bool barrier_ok_ = true;
  std::map<std::int64_t, SyncResult> results_;
  std::map<std::int64_t, std::pair<double, bool>> dead_;  // node -> (time, graceful)
  std::set<std::int64_t> waiting_, ready_;
  std::map<std::int64_t, Assignment> assigned_;
  std::map<std::int64_t, SyncResult> admitted_;
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::uint64_t>>> serve_;
  std::map<std::int64_t, std::uint64_t> progress_;
  std::map<std::int64_t, int> resumed_;
  std::uint64_t recovery_epochs_ = 0;
};

// Passes events through and remembers the highest outer step completed (engine driver: the
// engine's nodes end the run, so the simulator learns the count from their events).
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
  std::unique_ptr<Coordinator> coord;
  std::vector<std::shared_ptr<double>> speed;  // per host slot
  std::map<int, std::int64_t> node_on_slot;    // running node id per slot
  std::int64_t next_node_id = 0;
  std::vector<std::uint64_t> buckets;
  int lanes = 1;       // simulated ring flows per node
  int lane_scale = 1;  // local ranks folded into one flow
  CodecId codec = CodecId::kInt8Prime;
  std::uint64_t recovery_bytes = 0;
  std::exception_ptr error;  // first unexpected error of any actor
  int initial_world = 0;     // nodes running at t = 0
  WorkerPlugin plugin;       // makes the engine driver's workers (default: ModeledWorker)
  NodeFactory make_node;     // builds each node (cli/compose)

  void emit(std::int64_t node, const char* type, JsonObject f) {
    sink.emit(Event{sg4::Engine::get_clock(), node, type, std::move(f)});
  }
};

JsonObject null_error(JsonObject o) { return o.add_raw("relative_error", "null"); }

// Runs every bucket on every lane, lane k on rings[k] (its own transport epoch, so its own TCP
// connections in the WAN model); returns false (after aborting) when the round failed.
bool run_allreduce(World& w, const std::vector<std::unique_ptr<Transport>>& rings, SimRuntime& rt,
                   int outer_step, RingStats& total, std::string& reason) {
  const int L = w.sc.diloco.local_ranks;
  std::vector<RingStats> stats(w.lanes);
  std::vector<std::unique_ptr<Activity>> acts;
  const std::uint32_t nb = static_cast<std::uint32_t>(w.buckets.size() - 1);
  const auto codec = make_codec(w.codec);
  for (int lane = 0; lane < w.lanes; ++lane) {
    acts.push_back(rt.spawn("ring" + std::to_string(lane), [&, lane] {
      for (std::uint32_t b = 0; b < nb; ++b) {
        // Each local rank holds 1/L of the bucket (FSDP shard); a folded lane carries lane_scale.
        const std::uint64_t elems = w.buckets[b + 1] - w.buckets[b];
        const std::uint64_t count = (elems * w.lane_scale + L - 1) / L;
        RingOptions o;
        o.max_chunk_bytes = w.sc.diloco.max_chunk_bytes * w.lane_scale;
        o.timeout_s = w.sc.diloco.timeout_s;
        o.outer_step = static_cast<std::uint64_t>(outer_step);
        o.bucket = static_cast<std::uint32_t>(lane) * nb + b;
        RingStats s =
            ring_all_reduce(*rings[lane], rt, *codec, ReduceBuffer::phantom(count), o);
        stats[lane].participants = s.participants;
        stats[lane].bytes_sent += s.bytes_sent;
        stats[lane].bytes_received += s.bytes_received;
      }
    }));
  }
  bool ok = true;
  for (auto& a : acts) {
    try {
      a->join();
    } catch (const PeerLostError& e) {
      if (ok) reason = e.what();
      ok = false;
      for (auto& t : rings) t->abort();
    } catch (const TimeoutError& e) {
      if (ok) reason = e.what();
      ok = false;
      for (auto& t : rings) t->abort();
    }
  }
  for (auto& s : stats) {
    total.participants = std::max(total.participants, s.participants);
    total.bytes_sent += s.bytes_sent;
    total.bytes_received += s.bytes_received;
  }
  return ok;
}

// Sends the recovery payload to a joiner (runs as an activity of the serving node).
void serve_recovery(World& w, std::int64_t me, std::int64_t joiner, std::uint64_t rep,
                    std::uint64_t from_byte) {
  auto t = w.net.connect({rep, 0, {me, joiner}, w.sc.diloco.timeout_s});
  const std::uint64_t chunk = w.sc.recovery.chunk_bytes * w.lane_scale;
  try {
    for (std::uint64_t off = from_byte; off < w.recovery_bytes; off += chunk) {
      const std::uint64_t n = std::min(chunk, w.recovery_bytes - off);
      t->send(1, make_tag(TagKind::kRecovery, off / chunk), Payload::phantom(n),
              w.sc.diloco.timeout_s);
    }
  } catch (const PeerLostError&) {
  } catch (const TimeoutError&) {
  }
}

// The member loop: from a boundary result until the run ends.
void member_loop(World& w, std::int64_t me, SimRuntime& rt, ModeledWorker& worker, Store& store,
                 SyncResult res) {
  std::uint64_t epoch = 0;
  std::vector<std::unique_ptr<Transport>> rings;  // one per lane, as the engine's shards
  std::vector<std::unique_ptr<Activity>> serving;
  auto join_epoch = [&](const SyncResult& r) {
    if (r.epoch == epoch) return;
    epoch = r.epoch;
    const auto pos = std::find(r.members.begin(), r.members.end(), me) - r.members.begin();
    rings.clear();
    for (int lane = 0; lane < w.lanes; ++lane)
      rings.push_back(w.net.connect({ring_epoch_id(epoch, lane), static_cast<int>(pos), r.members,
                                     w.sc.diloco.timeout_s}));
    JsonObject f;
    f.add("epoch", epoch).add("outer_step", r.outer_step).add("members", r.members);
    w.emit(me, "epoch_formed", f);
  };
  auto barrier = [&](bool boundary, bool ok, int k) {
    store.add("barrier/" + std::to_string(k) + (boundary ? "/b" : "/v"), 1);  // network cost
    pay_deferred_time();
    return w.coord->sync(me, boundary, ok);
  };
  const int H = w.sc.diloco.H;
  while (!res.finished) {
    const int k = res.outer_step;
    join_epoch(res);
    for (auto& [joiner, rep] : res.serve) {
      const std::uint64_t from = w.coord->recovery_done_bytes(joiner);
      serving.push_back(
          rt.spawn("serve" + std::to_string(joiner), [&w, me, joiner = joiner, rep = rep, from] {
            serve_recovery(w, me, joiner, rep, from);
          }));
    }
    const double t_inner = rt.now_s();
    InnerStepsResult inner = worker.run_inner_steps(H);
    {
      JsonObject f;
      f.add("outer_step", k)
          .add("steps", inner.steps)
          .add("tokens", inner.tokens)
          .add("start_s", t_inner)
          .add("compute_s", inner.compute_s)
          .add_raw("loss", "null");
      w.emit(me, "inner_steps", f);
    }
    const double t_ar = rt.now_s();
    int attempt = 0;
    int participants = 0;
    for (;;) {
      RingStats st;
      std::string reason;
      const double t0 = rt.now_s();
      bool ok = run_allreduce(w, rings, rt, k, st, reason);
      participants = static_cast<int>(rings.front()->size());
      JsonObject f;
      f.add("outer_step", k)
          .add("bucket", -1)
          .add("epoch", epoch)
          .add("attempt", attempt)
          .add("codec", w.sc.diloco.codec)
          .add("elements", worker.parameter_count())
          .add("participants", participants)
          .add("bytes_sent", st.bytes_sent)
          .add("bytes_received", st.bytes_received)
          .add("start_s", t0)
          .add("elapsed_s", rt.now_s() - t0)
          .add("ok", ok);
      w.emit(me, "allreduce", null_error(f));
      SyncResult vote = barrier(false, ok, k);
      if (vote.finished) return;
      if (vote.all_ok) {
        join_epoch(vote);
        break;
      }
      ++attempt;
      JsonObject rf;
      rf.add("outer_step", k)
          .add("attempt", attempt)
          .add("reason", ok ? std::string("a peer's round failed") : reason);
      w.emit(me, "retry", rf);
      join_epoch(vote);
      if (attempt > w.sc.diloco.retries) {
        JsonObject ff;
        ff.add("outer_step", k)
            .add("reason", "all-reduce failed " + std::to_string(attempt) + " times");
        w.emit(me, "fallback", ff);
        break;
      }
    }
    const double allreduce_s = rt.now_s() - t_ar;
    const double t_opt = rt.now_s();
    rt.compute_s(w.sc.diloco.outer_opt_s);
    {
      JsonObject f;
      f.add("outer_step", k)
          .add("epoch", epoch)
          .add("participants", participants)
          .add("inner_s", inner.compute_s)
          .add("allreduce_s", allreduce_s)
          .add("outer_opt_s", rt.now_s() - t_opt)
          .add("tokens", inner.tokens)
          .add_raw("loss", "null");
      w.emit(me, "outer_step", f);
    }
    if (w.sc.diloco.checkpoint_s > 0) {
      const double t_ck = rt.now_s();
      rt.compute_s(w.sc.diloco.checkpoint_s);
      JsonObject f;
      f.add("outer_step", k)
          .add("bytes", std::uint64_t(worker.parameter_count()) * 4 * w.sc.recovery.state_copies)
          .add("elapsed_s", rt.now_s() - t_ck);
      w.emit(me, "checkpoint", f);
    }
    res = barrier(true, true, k + 1);
  }
  for (auto& s : serving) s->join();
}

void node_main(World& w, std::int64_t me, int slot, bool initial) {
  SimRuntime rt(w.pf.hosts[slot]);
  ModeledWorker worker(w.sc, rt, w.speed[slot]);
  auto store = w.store->client(w.pf.hosts[slot]);
  {
    JsonObject f;
    f.add("initial", initial).add("host", w.pf.names[slot]);
    w.emit(me, "node_started", f);
  }
  auto first_boundary = [&] {
    store->add("barrier/start", 1);
    pay_deferred_time();
    return w.coord->sync(me, true, true);
  };
  if (initial) {
    member_loop(w, me, rt, worker, *store, first_boundary());
    return;
  }
  w.emit(me, "join_requested", {});
  store->set("join/" + std::to_string(me), w.pf.names[slot]);
  pay_deferred_time();
  for (;;) {
    Assignment a = w.coord->join_wait(me);
    if (a.finished) return;
    if (a.founder) {
      member_loop(w, me, rt, worker, *store, first_boundary());
      return;
    }
    const std::uint64_t todo = w.recovery_bytes - a.done_bytes;
    {
      JsonObject f;
      f.add("sources", std::vector<std::int64_t>{a.source}).add("bytes", todo);
      w.emit(me, "recovery_started", f);
    }
    const double t0 = rt.now_s();
    auto t = w.net.connect({a.recovery_epoch, 1, {a.source, me}, w.sc.diloco.timeout_s});
    const std::uint64_t chunk = w.sc.recovery.chunk_bytes * w.lane_scale;
    try {
      for (std::uint64_t off = a.done_bytes; off < w.recovery_bytes; off += chunk) {
        Received r =
            t->recv(0, make_tag(TagKind::kRecovery, off / chunk), {}, w.sc.diloco.timeout_s);
        w.coord->recovery_progress(me, r.wire_bytes);
      }
    } catch (const PeerLostError&) {
      w.coord->recovery_failed(me);
      continue;
    } catch (const TimeoutError&) {
      w.coord->recovery_failed(me);
      continue;
    }
    JsonObject f;
    f.add("bytes", todo)
        .add("elapsed_s", rt.now_s() - t0)
        .add("sources", std::vector<std::int64_t>{a.source})
        .add("resumed", a.resumed);
    w.emit(me, "recovery_finished", f);
    break;
  }
  SyncResult res = w.coord->await_admission(me);
  if (res.finished) return;
  JsonObject f;
  f.add("epoch", res.epoch).add("outer_step", res.outer_step);
  w.emit(me, "admitted", f);
  member_loop(w, me, rt, worker, *store, std::move(res));
}

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

// The engine's own node (run.driver: engine): ElasticMesh membership with heartbeats through
// the simulated store, the engine's live recovery and its ring all-reduce. Aggregation folds
// the L local ranks into one ring (local_ranks 1, L× window and chunk) as in the netsim driver.
void engine_node_main(World& w, std::int64_t me, int slot, bool initial, int initial_world) {
  SimRuntime rt(w.pf.hosts[slot]);
  const NodeWorkerContext ctx{me, slot, static_cast<int>(w.pf.hosts.size()), &rt, w.speed[slot]};
  std::unique_ptr<InnerWorker> owned_worker =
      w.plugin.make_worker ? w.plugin.make_worker(ctx)
                           : std::make_unique<ModeledWorker>(w.sc, rt, w.speed[slot]);
  InnerWorker& worker = *owned_worker;
  auto store = w.store->client(w.pf.hosts[slot]);
  DilocoOptions o = config::diloco_options(w.sc, config::Mode::kSimulate);
  // What only the simulator knows: the wire codec it resolved, the L local ranks folded into
  // one ring when aggregated (L× chunks), the host's name for node_started, the initial world.
  o.codec = w.codec;
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
  // as in the netsim driver (before the next inner steps).
  o.on_outer_step = [&w, &rt, &worker, &ctx, me](const OuterStepView& v) {
    w.coord->outer_step_applied(static_cast<int>(v.outer_step));
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
  w.coord->register_node(id, slot);
  w.net.add_node(id, w.pf.hosts[slot]);
  if (w.sc.run.driver == "engine") {
    sg4::Actor::create("node" + std::to_string(id), w.pf.hosts[slot], [&w, id, slot, initial] {
      guarded(w, [&] { engine_node_main(w, id, slot, initial, w.initial_world); });
    });
    return id;
  }
  sg4::Actor::create("node" + std::to_string(id), w.pf.hosts[slot], [&w, id, slot, initial] {
    guarded(w, [&] { node_main(w, id, slot, initial); });
  });
  return id;
}

void replay_churn(World& w, const ChurnTrace& trace) {
  for (const auto& e : trace.events) {
    const bool go = trace.by_step ? w.coord->wait_for_event(0, static_cast<std::int64_t>(e.at))
                                  : w.coord->wait_for_event(e.at, -1);
    if (!go) return;
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
        w.coord->node_failed(id, graceful);
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

SimOutcome run_simulation(const Scenario& sc, EventSink& sink, const SimOptions& options) {
  // Validate inputs before any SimGrid state exists.
  const auto slots = host_slot_names(sc);
  std::set<std::string> running;
  {
    std::size_t i = 0;
    for (auto& g : sc.network.nodes)
      for (int c = 0; c < g.count; ++c, ++i)
        if (g.start) running.insert(slots[i]);
  }
  ChurnTrace trace;
  // churn.trace is resolved against the run file's folder by its reader.
  if (!sc.churn_trace.empty()) trace = load_churn(sc.churn_trace, slots, running);
  const CodecId codec = parse_codec(sc.diloco.codec);
  const bool engine_driver = sc.run.driver == "engine";
  if (sc.worker != options.worker.kind)
    throw ConfigError(sc.file + ": key 'worker': '" + sc.worker +
                      "' needs its worker plugin (netsim::resolve_worker), got '" +
                      options.worker.kind + "'");
  if (!options.make_node)
    throw Error("netsim::run_simulation: SimOptions::make_node is not set "
                "(compose::simulation_options sets it)");
  if (options.worker.make_worker && !engine_driver)
    throw ConfigError(sc.file + ": key 'run.driver': expected engine with worker: " + sc.worker);

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
  configure_network(e, sc, sc.diloco.aggregate ? L : 1);

  OuterStepCounter counting(sink);
  World w(sc, counting, build_platform(e, sc, sc.diloco.aggregate ? L : 1));
  auto wan = std::make_shared<WanModel>(sc, w.pf, sc.diloco.aggregate ? L : 1, L);
  wan->install(e);
  w.net.set_wan(wan);
  w.codec = codec;
  w.plugin = options.worker;
  w.make_node = options.make_node;
  start_notifier(w.pf.coordinator);
  w.store = std::make_unique<SimStoreServer>(w.pf.coordinator, !options.message_level_keepalives,
                                             sc.network.store_quorum_rtt_s());
  w.coord = std::make_unique<Coordinator>(sc, w.pf, sink, options);
  w.buckets = scenario_buckets(sc);
  w.lanes = sc.diloco.aggregate ? 1 : L;
  w.lane_scale = sc.diloco.aggregate ? L : 1;
  w.recovery_bytes = sc.model.param_count() * 4 * std::uint64_t(sc.recovery.state_copies);
  for (std::size_t i = 0; i < w.pf.hosts.size(); ++i)
    w.speed.push_back(std::make_shared<double>(w.pf.speed_factor[i]));

  {
    JsonObject metrics;
    metrics.add("param_count", sc.model.param_count())
        .add("flops_per_token", sc.model.flops_per_token())
        .add("tokens_per_inner_step", sc.tokens_per_inner_step())
        .add("gpus_per_node", sc.hardware.gpus_per_node)
        .add("peak_flops_per_gpu", sc.hardware.peak_flops_per_gpu)
        .add("H", sc.diloco.H)
        .add("codec", sc.diloco.codec)
        .add("local_ranks", L);
    JsonObject versions;
    versions.add("meridian", "0.1.0").add("simgrid", SIMGRID_VERSION_STRING);
    JsonObject cfg = sc.to_json();
    cfg.add("platform", w.pf.to_json());
    // What SimGrid was actually given: aggregated lanes carry L flows' bytes and window.
    JsonObject simulated;
    simulated.add("network_model", sc.network.model)
        .add("tcp_gamma_bytes", sc.network.tcp_gamma_bytes * (sc.diloco.aggregate ? L : 1))
        .add("ring_flows_per_node", w.lanes)
        .add("local_ranks_per_flow", w.lane_scale)
        .add("driver", sc.run.driver)
        .add("store_small_message_bytes", kStoreSmallMessageBytes)
        .add("store_small_message_cost", "route latency + bytes / bottleneck bandwidth, no flow")
        .add("store_keepalives", options.message_level_keepalives ? "message" : "analytic");
    simulated.add("wan", wan->to_json());
    cfg.add("simulated", simulated);
    if (options.worker.make_worker) cfg.add("trainer", options.worker.config);
    JsonObject f;
    f.add("mode", options.worker.mode)
        .add("seed", sc.run.seed)
        .add("command", options.command)
        .add("versions", versions)
        .add("metrics", metrics)
        .add("config", cfg);
    sink.emit(Event{0.0, -1, "config", f});
  }

  std::vector<std::int64_t> initial;
  std::map<std::int64_t, int> slot_of;
  std::vector<int> initial_slots;
  for (std::size_t i = 0; i < w.pf.hosts.size(); ++i) {
    if (w.pf.start[i]) {
      initial.push_back(static_cast<std::int64_t>(initial_slots.size()));
      slot_of[initial.back()] = static_cast<int>(i);
      initial_slots.push_back(static_cast<int>(i));
    } else {
      w.pf.hosts[i]->turn_off();
    }
  }
  w.coord->set_initial(initial, slot_of);
  w.initial_world = static_cast<int>(initial.size());
  for (auto slot : initial_slots) start_node(w, slot, true);
  auto churn = sg4::Actor::create("churn", w.pf.coordinator,
                                  [&w, &trace] { guarded(w, [&] { replay_churn(w, trace); }); });
  // The engine's nodes end the run themselves; pending churn events then no longer matter.
  if (engine_driver) churn->daemonize();

  // Interruption and progress, from SimGrid's clock: the hook runs in the maestro on every
  // advance; a stop request wakes an actor that ends every other one (a kill unwinds each
  // actor's stack, as at a crash), and the run ends with `run_interrupted`.
  const int planned = sc.outer_steps();
  std::string interrupted;
  auto stop = sg4::Semaphore::create(0);
  sg4::Actor::create("interrupt", w.pf.coordinator, [stop] {
    stop->acquire();
    sg4::Actor::kill_all();
  })->daemonize();
  std::uint64_t advances = 0;
  connect_time_advance_hook();
  time_advance_hook() = [&] {
    if (++advances % 256 != 0) return;
    if (options.on_progress)
      options.on_progress(sg4::Engine::get_clock(),
                          engine_driver ? counting.outer_steps() : w.coord->outer_done(), planned);
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
  if (w.error) std::rethrow_exception(w.error);
  const double end = sg4::Engine::get_clock();
  const int outer_done = engine_driver ? counting.outer_steps() : w.coord->outer_done();
  JsonObject f;
  f.add("simulated_s", end).add("outer_steps", outer_done).add("outer_steps_planned", planned);
  if (!interrupted.empty()) f.add("reason", interrupted);
  sink.emit(Event{end, -1, interrupted.empty() ? "run_finished" : "run_interrupted", f});
  SimOutcome out{end,      outer_done,         planned, interrupted, w.net.messages(),
                 w.net.wire_bytes(), w.store->calls()};
  return out;
}

}  // namespace meridian::netsim
