// Checkpoints of a real DiLoCo run (`meridian train RUN.yaml`, key `checkpoint:`): each node
// writes its whole state after an outer step, off the training thread, in the trainer's
// checkpoint format (trainer/checkpoint.h) plus the outer momentum and the outer progress; and
// `--resume` finds, verifies and agrees on the step every node can restart from. No LibTorch:
// the worker is seen through InnerWorker. Not the engine's live recovery (that ships the same
// state between live nodes) and not a scheduler of when nodes write (the caller decides).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/diloco/diloco.h"
#include "engine/core/inner_worker.h"
#include "engine/core/store.h"
#include "trainer/checkpoint.h"
#include "trainer/model_config.h"

namespace meridian::trainer {

// The state of one node after `steps_done` outer steps: everything an exact continuation
// needs. The outer parameters are also the worker's parameters at an outer-step boundary.
struct NodeState {
  std::int64_t steps_done = 0;
  std::vector<float> params, momentum;     // theta_outer and the outer (Nesterov) momentum
  std::vector<float> pending;              // overlapped: the next step's pseudo-gradient
  std::vector<float> local;                // streaming: the worker's parameters
  std::vector<float> error_feedback;       // a sparse codec: what the node has not sent
  std::vector<float> exp_avg, exp_avg_sq;  // the worker's AdamW moments
  std::string worker_progress;             // InnerWorker::progress(): inner step, data position
  std::string outer_json;                  // {"steps_done", "epoch", "members", "node"}
};

// Copies the state out of the node (`view`, from DilocoOptions::on_outer_step) and the worker:
// 16 bytes per parameter. Call it on the node's activity, between rounds.
NodeState snapshot_node_state(const OuterStepView& view, InnerWorker& worker);

// "<dir>/node-<id>" and "step-<steps_done, 12 digits>".
std::filesystem::path node_checkpoint_dir(const std::filesystem::path& dir, std::int64_t node_id);
std::string step_dir_name(std::int64_t steps_done);
// The steps_done of the complete checkpoints (step-<n> directories) in a node directory, ascending.
std::vector<std::int64_t> checkpoint_steps(const std::filesystem::path& node_dir);

// Retention of one node directory: keeps the newest `keep` complete checkpoints, removes the
// older ones (renamed to "<name>.deleting" first, so a crash half-way never leaves a
// step-<n> that looks complete), removes the leftovers of interrupted writes ("*.tmp<pid>"),
// and puts back a checkpoint an interrupted replace moved aside ("*.old<pid>") when its step
// directory is missing.
void apply_retention(const std::filesystem::path& node_dir, int keep);

struct CheckpointWriteResult {
  std::int64_t steps_done = 0;
  bool written = false;
  std::uint64_t bytes = 0;
  double elapsed_s = 0.0;  // the write (files, fsyncs, renames, retention)
  double wait_s = 0.0;     // the training loop's wait for the previous write (wait_idle)
  std::string path;
  std::string error;  // why it was not written
};

// One writer thread per node. The training loop waits for the previous write only when it is
// still running at the next checkpoint (back-pressure: the disk is slower than the schedule),
// then hands over a snapshot and goes on. Memory: one snapshot in flight (16 bytes per
// parameter) plus, while writing, one file read back for its CRC-32C (at most 12 bytes per
// parameter). A failed write is reported (written = false) and training goes on.
// Thread-safety: wait_idle() and submit() from one thread; `on_done` runs on the writer thread.
class CheckpointWriter {
 public:
  CheckpointWriter(std::filesystem::path node_dir, ModelConfig model, int keep,
                   std::function<void(const CheckpointWriteResult&)> on_done,
                   std::function<void(const std::filesystem::path&)> after_each_step = {});
  ~CheckpointWriter();  // finishes the write in progress
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits until no write is in progress (call it before taking the snapshot, so that only
  // one exists); the seconds waited go into the next write's result.
  void wait_idle();
  // Hands `state` to the writer thread (waiting first, as wait_idle(), if it is busy).
  void submit(NodeState state);

 private:
  void loop();

  const std::filesystem::path node_dir_;
  const ModelConfig model_;
  const int keep_;
  const std::function<void(const CheckpointWriteResult&)> on_done_;
  const std::function<void(const std::filesystem::path&)> after_each_step_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<NodeState> pending_;  // guarded by mu_
  double pending_wait_s_ = 0.0;       // guarded by mu_: the pending write's wait_s
  bool busy_ = false;                 // guarded by mu_: pending_ or a write in progress
  bool stop_ = false;                 // guarded by mu_
  double wait_s_ = 0.0;               // guarded by mu_: wait_idle()'s, for the next result
  std::thread thread_;
};

// A checkpoint this node can resume from: `own_shard` when it holds the inner state of the
// node's data shard; otherwise only its outer state is used (see load_for_resume).
struct ResumeCandidate {
  std::int64_t steps_done = 0;
  std::filesystem::path path;
  bool own_shard = false;
};

// What a resuming node starts from (`meridian train --resume-from`). kOwnShard (the default):
// only verified checkpoints of its own data shard; none is a refusal. kOtherShard: those, else
// any shard's verified ones (outer state only, fresh inner state). kPath: exactly the one
// checkpoint directory `path` (a step-<n>), its inner state too when it is of this shard.
struct ResumeFrom {
  enum class Kind { kOwnShard, kOtherShard, kPath };
  Kind kind = Kind::kOwnShard;
  std::filesystem::path path;  // kPath only
};
// "own-shard", "other-shard", or anything else non-empty as a path; ConfigError when empty.
ResumeFrom parse_resume_from(const std::string& text);

// A checkpoint the resume scan could not use, and why (read_checkpoint's message).
struct SkippedCheckpoint {
  std::filesystem::path path;
  std::string reason;
};

// The checkpoints under `dir`/node-*/ that data shard `shard` of `shards` may resume from,
// newest first, one per step, each fully verified (trainer/checkpoint.h's manifest and
// checks), chosen as `from` says. A checkpoint that fails verification goes to `skipped` (when
// set) and the next older one is tried; checkpoints of other shards are looked at only as
// kOtherShard allows. Never empty: when nothing is usable, ConfigError naming the shard, each
// checkpoint tried and why it failed, and the --resume-from choices.
std::vector<ResumeCandidate> find_resume_candidates(
    const std::filesystem::path& dir, const ModelConfig& model, int shard, int shards,
    const ResumeFrom& from, const std::function<void(const SkippedCheckpoint&)>& skipped);

// The resume barrier over the run's (fresh) store: each of the `nodes` resuming nodes publishes
// the steps it can resume from; all return the newest step every one of them has. ConfigError
// when there is none (naming what each node has) or when `nodes` nodes already take part;
// TimeoutError when the others do not come within timeout_s. A node with no steps (`steps`
// empty: it refuses to resume) publishes that and throws ConfigError at once, without waiting:
// the others fail as soon as they have all arrived instead of waiting for it.
std::int64_t agree_resume_step(Store& store, int nodes, const std::vector<std::int64_t>& steps,
                               double timeout_s);

// Whether every member writes a checkpoint after this outer step, agreed on through the store
// when the decision depends on each node's clock (`checkpoint.every_s`): the round's first
// member decides (`due`), the others read its decision (a silent first member within
// timeout_s means no checkpoint this time).
bool agree_checkpoint_due(Store& store, const OuterStepView& view, bool due, double timeout_s);

// Loads `c` into the worker and returns what the DiLoCo node starts from (first_outer_step,
// initial_momentum are set in `options`). A checkpoint of another data shard contributes only
// the outer state and the inner step count: the AdamW moments start at zero and the data at
// the start of this node's shard.
void load_for_resume(const ResumeCandidate& c, const ModelConfig& model, InnerWorker& worker,
                     DilocoOptions& options);

// Moves this node's checkpoints newer than `steps_done` (an abandoned continuation: they were
// not complete on every node) to "<node_dir>/superseded/", so a later resume never mixes them
// with the new continuation. Returns how many were moved.
int set_aside_newer(const std::filesystem::path& node_dir, std::int64_t steps_done);

}  // namespace meridian::trainer
