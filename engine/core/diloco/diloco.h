// DilocoNode: one node's DiLoCo outer loop on the elastic mesh (ARCHITECTURE.md "One outer step"):
// admission and live recovery, H inner steps on the InnerWorker, the pseudo-gradient
// theta_outer - theta_local pre-divided by the world size and ring-all-reduced per bucket (one
// ring per local rank, in parallel), Nesterov outer SGD on the fp32 outer copy, copy back.
// Not a trainer and not a launcher: the worker computes, the caller starts one node per process
// (or per thread / actor) and owns the Store, the TransportFactory and the Runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/diloco/buckets.h"
#include "engine/core/diloco/data_plan.h"
#include "engine/core/diloco/outer_optimizer.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/inner_worker.h"
#include "engine/core/mesh/elastic_mesh.h"
#include "engine/core/recovery/live_recovery.h"
#include "engine/core/runtime.h"
#include "engine/core/store.h"
#include "engine/core/transport.h"

namespace meridian {

// What a node saw when it finished an outer step (for tests, tools and checkpoints).
struct OuterStepView {
  std::int64_t node = -1;
  std::int64_t outer_step = 0;              // the step that was just applied
  std::uint64_t epoch = 0;                  // epoch of the round that committed it
  std::vector<std::int64_t> members;        // that round's members, ring order
  bool fallback = false;                    // the local pseudo-gradient was applied
  std::span<const float> outer_parameters;  // empty for timing-only workers
  std::span<const float> momentum;
  // Overlapped outer steps: the pseudo-gradient of the next outer step, computed from the inner
  // steps that ran while this step's all-reduce did (it is all-reduced in the next round); a
  // checkpoint needs it to resume bit-identically. Empty in blocking mode and at the run's end.
  std::span<const float> pending;
  // Streaming outer steps: the worker's parameters at the step's end. Between its fragments'
  // merges they are not the outer parameters, and a checkpoint needs them to resume
  // bit-identically. Empty otherwise.
  std::span<const float> local;
  // A sparse codec (topk): this node's error-feedback buffer after the step (what it has not
  // sent yet). Per node, not shared; a checkpoint needs it to resume bit-identically. Empty
  // otherwise.
  std::span<const float> error_feedback;
  // Elastic data: the run's data ledger after the step (DataLedger::encode), the same on every
  // member; a checkpoint needs it to resume. Empty when the worker reads no planned data.
  std::string_view data_ledger;
};

// When the all-reduce of outer step t runs (engine/core/diloco/README.md, "Overlapped outer
// steps").
enum class Overlap : std::uint8_t {
  kNone = 0,     // blocking: the inner steps of t+1 start after the average of t is applied
  kDelayed = 1,  // the inner steps of t+1 run during the all-reduce of t; its average is
                 // applied one outer step late (arXiv 2502.12996, "delayed outer gradients")
  kEager = 2,    // as delayed, and the node's own pseudo-gradient of t stands in for the
                 // average until it arrives (arXiv 2502.12996, "eager updates")
};
// Every overlap, in id order: the one list of choices (parse_overlap, the run file's check).
inline constexpr Overlap kAllOverlaps[] = {Overlap::kNone, Overlap::kDelayed, Overlap::kEager};
const char* overlap_name(Overlap o);
// Parses "none", "delayed", "eager"; throws ConfigError naming the choices.
Overlap parse_overlap(std::string_view name);

// The error feedback's beta that the modes give codec topk unless told otherwise. Meridian's
// choice, not SparseLoCo's published value (the paper tunes beta): a buffer that forgets 5 % per
// outer step, so a value the top-k never selects cannot grow without bound.
inline constexpr float kDefaultErrorFeedback = 0.95f;

struct DilocoOptions {
  int inner_steps = 100;              // H (INTELLECT-1: 100)
  std::int64_t outer_steps = 0;       // the run ends after this many outer steps (0 = never)
  CodecId codec = CodecId::kFp32;     // wire codec of the ring all-reduce
  CodecParams codec_params;           // topk's density and value bits
  OuterOptimizerOptions outer;        // lr 0.7, Nesterov momentum 0.9
  int local_ranks = 1;                // L: one ring per shard, run in parallel
  double allreduce_timeout_s = 60.0;  // bound on every wait of the ring (a lost peer surfaces
                                      // within it on every node); also the bound on waiting
                                      // for an epoch's members to arrive (a member dead by its
                                      // lease, or one that reported the round, ends it sooner)
  std::size_t max_chunk_bytes = std::size_t{4} << 20;  // ring message payload bound
  bool measure_error = false;  // ring: report relative error of lossy codecs
  // Wait (with liveness) until every member is ready before the ring, so the ring's timeout
  // only has to cover the transfer, not a straggler's inner steps or a joiner's recovery.
  bool barrier_before_allreduce = true;
  // While the ring runs, look this often whether a member's lease ended or it left, and abort
  // the rings at once if so (a peer frozen with its connections open otherwise holds every
  // ring wait until allreduce_timeout_s). 0 = off: simulations (whose rings see a dead host at
  // once) leave it off, so their events do not change; real runs use the heartbeat interval.
  double ring_watchdog_s = 0.0;
  RecoveryOptions recovery;  // chunking, sources, blocking mode
  MeshOptions mesh;          // heartbeats, retries (3), coordinator lease
  // Timing-only (phantom) workers have no optimizer to run: this many seconds are charged with
  // runtime.compute_s in its place (a simulator's modelled outer-step CPU time). Else unused.
  double phantom_outer_opt_s = 0.0;
  // Resuming a run from a checkpoint (a node started with `initial`): round 0 computes this
  // outer step, and the outer momentum starts from these values (empty = zeros; else
  // parameter_count() of them). The outer parameters are the worker's at run(), as always.
  std::int64_t first_outer_step = 0;
  std::vector<float> initial_momentum;
  // Overlapped outer steps (see Overlap): kNone is INTELLECT-1's blocking DiLoCo.
  Overlap overlap = Overlap::kNone;
  // Resuming an overlapped run: the pseudo-gradient of first_outer_step, whose inner steps ran
  // before the checkpoint (OuterStepView::pending). Empty: round 0 runs them first (blocking).
  std::vector<float> initial_pending;
  // Streaming DiLoCo (engine/core/diloco/README.md, "Streaming outer steps"; arXiv 2501.18512): the
  // model is cut into `fragments` runs of whole buckets (make_fragments). Each outer step's H
  // inner steps run in P equal parts; fragment p's pseudo-gradient is taken `fragment_delay`
  // (tau) inner steps before part p ends, all-reduced beside those tau steps, and at the part's
  // end merged into the local copy as local = alpha * local + (1 - alpha) * outer', outer' the
  // fragment after its outer step. 1 / 0 / 0 is blocking DiLoCo (and runs its code).
  int fragments = 1;
  int fragment_delay = 0;       // tau: 0 <= tau <= H / P (0: each fragment's sync blocks)
  float fragment_alpha = 0.0f;  // alpha in [0, 1] (0: the local copy takes the outer one)
  // Resuming a streaming run: the worker's parameters at the checkpoint (OuterStepView::local);
  // empty = the outer parameters.
  std::vector<float> initial_local;
  // Sparse outer steps (a sparse codec, topk; engine/core/diloco/README.md, "Sparse outer steps";
  // SparseLoCo, arXiv 2508.15706): each node keeps an error-feedback buffer e (zeros at the
  // start and for a joiner), sends the codec's top-k of c = beta e + delta, summed by
  // `sparse_collective`, and keeps e = c - decode(encode(c)). `error_feedback` is beta in
  // [0, 1] (0: nothing is carried over); only with a sparse codec, which runs blocking,
  // overlapped or streaming outer steps (each fragment's c, from its own part of e, at its sync).
  float error_feedback = 0.0f;  // kDefaultErrorFeedback where a mode picks topk's default
  // How the terms are summed (only with a sparse codec): all-gathered, or each node's decoded
  // term all-reduced by the int8 ring (PRIME's codec, as blocking DiLoCo), or whichever sends
  // fewer bytes for the round's ring size (auto; engine/core/collective/README.md, "Sparse
  // pieces").
  SparseCollective sparse_collective = SparseCollective::kAuto;
  // Resuming a sparse run: this node's buffer at the checkpoint (OuterStepView::error_feedback);
  // empty = zeros.
  std::vector<float> initial_error_feedback;
  // Resuming a run whose worker reads planned data: the ledger at the checkpoint
  // (OuterStepView::data_ledger); empty = a fresh ledger. Its per-node count must be the run's.
  std::string initial_data_ledger;
  // Called on the node's activity after every applied outer step (may call request_leave()).
  std::function<void(const OuterStepView&)> on_outer_step;

  bool streaming() const { return fragments > 1 || fragment_delay > 0 || fragment_alpha != 0.0f; }
};

enum class NodeExit { kFinished, kLeft, kEvicted, kLost };
const char* node_exit_name(NodeExit e);

struct NodeResult {
  NodeExit exit = NodeExit::kFinished;
  std::int64_t node = -1;
  std::int64_t outer_steps_applied = 0;
  std::string what;  // the error that ended a lost node; why an evicted one was removed
};

class DilocoNode;

// The seams one node runs on, as its mode provides them (the simulator's per host, a real
// process's, the thread emulation's). They must outlive the node built on them.
struct NodeParts {
  InnerWorker& worker;
  Store& store;
  TransportFactory& transports;
  Runtime& runtime;
  EventSink& events;
};

// How a mode gets its nodes built: the composition layer (cli/compose) supplies it, so that
// one function constructs every DilocoNode (the modes only assemble the parts).
using NodeFactory = std::function<std::unique_ptr<DilocoNode>(const NodeParts&, DilocoOptions)>;

// Thread-safety: run() on one activity; request_leave() from any.
class DilocoNode {
 public:
  DilocoNode(InnerWorker& worker, Store& store, TransportFactory& transports, Runtime& runtime,
             EventSink& events, DilocoOptions options);
  ~DilocoNode();

  // Joins the mesh (as a member of the first round when `initial`, else through the join queue
  // and live recovery) and runs outer steps until options.outer_steps, a graceful leave, or the
  // node's own loss. Errors that mean "this node is gone" end the run with kLost; they are
  // not rethrown. `node_id` < 0 draws a fresh unique id.
  NodeResult run(bool initial, std::int64_t node_id = -1);

  // Leave gracefully after the current round (the node still contributes to it).
  void request_leave();
  std::int64_t node_id() const { return id_; }

 private:
  struct RoundStats {
    double inner_s = 0.0, allreduce_s = 0.0, loss = 0.0;
    std::int64_t tokens = 0;
  };

  // What this node reports of a round: whether its all-reduce succeeded, whether it sat out
  // (a non-finite pseudo-gradient), whether its transports connected, whom it blames.
  struct RoundOutcome {
    bool ok = false;
    bool sit_out = false;
    bool connected = false;
    std::vector<std::int64_t> blamed;
  };

  void initialise_outer_state();
  // One attempt of round r up to its report: serve joiners, connect the epoch, the inner steps
  // (the first attempt; streaming's fragment syncs among them), the ready barrier and the
  // all-reduce; the overlapped inner steps beside it are joined before it returns.
  RoundOutcome play_round(const RoundRecord& r);
  void recover(const RoundRecord& r);
  void serve_joiners(const RoundRecord& r);
  void join_servers();
  void ensure_epoch(const RoundRecord& r);
  // Bound on an epoch's connections once its members have arrived: twice the lease (a few
  // round trips per pair on any WAN; a stranger on a listening port costs no more than this).
  double connect_timeout_s() const;
  // ensure_epoch; false when a member could not be connected (a transport whose connect waits
  // for every member, Gloo, fails once one died after the record was written): a failed round
  // for this node, as a ring failure is, not the node's end (its own death shows at its report).
  bool connect_epoch(const RoundRecord& r);
  void inner_steps(const RoundRecord& r);
  // Elastic data (engine/core/diloco/data_plan.h): plans outer step `step` for round r's members
  // and gives the worker its positions; at the record that applies a step, settles its plan with
  // the nodes whose pseudo-gradients were applied (event `data`). No-ops when data_ is off.
  void plan_data(std::int64_t step, const RoundRecord& r);
  void settle_data(const RoundRecord& done, const RoundRecord& next);
  // H inner steps on the worker, their `inner_steps` event (for `outer_step`) and stats.
  void run_phase(std::int64_t outer_step, RoundStats& into, int steps);
  // delta_ = base - the worker's parameters over [offset, offset + count) (the whole model,
  // or a streaming fragment), then the non-finite guard over it; returns whether it fired.
  bool take_pseudo_gradient(std::span<const float> base, std::int64_t outer_step,
                            std::uint64_t offset, std::uint64_t count);
  // The non-finite guard over delta_[offset, offset + count), before anything is sent: a
  // pseudo-gradient with NaN or Inf is a fault of this node. It is reported (event
  // `nonfinite`) and zeroed; returns true, and the caller sets non_finite_ (the node sits out).
  bool check_pseudo_gradient(std::int64_t outer_step, std::uint64_t offset, std::uint64_t count);
  // Overlapped outer steps: at a step's first attempt, make sure its pseudo-gradient is
  // pending (round 0, a resume without one: its inner steps run first; a joiner has none and
  // shares nothing), then start the next step's inner steps on phase_, beside the all-reduce.
  void begin_overlapped(const RoundRecord& r);
  // Waits for phase_ (if any); returns whether one ran.
  bool join_phase();
  // Loads the parameters the next inner steps start from: theta_outer, and under kEager minus
  // the Nesterov step's share of this node's pending pseudo-gradient (`shares` = the next
  // round's divisor).
  void load_next_start(int shares);
  // The divisor of round r's sum: its contributors, less (overlap) the members admitted at
  // this outer step, which have no pseudo-gradient of it and send zeros.
  int shares(const RoundRecord& r) const;
  bool overlapped() const { return options_.overlap != Overlap::kNone; }
  // Streaming: the round's H inner steps with each fragment's sync at its point (see
  // DilocoOptions::fragments). Returns whether every fragment's all-reduce succeeded
  // (`connected`: this node's rings exist); `blamed` as for all_reduce().
  bool stream_round(const RoundRecord& r, bool connected, std::vector<std::int64_t>& blamed);
  // One fragment's barrier and all-reduce; false when it failed (every ring is then aborted).
  bool sync_fragment(const RoundRecord& r, int p, std::vector<std::int64_t>& blamed);
  // local = alpha * local + (1 - alpha) * (the fragment's outer parameters after this step).
  void merge_fragment(const Fragment& f);
  // All-reduces reduced_ = delta_ / shares over [offset, offset + count), shard k's buckets
  // by local rank k's ring (a sparse codec: sums the terms decode(encode(c)), c = beta e + delta,
  // by its sparse collective and divides the sum by shares). Returns whether every shard's ring
  // succeeded; `blamed` gets the nodes whose chunks were rejected as invalid (for the mesh to
  // evict). `fragment` (streaming, else -1) goes into the allreduce events.
  bool all_reduce(const RoundRecord& r, std::vector<std::int64_t>& blamed,
                  const std::vector<std::vector<Bucket>>& shards, std::uint64_t offset,
                  std::uint64_t count, int fragment = -1);
  // Local rank `shard`'s part of all_reduce(): its buckets over its ring (gather_shard or
  // ring_shard), catching the ring's failures into shard_ok_ / shard_blame_.
  void reduce_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                    int fragment);
  // A sparse codec's terms of the shard's buckets, all-gathered in one schedule.
  void gather_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                    int fragment);
  // The shard's buckets all-reduced by the dense ring, bucket by bucket or timed whole (a
  // sparse codec: each bucket's decoded term, over ring_codec_).
  void ring_shard(const RoundRecord& r, int shard, const std::vector<Bucket>& buckets,
                  int fragment);
  RingOptions ring_options(const RoundRecord& r, const Bucket& b) const;
  // One allreduce event per collective call: a bucket, or (a sparse gather) the shard's buckets
  // at once, `bucket` -1 and their number in `buckets_in_call` when there are several.
  // `via`: the collective, reported with a sparse codec.
  void report_collective(const RoundRecord& r, int shard, int fragment, SparseCollective via,
                         std::int64_t bucket, std::uint64_t elements, const RingStats& st,
                         double start_s, std::size_t buckets_in_call = 1);
  // Runs `rings` (the all-reduce of round `r`) while a watchdog aborts the rings once a member
  // is gone by the mesh (ring_watchdog_s > 0); returns when `rings` does.
  void watched(const RoundRecord& r, const std::function<void()>& rings);
  void apply(const RoundRecord& done, const RoundRecord& next);
  bool leave_requested();
  void emit(const std::string& type, JsonObject fields);

  InnerWorker& worker_;
  Store& store_;
  TransportFactory& transports_;
  Runtime& runtime_;
  EventSink& events_;
  DilocoOptions options_;
  std::unique_ptr<Codec> codec_;
  std::unique_ptr<Codec> ring_codec_;  // a sparse codec's dense ring (SparseCollective::kRing)
  std::unique_ptr<ElasticMesh> mesh_;
  RecoveryOptions recovery_;  // options_.recovery with the lease's bounds and the mesh's liveness
  std::int64_t id_ = -1;
  bool phantom_ = false;
  std::uint64_t count_ = 0;

  std::vector<float> outer_;  // theta_outer (fp32 outer copy)
  std::vector<float> delta_;  // theta_outer - theta_local of the current step
  // The current step's pseudo-gradient held NaN or Inf (the non-finite guard): delta_ was
  // zeroed and this node sits the step out (it asks the mesh to retry without its share).
  bool non_finite_ = false;
  std::vector<float> reduced_;  // delta / W, all-reduced
  std::unique_ptr<OuterOptimizer> optimizer_;
  std::vector<std::vector<Bucket>> shards_;

  std::uint64_t epoch_ = ~std::uint64_t{0};
  std::vector<std::unique_ptr<Transport>> rings_;  // one per local rank, of epoch_
  std::vector<RingWorkspace> ring_workspaces_;     // one per local rank, kept across rounds
  std::vector<char> shard_ok_;  // one byte per shard: written by the shards' activities
  // Per shard: the node whose chunk that shard's ring rejected (ProtocolError), or -1.
  std::vector<std::int64_t> shard_blame_;
  std::vector<std::unique_ptr<Activity>> servers_;
  RoundStats stats_;

  // Overlapped outer steps (options_.overlap != kNone).
  std::unique_ptr<Activity> phase_;      // the next step's inner steps, beside this round's ring
  RoundStats phase_stats_;               // written by phase_, read after join_phase()
  double compute_end_s_ = 0.0;           // when this node's last inner steps ended
  bool pending_ = false;                 // delta_ holds the pseudo-gradient of the round's step
  bool resumed_pending_ = false;         // pending_ came from DilocoOptions::initial_pending
  bool phase_ran_ = false;               // phase_ ran this round (joined before the report)
  std::vector<float> start_;             // the parameters phase_'s inner steps started from
  std::vector<std::int64_t> newcomers_;  // joiners of the current step's first attempt

  // Sparse outer steps (codec_->sparse()).
  bool sparse() const { return codec_->sparse(); }
  std::vector<float> feedback_;  // e: what this node has not sent yet (error feedback)
  std::vector<float> sent_;      // decode(encode(c)): this node's term of the round's sum
  // Per local rank: its buckets back to back, when local ranks cut them (gather input, own term).
  std::vector<std::vector<float>> gather_staging_;
  // Per local rank: a bucket's encoding, decoded into this node's term (the dense ring's input).
  std::vector<std::vector<std::byte>> own_encoding_;

  // Elastic data: on when the worker reads planned samples (not for timing-only workers).
  bool data_ = false;
  DataLedger ledger_;

  // Streaming outer steps (options_.streaming()).
  std::vector<Fragment> fragments_;
  std::vector<float> merged_;      // one fragment's outer parameters after the step (merge)
  double stream_exposed_s_ = 0.0;  // this round's waits for fragment syncs past their tau steps

  std::unique_ptr<Mutex> mu_;
  bool leave_ = false;  // guarded by mu_
};

}  // namespace meridian
