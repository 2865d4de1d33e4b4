// DilocoNode: the outer loop. Every recoverable error of a round (lost peer, timeout, bad
// message) is handled here, in one place: the round is reported failed and the coordinator's
// next record says whether to retry, fall back or go on.
#include "engine/core/diloco/diloco.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "engine/core/util/finite.h"

namespace meridian {
namespace {

// Bound on the opaque progress string a source may send, with the data ledger before it
// (nothing is allocated beyond it).
constexpr std::uint64_t kMaxProgressBytes = std::uint64_t{1} << 20;

void append_floats(std::vector<std::byte>& out, std::span<const float> v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  out.insert(out.end(), p, p + v.size_bytes());
}

// Streaming with tau > 0: the fragments' syncs run on one activity for the whole round, fed
// fragment by fragment as the node's own activity reaches each fragment's point (an activity per
// fragment cost the simulator a context each: 1.8x the wall of a blocking intellect1-full at
// P = 16). Stopping it (stop(), or the destructor) lets the activity end without the fragments
// not posted yet.
class FragmentSyncs {
 public:
  // sync(p, blamed): fragment p's barrier and all-reduce; whether it succeeded, and whom it blames.
  using Sync = std::function<bool(int, std::vector<std::int64_t>&)>;

  FragmentSyncs(Runtime& runtime, int fragments, Sync sync)
      : mu_(runtime.make_mutex()),
        cv_(runtime.make_condvar()),
        synced_(static_cast<std::size_t>(fragments), 0),
        blamed_(static_cast<std::size_t>(fragments)) {
    activity_ = runtime.spawn("fragment-syncs", [this, fragments, sync = std::move(sync)] {
      for (int p = 0; p < fragments; ++p) {
        {
          LockGuard lock(*mu_);
          wait_until([&] { return posted_ >= p || stop_; });
          if (posted_ < p) return;
        }
        std::vector<std::int64_t> blamed;
        const bool ok = sync(p, blamed);
        LockGuard lock(*mu_);
        synced_[static_cast<std::size_t>(p)] = ok;
        blamed_[static_cast<std::size_t>(p)] = std::move(blamed);
        finished_ = p;
        cv_->notify_all();
      }
    });
  }
  FragmentSyncs(const FragmentSyncs&) = delete;
  FragmentSyncs& operator=(const FragmentSyncs&) = delete;
  ~FragmentSyncs() { stop(); }

  // Fragment p's pseudo-gradient is taken: its sync may start.
  void post(int p) {
    LockGuard lock(*mu_);
    posted_ = p;
    cv_->notify_all();
  }
  // Waits for fragment p's sync (each is bounded by its own timeouts); whether it succeeded, and
  // whom it blamed (moved into `blamed`).
  bool wait(int p, std::vector<std::int64_t>& blamed) {
    LockGuard lock(*mu_);
    wait_until([&] { return finished_ >= p; });
    blamed = std::move(blamed_[static_cast<std::size_t>(p)]);
    return synced_[static_cast<std::size_t>(p)] != 0;
  }
  // No more fragments this round: joins the activity.
  void stop() {
    if (!activity_) return;
    {
      LockGuard lock(*mu_);
      stop_ = true;
      cv_->notify_all();
    }
    activity_->join();
    activity_.reset();
  }

 private:
  void wait_until(const std::function<bool()>& done) {
    while (!done()) cv_->wait_for(*mu_, 3600.0);
  }

  std::unique_ptr<Mutex> mu_;
  std::unique_ptr<CondVar> cv_;
  // Guarded by mu_: the last fragment posted / synced, whether to stop, each sync's outcome.
  int posted_ = -1, finished_ = -1;
  bool stop_ = false;
  std::vector<char> synced_;
  std::vector<std::vector<std::int64_t>> blamed_;
  std::unique_ptr<Activity> activity_;
};

}  // namespace

const char* node_exit_name(NodeExit e) {
  switch (e) {
    case NodeExit::kFinished:
      return "finished";
    case NodeExit::kLeft:
      return "left";
    case NodeExit::kEvicted:
      return "evicted";
    case NodeExit::kLost:
      return "lost";
  }
  return "?";
}

const char* overlap_name(Overlap o) {
  switch (o) {
    case Overlap::kNone:
      return "none";
    case Overlap::kDelayed:
      return "delayed";
    case Overlap::kEager:
      return "eager";
  }
  return "?";
}

Overlap parse_overlap(std::string_view name) {
  for (Overlap o : kAllOverlaps)
    if (name == overlap_name(o)) return o;
  throw ConfigError("diloco.overlap: '" + std::string(name) +
                    "' is not one of none, delayed, eager");
}

DilocoNode::DilocoNode(InnerWorker& worker, Store& store, TransportFactory& transports,
                       Runtime& runtime, EventSink& events, DilocoOptions options)
    : worker_(worker),
      store_(store),
      transports_(transports),
      runtime_(runtime),
      events_(events),
      options_(std::move(options)),
      codec_(make_codec(options_.codec, options_.codec_params)),
      ring_codec_(codec_->sparse() ? make_codec(CodecId::kInt8Prime) : nullptr),
      mu_(runtime.make_mutex()) {
  if (options_.inner_steps < 1) throw ConfigError("diloco: inner_steps must be >= 1");
  if (options_.local_ranks < 1) throw ConfigError("diloco: local_ranks must be >= 1");
  options_.mesh.outer_steps = options_.outer_steps;
  options_.mesh.first_outer_step = options_.first_outer_step;
  if (options_.first_outer_step < 0) throw ConfigError("diloco: first_outer_step must be >= 0");
  const int h = options_.inner_steps, p = options_.fragments;
  if (p < 1) throw ConfigError("diloco.fragments must be >= 1, got " + std::to_string(p));
  if (p > h)
    throw ConfigError("diloco.fragments: " + std::to_string(p) +
                      " fragments need H >= " + std::to_string(p) +
                      " inner steps (one part of the H steps each); H is " + std::to_string(h));
  if (options_.fragment_delay < 0 || options_.fragment_delay > h / p)
    throw ConfigError("diloco.fragment_delay must be in [0, H / fragments] = [0, " +
                      std::to_string(h / p) + "] (a fragment's sync ends within its part), got " +
                      std::to_string(options_.fragment_delay));
  if (!(options_.fragment_alpha >= 0.0f && options_.fragment_alpha <= 1.0f))
    throw ConfigError("diloco.fragment_alpha must be in [0, 1], got " +
                      std::to_string(options_.fragment_alpha));
  if (options_.streaming() && options_.overlap != Overlap::kNone)
    throw ConfigError(std::string("diloco: streaming (fragments, fragment_delay, fragment_alpha) "
                                  "and overlap: ") +
                      overlap_name(options_.overlap) +
                      " are two ways of overlapping the sync; choose one");
  if (!options_.initial_local.empty() && !options_.streaming())
    throw ConfigError("diloco: local parameters to resume from need streaming (diloco.fragments)");
  if (!(options_.error_feedback >= 0.0f && options_.error_feedback <= 1.0f))
    throw ConfigError("diloco.error_feedback must be in [0, 1], got " +
                      std::to_string(options_.error_feedback));
  if (options_.error_feedback > 0.0f && !sparse())
    throw ConfigError("diloco.error_feedback needs a sparse codec (topk): with codec " +
                      std::string(codec_->name()) + " the ring all-reduce quantizes partial "
                      "sums, so no node knows what it sent");
  if (options_.sparse_collective != SparseCollective::kAuto && !sparse())
    throw ConfigError("diloco.sparse_collective needs a sparse codec (topk); with codec " +
                      std::string(codec_->name()) + " the dense ring sums the encodings");
  if (!options_.initial_error_feedback.empty() && !sparse())
    throw ConfigError("diloco: an error-feedback buffer to resume from needs a sparse codec");
  if (!options_.initial_pending.empty() && !overlapped())
    throw ConfigError("diloco: a pending pseudo-gradient to resume from needs diloco.overlap");
  // Cut here, not in run(): a configuration error is the constructor's (a simulation reports it
  // before any node's activities start).
  const std::vector<Bucket> buckets =
      make_buckets(worker_.bucket_boundaries(), worker_.parameter_count());
  shards_ = shard_buckets(buckets, options_.local_ranks);
  if (options_.streaming())
    fragments_ = make_fragments(buckets, options_.fragments, options_.local_ranks);
}

DilocoNode::~DilocoNode() {
  join_phase();
  join_servers();
  if (mesh_) mesh_->stop();
}

void DilocoNode::request_leave() {
  LockGuard lock(*mu_);
  leave_ = true;
}

bool DilocoNode::leave_requested() {
  LockGuard lock(*mu_);
  return leave_;
}

void DilocoNode::emit(const std::string& type, JsonObject fields) {
  events_.emit(Event{runtime_.now_s(), id_, type, std::move(fields)});
}

void DilocoNode::initialise_outer_state() {
  count_ = worker_.parameter_count();
  const std::span<float> params = worker_.parameters();
  phantom_ = params.empty() && count_ > 0;
  if (!phantom_) MERIDIAN_CHECK_EQ(params.size(), count_);
  outer_.assign(params.begin(), params.end());
  optimizer_ = std::make_unique<OuterOptimizer>(phantom_ ? 0 : count_, options_.outer);
  if (!options_.initial_momentum.empty()) {
    MERIDIAN_CHECK_EQ(options_.initial_momentum.size(), optimizer_->momentum().size());
    std::copy(options_.initial_momentum.begin(), options_.initial_momentum.end(),
              optimizer_->momentum().begin());
    options_.initial_momentum = {};  // no second copy for the run's length
  }
  if (!options_.initial_pending.empty()) {
    if (!phantom_) {
      MERIDIAN_CHECK_EQ(options_.initial_pending.size(), count_);
      delta_ = std::move(options_.initial_pending);
      non_finite_ = check_pseudo_gradient(options_.first_outer_step, 0, count_);
    }
    options_.initial_pending = {};
    pending_ = true;
    resumed_pending_ = true;
  }
  if (sparse() && !phantom_) {
    feedback_.assign(count_, 0.0f);
    if (!options_.initial_error_feedback.empty()) {
      MERIDIAN_CHECK_EQ(options_.initial_error_feedback.size(), count_);
      feedback_ = std::move(options_.initial_error_feedback);
      if (const std::uint64_t bad = count_non_finite(feedback_); bad > 0)
        throw ConfigError("diloco: the error-feedback buffer to resume from holds " +
                          std::to_string(bad) + " non-finite values");
    }
  }
  options_.initial_error_feedback = {};
  const std::int64_t per_step = worker_.samples_per_step();
  data_ = !phantom_ && per_step > 0;
  if (data_) {
    const std::int64_t per_node = per_step * options_.inner_steps;
    if (options_.initial_data_ledger.empty()) {
      ledger_ = DataLedger(per_node);
    } else {
      ledger_ = DataLedger::decode(options_.initial_data_ledger);
      if (ledger_.per_node() != per_node)
        throw ConfigError("diloco: the data ledger to resume from plans " +
                          std::to_string(ledger_.per_node()) +
                          " samples per node and outer step, this run " + std::to_string(per_node) +
                          " (H x the worker's samples per step)");
    }
  }
  options_.initial_data_ledger = {};
  if (!options_.initial_local.empty()) {
    if (!phantom_) {
      MERIDIAN_CHECK_EQ(options_.initial_local.size(), count_);
      std::copy(options_.initial_local.begin(), options_.initial_local.end(), params.begin());
      worker_.parameters_updated();
    }
    options_.initial_local = {};
  }
}

NodeResult DilocoNode::run(bool initial, std::int64_t node_id) {
  NodeResult result;
  mesh_ = std::make_unique<ElasticMesh>(store_, runtime_, events_, options_.mesh);
  recovery_ = options_.recovery;
  recovery_.connect_timeout_s = connect_timeout_s();
  recovery_.peer_gone = [mesh = mesh_.get()](std::int64_t node) { return mesh->gone(node); };
  try {
    id_ = mesh_->start(initial, node_id);
    result.node = id_;
    initialise_outer_state();
    RoundRecord r = mesh_->wait_admitted();
    if (r.rank_of(id_) < 0) {  // the run ended while this node was queued
      result.what = "the run ended before a boundary admitted this node";
      emit("not_admitted", JsonObject().add("outer_step", r.outer_step).add("reason", result.what));
    }
    if (r.is_joiner(id_)) recover(r);
    while (true) {
      if (options_.outer_steps > 0 && r.outer_step >= options_.outer_steps) {
        result.exit = NodeExit::kFinished;
        break;
      }
      const RoundOutcome out = play_round(r);
      const bool leaving = leave_requested();
      if (leaving) mesh_->announce_leave();
      mesh_->report(r, out.ok, out.blamed, out.sit_out, !out.connected);
      if (leaving) {
        result.exit = NodeExit::kLeft;
        break;
      }
      const RoundRecord next = mesh_->next_round(r);
      if (next.rank_of(id_) < 0) {
        result.exit = NodeExit::kEvicted;
        result.what = "not a member of round " + std::to_string(next.round) +
                      " (removed by the coordinator" +
                      (next.reason.empty() ? "" : ": " + next.reason) + ")";
        break;
      }
      if (next.prev == RoundPrev::kRetry) {
        emit("retry", JsonObject()
                          .add("outer_step", next.outer_step)
                          .add("attempt", next.attempt)
                          .add("reason", next.reason));
      } else {
        apply(r, next);
        ++result.outer_steps_applied;
      }
      r = next;
    }
  } catch (const PeerLostError& e) {  // this node is gone: its store or transports are dead
    result.exit = NodeExit::kLost;
    result.what = e.what();
  } catch (const TimeoutError& e) {  // admission, a round record or a recovery did not come
    result.exit = NodeExit::kLost;
    result.what = e.what();
  } catch (const ProtocolError& e) {  // a peer or the store sent something invalid
    result.exit = NodeExit::kLost;
    result.what = e.what();
  }
  // ConfigError and CheckError propagate: they are the caller's or a bug, not churn.
  join_phase();  // the next step's inner steps, if they were running (bounded by H)
  rings_.clear();
  join_servers();
  emit("node_left", JsonObject().add("graceful", result.exit == NodeExit::kFinished ||
                                                     result.exit == NodeExit::kLeft));
  mesh_->leave();  // deathrattle (best effort: a lost node's store may be unreachable)
  return result;
}

DilocoNode::RoundOutcome DilocoNode::play_round(const RoundRecord& r) {
  RoundOutcome out;
  join_servers();
  // Serve joiners before connecting the round's epoch: a transport whose connect waits for
  // every member (Gloo) would otherwise wait for a joiner that waits for its state.
  serve_joiners(r);
  out.connected = connect_epoch(r);
  // Streaming: the first attempt's all-reduces are the fragments' syncs during its inner
  // steps; a retry all-reduces every fragment at once below, as blocking DiLoCo does.
  const bool streamed = options_.streaming() && r.attempt == 0;
  bool streamed_ok = false;
  if (streamed)
    streamed_ok = stream_round(r, out.connected, out.blamed);
  else if (r.attempt == 0 && overlapped())
    begin_overlapped(r);
  else if (r.attempt == 0)
    inner_steps(r);
  // A node whose pseudo-gradient was not finite sits out: it sends nothing this attempt
  // and asks for a retry in which the others average without it (`abstain`).
  out.sit_out = non_finite_ && !r.abstains(id_);
  if (streamed) {
    out.ok = streamed_ok;
  } else if (!out.connected) {
    out.ok = false;  // a member never connected (it died after the record): retry without it
  } else if (options_.barrier_before_allreduce && !mesh_->ready_barrier(r)) {
    out.ok = false;  // a member is gone: fail the round without starting the ring
    for (auto& t : rings_) t->abort();  // peers that passed the barrier fail fast
  } else if (out.sit_out) {
    out.ok = false;
    for (auto& t : rings_) t->abort();
  } else {
    out.ok = all_reduce(r, out.blamed, shards_, 0, count_);
  }
  // Overlapped: report once the next step's inner steps ended too. The next record admits
  // joiners, and the sources serve them at the top of the loop: a record written while
  // their inner steps still ran would leave the joiners waiting for that long.
  if (join_phase()) phase_ran_ = true;
  return out;
}

bool DilocoNode::connect_epoch(const RoundRecord& r) {
  try {
    ensure_epoch(r);
    return true;
  } catch (const PeerLostError&) {
  } catch (const TimeoutError&) {
  }
  rings_.clear();  // connected again in the next round's epoch
  // Members that did connect must not wait for this one at the barrier while it is alive
  // (streaming: at each fragment's, which stream_round() skips once the round has failed).
  if (options_.barrier_before_allreduce) mesh_->skip_barrier(r);
  return false;
}

double DilocoNode::connect_timeout_s() const { return 2.0 * options_.mesh.dead_after_s; }

void DilocoNode::ensure_epoch(const RoundRecord& r) {
  if (r.epoch == epoch_ && !rings_.empty()) return;
  rings_.clear();
  for (int k = 0; k < options_.local_ranks; ++k) {
    EpochSpec spec;
    spec.epoch = ring_epoch_id(r.epoch, k);
    spec.rank = r.rank_of(id_);
    spec.members = r.members;
    spec.timeout_s = options_.allreduce_timeout_s;
    spec.connect_timeout_s = connect_timeout_s();
    spec.abandon = [mesh = mesh_.get(), r] { return mesh->waiting_is_futile(r); };
    rings_.push_back(transports_.connect(spec));
  }
  epoch_ = r.epoch;
  emit(
      "epoch_formed",
      JsonObject().add("epoch", r.epoch).add("outer_step", r.outer_step).add("members", r.members));
}

void DilocoNode::plan_data(std::int64_t step, const RoundRecord& r) {
  if (!data_) return;
  ledger_.plan(step, r.members);
  worker_.assign_samples(ledger_.assigned(step, id_));
}

void DilocoNode::settle_data(const RoundRecord& done, const RoundRecord& next) {
  if (!data_) return;
  // Whose pseudo-gradient of the step was applied: a commit's contributors; after a fallback,
  // each survivor applied its own.
  const bool commit = next.prev == RoundPrev::kCommit;
  std::vector<std::int64_t> credited;
  for (std::int64_t m : done.members)
    if (!done.abstains(m) && (commit || next.rank_of(m) >= 0)) credited.push_back(m);
  const DataSettlement s = ledger_.settle(done.outer_step, credited);
  std::vector<std::int64_t> trained;  // node, begin, end, node, begin, end, ...
  for (const auto& [node, ranges] : s.trained)
    for (const SampleRange& x : ranges) trained.insert(trained.end(), {node, x.begin, x.end});
  std::int64_t owed = 0;
  for (const SampleRange& x : ledger_.returned()) owed += x.size();
  emit("data", JsonObject()
                   .add("outer_step", done.outer_step)
                   .add("trained", trained)
                   .add("returned", flatten(s.returned))
                   .add("next", ledger_.next())
                   .add("owed", owed));
}

void DilocoNode::inner_steps(const RoundRecord& r) {
  plan_data(r.outer_step, r);
  run_phase(r.outer_step, stats_, options_.inner_steps);
  non_finite_ = take_pseudo_gradient(outer_, r.outer_step, 0, count_);
}

void DilocoNode::run_phase(std::int64_t outer_step, RoundStats& into, int steps) {
  const double start_s = runtime_.now_s();
  const InnerStepsResult res = worker_.run_inner_steps(steps);
  into = RoundStats{};
  into.inner_s = res.compute_s;
  into.tokens = res.tokens;
  into.loss = res.loss;
  emit("inner_steps", JsonObject()
                          .add("outer_step", outer_step)
                          .add("steps", res.steps)
                          .add("tokens", res.tokens)
                          .add("start_s", start_s)
                          .add("compute_s", res.compute_s)
                          .add("loss", res.loss));
  compute_end_s_ = runtime_.now_s();
}

bool DilocoNode::take_pseudo_gradient(std::span<const float> base, std::int64_t outer_step,
                                      std::uint64_t offset, std::uint64_t count) {
  if (phantom_) return false;
  const std::span<const float> local = worker_.parameters();
  MERIDIAN_CHECK_EQ(local.size(), count_);
  MERIDIAN_CHECK_EQ(base.size(), count_);
  MERIDIAN_CHECK(offset + count <= count_);
  delta_.resize(count_);
  for (std::uint64_t i = offset; i < offset + count; ++i) delta_[i] = base[i] - local[i];
  return check_pseudo_gradient(outer_step, offset, count);
}

void DilocoNode::begin_overlapped(const RoundRecord& r) {
  newcomers_ = r.joiners;
  if (!pending_) {
    if (r.is_joiner(id_)) {
      // Admitted at this step: its inner steps did not run, so it sends zeros that no
      // divisor counts (shares()), and starts the next step's inner steps from theta_outer.
      stats_ = RoundStats{};
      if (!phantom_) delta_.assign(count_, 0.0f);
      non_finite_ = false;
      compute_end_s_ = runtime_.now_s();
    } else {
      inner_steps(r);  // round 0, or a resume without a pending pseudo-gradient
      load_next_start(shares(r));
    }
    pending_ = true;
  } else if (resumed_pending_) {
    load_next_start(shares(r));  // as the uninterrupted run did after its checkpoint
  }
  resumed_pending_ = false;
  if (options_.outer_steps > 0 && r.outer_step + 1 >= options_.outer_steps) {
    compute_end_s_ = runtime_.now_s();  // the sync of the last step starts now
    return;  // the run's last step: nothing to overlap its all-reduce with
  }
  if (!phantom_) {
    const std::span<const float> p = worker_.parameters();
    start_.assign(p.begin(), p.end());
  }
  plan_data(r.outer_step + 1, r);
  phase_ = runtime_.spawn("inner-steps", [this, step = r.outer_step + 1] {
    run_phase(step, phase_stats_, options_.inner_steps);
  });
}

bool DilocoNode::join_phase() {
  if (!phase_) return false;
  phase_->join();
  phase_.reset();
  return true;
}

void DilocoNode::load_next_start(int shares) {
  if (phantom_) return;
  const std::span<float> params = worker_.parameters();
  if (options_.overlap == Overlap::kEager)
    optimizer_->stand_in(outer_, delta_, static_cast<float>(shares), params);
  else
    std::copy(outer_.begin(), outer_.end(), params.begin());
  worker_.parameters_updated();
}

int DilocoNode::shares(const RoundRecord& r) const {
  int n = r.contributors();
  if (!overlapped()) return n;
  const std::vector<std::int64_t>& fresh = r.attempt == 0 ? r.joiners : newcomers_;
  for (std::int64_t j : fresh)
    if (r.rank_of(j) >= 0 && !r.abstains(j)) --n;
  return std::max(1, n);
}

bool DilocoNode::stream_round(const RoundRecord& r, bool connected,
                              std::vector<std::int64_t>& blamed) {
  const int h = options_.inner_steps, tau = options_.fragment_delay;
  const auto p_count = static_cast<int>(fragments_.size());
  stats_ = RoundStats{};
  stream_exposed_s_ = 0.0;
  non_finite_ = false;
  plan_data(r.outer_step, r);
  if (!phantom_) {
    delta_.resize(count_);
    reduced_.resize(count_);
  }
  RoundStats inner;  // this activity's sums; stats_.allreduce_s is the syncs'
  double loss_sum = 0.0;
  std::int64_t steps_done = 0;
  const auto steps = [&](int n) {
    if (n <= 0) return;
    RoundStats part;
    run_phase(r.outer_step, part, n);
    inner.inner_s += part.inner_s;
    inner.tokens += part.tokens;
    loss_sum += part.loss * n;
    steps_done += n;
  };
  std::optional<FragmentSyncs> syncs;  // tau > 0: beside the tau inner steps
  if (tau > 0)
    syncs.emplace(runtime_, p_count, [this, &r](int p, std::vector<std::int64_t>& b) {
      return sync_fragment(r, p, b);
    });
  bool ok = connected;
  int done = 0;  // inner steps of this round so far
  for (int p = 0; p < p_count; ++p) {
    const Fragment& f = fragments_[static_cast<std::size_t>(p)];
    const int end = (p + 1) * h / p_count;  // part p ends after this many inner steps
    steps(end - tau - done);
    // Any fragment's NaN or Inf makes the node sit the round out.
    if (take_pseudo_gradient(outer_, r.outer_step, f.offset, f.count)) non_finite_ = true;
    if (ok && non_finite_) ok = false;  // it sits out: the round is retried without its share
    if (!ok) {
      // This node's round failed already (or it never connected, or sits out): the peers must
      // not wait for it at this fragment's barrier, and its aborted rings fail theirs at once.
      if (syncs) syncs->stop();
      if (options_.barrier_before_allreduce) mesh_->skip_barrier(r, p);
      for (auto& t : rings_) t->abort();
    }
    const double sync_start_s = runtime_.now_s();
    double exposed_s = 0.0;
    bool synced = false;
    std::vector<std::int64_t> fragment_blamed;
    if (ok && tau == 0) {
      synced = sync_fragment(r, p, fragment_blamed);
      exposed_s = runtime_.now_s() - sync_start_s;
    } else if (ok) {
      syncs->post(p);
      steps(tau);
      const double wait_s = runtime_.now_s();
      synced = syncs->wait(p, fragment_blamed);
      exposed_s = runtime_.now_s() - wait_s;
    } else {
      steps(tau);  // an earlier fragment failed: the round is retried at its end
    }
    done = end;
    stream_exposed_s_ += exposed_s;
    for (std::int64_t id : fragment_blamed)
      if (std::count(blamed.begin(), blamed.end(), id) == 0) blamed.push_back(id);
    if (synced) merge_fragment(f);
    emit("fragment_sync", JsonObject()
                              .add("outer_step", r.outer_step)
                              .add("fragment", p)
                              .add("elements", f.count)
                              .add("start_s", sync_start_s)
                              .add("exposed_s", exposed_s)
                              .add("ok", synced));
    ok = ok && synced;
  }
  syncs.reset();  // joins the syncs activity (also when a fragment throws)
  // A node that sits out contributes zeros to the retry, for every fragment (the divisor
  // leaves it out), and its own fallback is zero too.
  if (non_finite_ && !phantom_) std::fill(delta_.begin(), delta_.end(), 0.0f);
  stats_.inner_s = inner.inner_s;
  stats_.tokens = inner.tokens;
  stats_.loss = steps_done > 0 ? loss_sum / static_cast<double>(steps_done) : 0.0;
  compute_end_s_ = runtime_.now_s();
  return ok;
}

bool DilocoNode::sync_fragment(const RoundRecord& r, int p, std::vector<std::int64_t>& blamed) {
  const Fragment& f = fragments_[static_cast<std::size_t>(p)];
  // A member gone fails the fragment without starting its ring: every ring is aborted, so
  // that the peers fail fast too, and the round's later fragments are not synced (a retry
  // all-reduces them all).
  if (options_.barrier_before_allreduce && !mesh_->ready_barrier(r, p)) {
    for (auto& t : rings_) t->abort();
    return false;
  }
  return all_reduce(r, blamed, f.shards, f.offset, f.count, p);
}

void DilocoNode::merge_fragment(const Fragment& f) {
  if (phantom_) return;
  merged_.resize(f.count);
  optimizer_->preview(f.offset, std::span<const float>(outer_).subspan(f.offset, f.count),
                      std::span<const float>(reduced_).subspan(f.offset, f.count), merged_);
  const std::span<float> local = worker_.parameters().subspan(f.offset, f.count);
  const float alpha = options_.fragment_alpha;
  if (alpha == 0.0f) {
    std::copy(merged_.begin(), merged_.end(), local.begin());
  } else {
    for (std::uint64_t i = 0; i < f.count; ++i)
      local[i] = alpha * local[i] + (1.0f - alpha) * merged_[i];
  }
  worker_.parameters_updated();
}

bool DilocoNode::check_pseudo_gradient(std::int64_t outer_step, std::uint64_t offset,
                                       std::uint64_t count) {
  const std::span<float> range = std::span<float>(delta_).subspan(offset, count);
  const std::uint64_t bad = count_non_finite(range);
  if (bad == 0) return false;
  emit("nonfinite", JsonObject()
                        .add("outer_step", outer_step)
                        .add("faulty", id_)
                        .add("values", bad)
                        .add("elements", count)
                        .add("detected_by", "self")
                        .add("action", "abstain"));
  std::fill(range.begin(), range.end(), 0.0f);  // its share, and its own fallback, are zero
  return true;
}

bool DilocoNode::all_reduce(const RoundRecord& r, std::vector<std::int64_t>& blamed,
                            const std::vector<std::vector<Bucket>>& shards, std::uint64_t offset,
                            std::uint64_t count, int fragment) {
  if (!phantom_) {
    // Members that sit this attempt out (non-finite guard) contribute zeros and are not counted.
    const auto world = static_cast<float>(shares(r));
    reduced_.resize(count_);
    if (sparse()) {
      // c = beta e + delta, whole: the gather sums the decoded terms and divides afterwards, so
      // that each node knows exactly what it sent. A node that sits the step out sends zeros.
      const float beta = options_.error_feedback;
      sent_.resize(count_);
      for (std::uint64_t i = offset; i < offset + count; ++i)
        reduced_[i] = non_finite_ ? 0.0f : beta * feedback_[i] + delta_[i];
    } else {
      for (std::uint64_t i = offset; i < offset + count; ++i) reduced_[i] = delta_[i] / world;
    }
  }
  shard_ok_.assign(options_.local_ranks, 0);
  ring_workspaces_.resize(options_.local_ranks);
  gather_staging_.resize(options_.local_ranks);
  own_encoding_.resize(options_.local_ranks);
  shard_blame_.assign(options_.local_ranks, -1);
  const double start_s = runtime_.now_s();
  watched(r, [&] {
    if (options_.local_ranks == 1) {
      reduce_shard(r, 0, shards[0], fragment);
    } else {
      std::vector<std::unique_ptr<Activity>> rings;
      for (int k = 0; k < options_.local_ranks; ++k)
        rings.push_back(
            runtime_.spawn("ring-shard-" + std::to_string(k), [this, &r, k, &shards, fragment] {
              reduce_shard(r, k, shards[static_cast<std::size_t>(k)], fragment);
            }));
      for (auto& a : rings) a->join();
    }
  });
  stats_.allreduce_s += runtime_.now_s() - start_s;
  bool ok = true;
  for (char s : shard_ok_) ok = ok && s != 0;
  for (std::int64_t id : shard_blame_)
    if (id >= 0 && std::count(blamed.begin(), blamed.end(), id) == 0) blamed.push_back(id);
  if (!ok)
    for (auto& t : rings_) t->abort();  // every shard's peers fail fast too
  if (ok && sparse() && !phantom_) {
    const auto world = static_cast<float>(shares(r));
    for (std::uint64_t i = offset; i < offset + count; ++i) reduced_[i] /= world;
  }
  return ok;
}

void DilocoNode::watched(const RoundRecord& r, const std::function<void()>& rings) {
  if (options_.ring_watchdog_s <= 0) return rings();
  auto mu = runtime_.make_mutex();
  auto cv = runtime_.make_condvar();
  bool done = false;  // guarded by mu
  auto watchdog = runtime_.spawn("ring-watchdog", [&] {
    LockGuard lock(*mu);
    while (!done) {
      cv->wait_for(*mu, options_.ring_watchdog_s);
      if (done) return;
      if (const std::string why = mesh_->members_gone(r); !why.empty()) {
        emit("ring_aborted", JsonObject().add("outer_step", r.outer_step).add("reason", why));
        for (auto& t : rings_) t->abort();  // every ring wait fails with PeerLostError now
        return;
      }
    }
  });
  const auto stop_watchdog = [&] {
    {
      LockGuard lock(*mu);
      done = true;
      cv->notify_all();
    }
    watchdog->join();
  };
  try {
    rings();
  } catch (...) {
    stop_watchdog();
    throw;
  }
  stop_watchdog();
}

RingOptions DilocoNode::ring_options(const RoundRecord& r, const Bucket& b) const {
  RingOptions ro;
  ro.max_chunk_bytes = options_.max_chunk_bytes;
  ro.timeout_s = options_.allreduce_timeout_s;
  ro.outer_step = static_cast<std::uint64_t>(r.outer_step);
  ro.bucket = b.index;
  ro.measure_error = options_.measure_error;
  // all_reduce() rebuilds reduced_ from delta_ before every attempt (divided by that epoch's
  // world), so the ring need not keep a copy to restore it.
  ro.restore_on_failure = false;
  return ro;
}

void DilocoNode::report_collective(const RoundRecord& r, int shard, int fragment,
                                   SparseCollective via, std::int64_t bucket,
                                   std::uint64_t elements, const RingStats& st, double start_s,
                                   std::size_t buckets_in_call) {
  JsonObject f;
  f.add("outer_step", r.outer_step)
      .add("bucket", bucket)
      .add("epoch", r.epoch)
      .add("attempt", r.attempt)
      .add("codec", codec_name(options_.codec))
      .add("elements", elements)
      .add("participants", st.participants)
      .add("bytes_sent", st.bytes_sent)
      .add("bytes_received", st.bytes_received)
      .add("start_s", start_s)
      .add("elapsed_s", st.elapsed_s)
      .add("relative_error", st.relative_error)
      .add("local_rank", shard);
  if (sparse()) f.add("collective", sparse_collective_name(via));
  if (fragment >= 0) f.add("fragment", fragment);
  if (buckets_in_call > 1) f.add("buckets", static_cast<std::uint64_t>(buckets_in_call));
  emit("allreduce", std::move(f));
}

void DilocoNode::reduce_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                              int fragment) {
  try {
    std::vector<std::size_t> counts;
    for (const Bucket& b : buckets) counts.push_back(b.count);
    if (sparse() &&
        resolve_sparse_collective(options_.sparse_collective, *codec_, *ring_codec_, counts,
                                  rings_[shard]->size()) == SparseCollective::kGather)
      gather_shard(r, shard, buckets, fragment);
    else
      ring_shard(r, shard, buckets, fragment);
    shard_ok_[shard] = 1;
  } catch (const PeerLostError&) {
  } catch (const TimeoutError&) {
  } catch (const ProtocolError& e) {
    // A chunk that failed validation names its sender's rank in this round's ring.
    if (e.peer() >= 0 && static_cast<std::size_t>(e.peer()) < r.members.size()) {
      shard_blame_[shard] = r.members[static_cast<std::size_t>(e.peer())];
      // A sender that skipped its own guard: a protocol fault like a bad checksum (evicted).
      if (dynamic_cast<const NonFiniteError*>(&e) != nullptr)
        emit("nonfinite", JsonObject()
                              .add("outer_step", r.outer_step)
                              .add("faulty", shard_blame_[shard])
                              .add("detected_by", "receiver")
                              .add("action", "blame")
                              .add("reason", std::string(e.what())));
    }
  }
}

void DilocoNode::gather_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                              int fragment) {
  // One all-gather for all of the shard's buckets, each encoded on its own (segments): the
  // ring's N - 1 hops are paid once per round, not once per bucket. The buckets lie back to back
  // in reduced_ unless local ranks cut them (then they are staged).
  Transport& t = *rings_[shard];
  std::vector<std::size_t> lengths;
  std::uint64_t total = 0;
  bool contiguous = true;
  for (const Bucket& b : buckets) {
    contiguous = contiguous && b.offset == buckets.front().offset + total;
    lengths.push_back(b.count);
    total += b.count;
  }
  const RingOptions ro = ring_options(r, buckets.empty() ? Bucket{} : buckets.front());
  const double start_s = runtime_.now_s();
  RingStats st;
  if (phantom_) {
    st = ring_all_gather_sum(t, runtime_, *codec_, ReduceBuffer::phantom(total), {}, ro,
                             &ring_workspaces_[shard], lengths);
  } else if (contiguous) {
    const std::uint64_t at = buckets.empty() ? 0 : buckets.front().offset;
    st = ring_all_gather_sum(
        t, runtime_, *codec_, ReduceBuffer::of(std::span<float>(reduced_).subspan(at, total)),
        std::span<float>(sent_).subspan(at, total), ro, &ring_workspaces_[shard], lengths);
  } else {
    std::vector<float>& stage = gather_staging_[shard];
    stage.resize(2 * total);
    const auto in = std::span<float>(stage).first(total);
    const auto own = std::span<float>(stage).subspan(total);
    std::uint64_t k = 0;
    for (const Bucket& b : buckets)
      k = std::copy_n(reduced_.begin() + b.offset, b.count, in.begin() + k) - in.begin();
    st = ring_all_gather_sum(t, runtime_, *codec_, ReduceBuffer::of(in), own, ro,
                             &ring_workspaces_[shard], lengths);
    k = 0;
    for (const Bucket& b : buckets) {
      std::copy_n(in.begin() + k, b.count, reduced_.begin() + b.offset);
      std::copy_n(own.begin() + k, b.count, sent_.begin() + b.offset);
      k += b.count;
    }
  }
  const std::int64_t bucket =
      buckets.size() == 1 ? static_cast<std::int64_t>(buckets.front().index) : -1;
  report_collective(r, shard, fragment, SparseCollective::kGather, bucket, total, st, start_s,
                    buckets.size());
}

void DilocoNode::ring_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                            int fragment) {
  Transport& t = *rings_[shard];
  const Codec& codec = sparse() ? *ring_codec_ : *codec_;
  if (sparse() && !phantom_) {
    // Each bucket's term is what the gather would have carried, decode(encode(c)) per bucket:
    // the error feedback owes the rest, and the ring's rounding of the sum is not fed back.
    std::vector<std::byte>& bytes = own_encoding_[shard];
    for (const Bucket& b : buckets) {
      const std::span<float> c = std::span<float>(reduced_).subspan(b.offset, b.count);
      const std::span<float> own = std::span<float>(sent_).subspan(b.offset, b.count);
      bytes.resize(codec_->encoded_bytes(b.count));
      codec_->encode(c, bytes);
      codec_->decode(bytes, own);
      std::copy(own.begin(), own.end(), c.begin());
    }
  }
  // A timing-only simulation hands runs of the buckets' rounds to the transport whole when it
  // can time them so (netsim/README.md, "Aggregation"); otherwise, and with content, bucket by
  // bucket, message by message (a transport that declines is not asked again).
  std::vector<std::size_t> counts;
  std::vector<RingOptions> options;
  if (phantom_)
    for (const Bucket& b : buckets) {
      counts.push_back(b.count);
      options.push_back(ring_options(r, b));
    }
  bool ask_whole = phantom_;
  for (std::size_t i = 0; i < buckets.size();) {
    if (ask_whole) {
      const std::optional<std::vector<PhantomRoundStats>> whole = phantom_ring_rounds(
          t, runtime_, codec, std::span(counts).subspan(i), std::span(options).subspan(i));
      if (!whole) {
        ask_whole = false;
      } else {
        for (const PhantomRoundStats& w : *whole) {
          report_collective(r, shard, fragment, SparseCollective::kRing, buckets[i].index,
                            buckets[i].count, w.stats, w.start_s);
          ++i;
        }
        if (!whole->empty()) continue;
      }
    }
    const Bucket& b = buckets[i++];
    const ReduceBuffer buf =
        phantom_ ? ReduceBuffer::phantom(b.count)
                 : ReduceBuffer::of(std::span<float>(reduced_).subspan(b.offset, b.count));
    const double start_s = runtime_.now_s();
    report_collective(
        r, shard, fragment, SparseCollective::kRing, b.index, b.count,
        ring_all_reduce(t, runtime_, codec, buf, ring_options(r, b), &ring_workspaces_[shard]),
        start_s);
  }
}

void DilocoNode::apply(const RoundRecord& done, const RoundRecord& next) {
  const bool fallback = next.prev == RoundPrev::kFallback;
  if (fallback)
    emit("fallback", JsonObject().add("outer_step", done.outer_step).add("reason", next.reason));
  const double start_s = runtime_.now_s();
  // Overlapped: the sync of this step kept the node from computing from the moment its next
  // inner steps ended (or, with none running, from the start of the round) until the record
  // (its ring, and the others' reports).
  const double exposed_s = std::max(0.0, start_s - compute_end_s_);
  const bool phase_ran = phase_ran_;
  phase_ran_ = false;
  if (!phantom_) {
    optimizer_->step(outer_, fallback ? delta_ : reduced_);
    if (sparse() && !non_finite_) {
      // e = c - what was sent; a fallback applied delta whole, so only beta e is still owed.
      // A node that sat the step out sent nothing and keeps e.
      const float beta = options_.error_feedback;
      for (std::uint64_t i = 0; i < count_; ++i)
        feedback_[i] = fallback ? beta * feedback_[i] : beta * feedback_[i] + delta_[i] - sent_[i];
    }
    // The next step's pseudo-gradient, from the inner steps that ran beside this round.
    if (phase_ran) non_finite_ = take_pseudo_gradient(start_, next.outer_step, 0, count_);
    // Streaming: each fragment's local copy was merged at its sync and has moved on since.
    if (!options_.streaming()) {
      const std::span<float> params = worker_.parameters();
      std::copy(outer_.begin(), outer_.end(), params.begin());
      worker_.parameters_updated();
    }
  } else if (options_.phantom_outer_opt_s > 0) {
    runtime_.compute_s(options_.phantom_outer_opt_s);
  }
  settle_data(done, next);
  const double outer_opt_s = runtime_.now_s() - start_s;
  JsonObject f;
  f.add("outer_step", done.outer_step)
      .add("epoch", done.epoch)
      .add("participants", static_cast<std::int64_t>(done.members.size()))
      .add("contributors", done.contributors())
      .add("inner_s", stats_.inner_s)
      .add("allreduce_s", stats_.allreduce_s)
      .add("outer_opt_s", outer_opt_s)
      .add("tokens", stats_.tokens)
      .add("loss", stats_.loss);
  if (overlapped()) f.add("exposed_s", exposed_s);
  if (options_.streaming()) f.add("exposed_s", stream_exposed_s_ + exposed_s);
  emit("outer_step", std::move(f));
  if (options_.on_outer_step) {
    std::span<const float> pending;
    if (phase_ran && !phantom_) pending = delta_;
    std::span<const float> local;
    if (options_.streaming() && !phantom_) local = worker_.parameters();
    const std::string ledger = data_ ? ledger_.encode() : std::string();
    options_.on_outer_step(OuterStepView{id_, done.outer_step, done.epoch, done.members, fallback,
                                         outer_, optimizer_->momentum(), pending, local, feedback_,
                                         ledger});
  }
  // Without a phase (the run's last step) nothing follows: the loop ends at this record.
  pending_ = phase_ran;
  if (phase_ran) {
    stats_ = phase_stats_;
    load_next_start(shares(next));
  }
}

void DilocoNode::serve_joiners(const RoundRecord& r) {
  if (r.joiners.empty() || std::find(r.sources.begin(), r.sources.end(), id_) == r.sources.end())
    return;
  auto state = std::make_shared<RecoveryState>();
  state->phantom = phantom_;
  state->shared_bytes = 2 * count_ * sizeof(float);
  std::uint64_t section_bytes = 0;
  std::vector<StateSection> sections = worker_.state_sections();
  for (const StateSection& s : sections) section_bytes += s.count * sizeof(float);
  // The private part: the sections, then (elastic data) the ledger's length in 8 bytes and
  // its text, then the worker's progress.
  std::string progress = worker_.progress();
  if (data_) {
    const std::string ledger = ledger_.encode();
    const std::uint64_t n = ledger.size();
    std::string head(sizeof n, '\0');
    std::memcpy(head.data(), &n, sizeof n);
    progress = head + ledger + progress;
  }
  state->private_bytes = section_bytes + (phantom_ ? 0 : progress.size());
  if (!phantom_) {
    append_floats(state->shared, outer_);
    append_floats(state->shared, optimizer_->momentum());
    for (const StateSection& s : sections) append_floats(state->priv, s.values);
    const auto* p = reinterpret_cast<const std::byte*>(progress.data());
    state->priv.insert(state->priv.end(), p, p + progress.size());
  }
  for (std::int64_t j : r.joiners) {
    const auto sources = recovery_sources_for(r, j, options_.recovery.max_sources);
    if (std::find(sources.begin(), sources.end(), id_) == sources.end()) continue;
    const EpochSpec spec = recovery_spec(r, j, id_, true, recovery_);
    servers_.push_back(runtime_.spawn("recovery-serve-" + std::to_string(j), [this, spec, state] {
      try {
        serve_recovery(transports_, spec, state, recovery_);
      } catch (const Error&) {
        // The joiner died or gave up on us: it resumes elsewhere or is removed by the mesh.
      }
    }));
  }
  if (options_.recovery.blocking) join_servers();
}

void DilocoNode::join_servers() {
  for (auto& s : servers_) s->join();
  servers_.clear();
}

void DilocoNode::recover(const RoundRecord& r) {
  const auto sources = recovery_sources_for(r, id_, options_.recovery.max_sources);
  std::vector<StateSection> sections = worker_.state_sections();
  std::uint64_t section_bytes = 0;
  for (const StateSection& s : sections) section_bytes += s.count * sizeof(float);
  const std::uint64_t shared_bytes = 2 * count_ * sizeof(float);
  emit("recovery_started",
       JsonObject().add("sources", sources).add("bytes", shared_bytes + section_bytes));
  const double start_s = runtime_.now_s();
  FetchResult got = fetch_recovery(transports_, runtime_, r, id_, sources, shared_bytes,
                                   section_bytes + kMaxProgressBytes, phantom_, recovery_);
  if (got.state.private_bytes < section_bytes)
    throw ProtocolError("recovery: private state of " + std::to_string(got.state.private_bytes) +
                        " bytes is smaller than the worker's sections (" +
                        std::to_string(section_bytes) + " bytes)");
  if (!phantom_) {
    const std::byte* p = got.state.shared.data();
    std::memcpy(outer_.data(), p, count_ * sizeof(float));
    std::memcpy(optimizer_->momentum().data(), p + count_ * sizeof(float), count_ * sizeof(float));
    const std::byte* q = got.state.priv.data();
    for (StateSection& s : sections) {
      if (!s.values.empty()) std::memcpy(s.values.data(), q, s.count * sizeof(float));
      q += s.count * sizeof(float);
    }
    std::string_view rest(reinterpret_cast<const char*>(q),
                          got.state.private_bytes - section_bytes);
    if (data_) {
      std::uint64_t n = 0;
      if (rest.size() < sizeof n) throw ProtocolError("recovery: no data ledger in the state");
      std::memcpy(&n, rest.data(), sizeof n);
      if (n > rest.size() - sizeof n)
        throw ProtocolError("recovery: the data ledger's length " + std::to_string(n) +
                            " runs past the state's " + std::to_string(rest.size()) + " bytes");
      DataLedger ledger = DataLedger::decode(rest.substr(sizeof n, n));
      if (ledger.per_node() != ledger_.per_node())
        throw ProtocolError("recovery: the source's data ledger plans " +
                            std::to_string(ledger.per_node()) + " samples per node, this node " +
                            std::to_string(ledger_.per_node()));
      ledger_ = std::move(ledger);
      rest.remove_prefix(sizeof n + n);
    }
    worker_.restore_progress(std::string(rest));
    const std::span<float> params = worker_.parameters();
    std::copy(outer_.begin(), outer_.end(), params.begin());
    worker_.parameters_updated();
  }
  emit("recovery_finished", JsonObject()
                                .add("bytes", got.bytes)
                                .add("elapsed_s", runtime_.now_s() - start_s)
                                .add("sources", got.served_by)
                                .add("resumed", got.resumed));
}

}  // namespace meridian
