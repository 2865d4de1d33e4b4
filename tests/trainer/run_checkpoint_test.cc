// Run checkpoints (trainer/run_checkpoint.h) without LibTorch or a network: retention, a writer
// process killed at random points of its write (the previous checkpoint stays usable), corrupt,
// truncated and modified checkpoints (progress.json included: the manifest) skipped with a
// message naming them, the refusal when none of a shard's is valid and --resume-from's choices,
// the resume barrier over a store, and loading a node's state into a worker.
#include "trainer/run_checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"

namespace meridian::trainer {
namespace {

namespace fs = std::filesystem;

// A worker with plain vectors: what load_for_resume writes is what the test reads back.
class VectorWorker final : public InnerWorker {
 public:
  explicit VectorWorker(std::uint64_t n) : params(n), m(n), v(n) {}
  InnerStepsResult run_inner_steps(int) override { return {}; }
  std::uint64_t parameter_count() const override { return params.size(); }
  std::span<float> parameters() override { return params; }
  std::vector<std::uint64_t> bucket_boundaries() const override { return {0, params.size()}; }
  std::vector<StateSection> state_sections() override {
    return {{"adamw.exp_avg", m, m.size()}, {"adamw.exp_avg_sq", v, v.size()}};
  }
  std::string progress() const override { return progress_text; }
  void restore_progress(const std::string& p) override { progress_text = p; }

  std::vector<float> params, m, v;
  std::string progress_text;
};

class RunCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meridian-run-checkpoint-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = load_named_config("tiny").model;
    n_ = parameter_count(model_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // A node state whose every value is distinct per step, element and tensor.
  NodeState state(std::int64_t steps_done, int shard = 0) const {
    NodeState s;
    s.steps_done = steps_done;
    s.params.resize(n_);
    s.momentum.resize(n_);
    s.exp_avg.resize(n_);
    s.exp_avg_sq.resize(n_);
    for (std::uint64_t i = 0; i < n_; ++i) {
      const float b = static_cast<float>(steps_done * 1000003 + static_cast<std::int64_t>(i));
      s.params[i] = b;
      s.momentum[i] = b + 0.25f;
      s.exp_avg[i] = b + 0.5f;
      s.exp_avg_sq[i] = b + 0.75f;
    }
    s.worker_progress = "{\"step\":" + std::to_string(4 * steps_done) +
                        ",\"data\":{\"epoch\":0,\"index\":" + std::to_string(8 * steps_done) +
                        "},\"shard\":{\"rank\":" + std::to_string(shard) + ",\"world\":2}}";
    s.outer_json = "{\"steps_done\":" + std::to_string(steps_done) + "}";
    return s;
  }

  // Writes `states` through a CheckpointWriter for node `node`; returns the results.
  std::vector<CheckpointWriteResult> write(std::int64_t node, std::vector<NodeState> states,
                                           int keep = 10) {
    std::vector<CheckpointWriteResult> results;
    std::mutex mu;
    {
      CheckpointWriter w(node_checkpoint_dir(dir_, node), model_, keep,
                         [&](const CheckpointWriteResult& r) {
                           std::lock_guard<std::mutex> lock(mu);
                           results.push_back(r);
                         });
      for (auto& s : states) {
        w.wait_idle();
        w.submit(std::move(s));
      }
    }
    return results;
  }

  std::vector<ResumeCandidate> find(int shard, std::vector<std::string>* log = nullptr,
                                    ResumeFrom from = {}, int shards = 2) {
    return find_resume_candidates(
        dir_, model_, shard, shards, from, [&](const SkippedCheckpoint& s) {
          if (log) log->push_back("checkpoint " + s.path.string() + " skipped: " + s.reason);
        });
  }

  // find()'s refusal message; a test failure (and "") when it does not refuse.
  std::string refusal(int shard, ResumeFrom from = {}) {
    try {
      find(shard, nullptr, from);
      ADD_FAILURE() << "shard " << shard << " was not refused";
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  // Replaces the first `from` in `file` with `to` (same length: the file's size is unchanged).
  static void edit(const fs::path& file, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    std::string text;
    {
      std::ifstream in(file, std::ios::binary);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << file;
    text.replace(at, from.size(), to);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  }

  fs::path dir_;
  ModelConfig model_;
  std::uint64_t n_ = 0;
};

TEST_F(RunCheckpointTest, RetentionKeepsTheNewestAndCleansLeftovers) {
  const fs::path node = node_checkpoint_dir(dir_, 1);
  fs::create_directories(node / "step-000000000099.tmp4242");   // an interrupted write
  fs::create_directories(node / "step-000000000001.deleting");  // an interrupted deletion
  std::vector<NodeState> states;
  for (int s = 1; s <= 5; ++s) states.push_back(state(s));
  const auto results = write(1, std::move(states), 3);
  ASSERT_EQ(results.size(), 5u);
  for (const auto& r : results) {
    EXPECT_TRUE(r.written) << r.error;
    EXPECT_GT(r.bytes, 4 * n_ * sizeof(float));  // four tensors of n_ fp32, headers, JSON
  }
  EXPECT_EQ(checkpoint_steps(node), (std::vector<std::int64_t>{3, 4, 5}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(node)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-000000000003", "step-000000000004",
                                             "step-000000000005"}));

  // A replace that stopped between its renames left the step only as .old<pid>: put back.
  fs::rename(node / "step-000000000005", node / "step-000000000005.old77");
  apply_retention(node, 3);
  EXPECT_EQ(checkpoint_steps(node), (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(read_checkpoint(node / "step-000000000005", model_).params, state(5).params);
}

TEST_F(RunCheckpointTest, AWriterKilledAtRandomPointsLeavesThePreviousCheckpointUsable) {
  std::mt19937 rng(20261126);
  const fs::path node = node_checkpoint_dir(dir_, 1);
  write(1, {state(1), state(2)});
  // Durable steps of one write: model file, optimizer file, progress.json, manifest.json, the
  // directory fsync, then (replacing an existing step) the move aside, and the rename into place.
  for (int trial = 0; trial < 8; ++trial) {
    const bool replace = trial % 2 == 1;  // rewrite step 2 (the .old path) or write step 3
    const std::int64_t step = replace ? 2 : 3;
    const int k = std::uniform_int_distribution<int>(1, replace ? 7 : 6)(rng);
    const int cut_per_mille = std::uniform_int_distribution<int>(0, 999)(rng);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      int seen = 0;
      CheckpointWriter w(node, model_, 10, {}, [&](const fs::path& p) {
        if (++seen < k) return;
        // Also tear the file just written, as a crash inside its write would.
        if (fs::is_regular_file(p))
          fs::resize_file(p, fs::file_size(p) * static_cast<std::uintmax_t>(cut_per_mille) / 1000);
        ::_exit(3);
      });
      NodeState s = state(step);
      if (replace) s.params[0] = -1.0f;  // the rewrite is recognisable
      w.submit(std::move(s));
      w.wait_idle();
      ::_exit(0);  // k beyond the write's steps: it completed
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    const bool completed = WEXITSTATUS(status) == 0 || k == (replace ? 7 : 6);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", exit after durable step " +
                 std::to_string(k) + (completed ? " (after the rename)" : ""));
    // The next writer's start cleans up; then the newest complete checkpoint loads.
    apply_retention(node, 10);
    std::vector<std::string> log;
    const auto found = find(0, &log);
    EXPECT_TRUE(log.empty()) << log.front();
    ASSERT_FALSE(found.empty());
    const std::int64_t newest = (!replace && completed) ? 3 : 2;
    EXPECT_EQ(found.front().steps_done, newest);
    const LoadedCheckpoint l = read_checkpoint(found.front().path, model_);
    EXPECT_EQ(l.outer_momentum, state(newest).momentum);
    // A rewrite of step 2 is either wholly there or not at all.
    if (replace) {
      EXPECT_EQ(l.params[0], completed ? -1.0f : state(2).params[0]);
    }
    for (const auto& e : fs::directory_iterator(node))
      EXPECT_TRUE(e.path().filename().string().find('.') == std::string::npos) << e.path();
    if (!replace && completed) fs::remove_all(node / "step-000000000003");  // next trial again
  }
}

TEST_F(RunCheckpointTest, CorruptAndTruncatedCheckpointsAreSkippedWithTheirNames) {
  write(1, {state(1), state(2), state(3), state(4)});
  const fs::path node = node_checkpoint_dir(dir_, 1);
  {  // flip one byte in step 4's optimizer tensors
    std::fstream f(node / "step-000000000004" / "optimizer.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a');
  }
  const fs::path model3 = node / "step-000000000003" / "model.safetensors";
  fs::resize_file(model3, fs::file_size(model3) - 7);
  fs::remove(node / "step-000000000002" / "progress.json");
  std::vector<std::string> log;
  const auto found = find(0, &log);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].steps_done, 1);
  EXPECT_TRUE(found[0].own_shard);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_NE(log[0].find("step-000000000004 skipped"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("SHA-256 mismatch"), std::string::npos) << log[0];
  EXPECT_NE(log[1].find("step-000000000003 skipped"), std::string::npos) << log[1];
  EXPECT_NE(log[1].find("truncated"), std::string::npos) << log[1];
  EXPECT_NE(log[2].find("step-000000000002 skipped"), std::string::npos) << log[2];
  EXPECT_NE(log[2].find("missing"), std::string::npos) << log[2];
  // Nothing was deleted: the damaged ones are still there for a person to look at.
  EXPECT_EQ(checkpoint_steps(node), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

TEST_F(RunCheckpointTest, ResumeCandidatesAreThisShardsElseWhatResumeFromSays) {
  write(1, {state(1, 0), state(2, 0)});
  write(2, {state(1, 1), state(2, 1), state(3, 1)});
  auto f0 = find(0), f1 = find(1);
  ASSERT_EQ(f0.size(), 2u);
  EXPECT_EQ(f0[0].steps_done, 2);
  EXPECT_EQ(f0[0].path, node_checkpoint_dir(dir_, 1) / "step-000000000002");
  ASSERT_EQ(f1.size(), 3u);
  EXPECT_EQ(f1[0].path, node_checkpoint_dir(dir_, 2) / "step-000000000003");
  // A shard nobody wrote (here: another shard count) is refused, unless told other-shard:
  // then it gets every step, outer state only.
  try {
    find(2, nullptr, {}, 3);
    ADD_FAILURE() << "shard 2 of 3 was not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint of data shard 2 of 3"), std::string::npos)
        << e.what();
  }
  const auto other = find(2, nullptr, parse_resume_from("other-shard"), 3);
  ASSERT_EQ(other.size(), 3u);
  EXPECT_FALSE(other[0].own_shard);

  VectorWorker w(n_);
  DilocoOptions d;
  load_for_resume(f1[1], model_, w, d);  // own shard, step 2
  const NodeState want = state(2, 1);
  EXPECT_EQ(d.first_outer_step, 2);
  EXPECT_EQ(d.initial_momentum, want.momentum);
  EXPECT_EQ(w.params, want.params);
  EXPECT_EQ(w.m, want.exp_avg);
  EXPECT_EQ(w.v, want.exp_avg_sq);
  EXPECT_NE(w.progress_text.find("\"index\":16"), std::string::npos) << w.progress_text;

  VectorWorker fresh(n_);
  DilocoOptions d2;
  load_for_resume(other[0], model_, fresh, d2);  // another shard's step 3
  EXPECT_EQ(d2.first_outer_step, 3);
  EXPECT_EQ(fresh.params, state(3, 1).params);
  EXPECT_EQ(fresh.m, std::vector<float>(n_, 0.0f));
  EXPECT_EQ(fresh.v, std::vector<float>(n_, 0.0f));
  EXPECT_NE(fresh.progress_text.find("\"index\":0"), std::string::npos) << fresh.progress_text;
  EXPECT_NE(fresh.progress_text.find("\"step\":12"), std::string::npos) << fresh.progress_text;

  // Moving aside what a resume from step 1 abandons.
  EXPECT_EQ(set_aside_newer(node_checkpoint_dir(dir_, 2), 1), 2);
  EXPECT_EQ(checkpoint_steps(node_checkpoint_dir(dir_, 2)), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(checkpoint_steps(node_checkpoint_dir(dir_, 2) / "superseded"),
            (std::vector<std::int64_t>{2, 3}));
}

// Issue 36, item 5: progress.json (the data position, the step) had no checksum of its own, so
// one changed digit of data.index was resumed from. The manifest covers it.
TEST_F(RunCheckpointTest, AOneDigitChangeInProgressJsonIsDetectedAndTheOlderOneUsed) {
  write(1, {state(1), state(2)});
  const fs::path step2 = node_checkpoint_dir(dir_, 1) / "step-000000000002";
  edit(step2 / "progress.json", "\"index\": 16", "\"index\": 17");
  std::vector<std::string> log;
  const auto found = find(0, &log);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].steps_done, 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("step-000000000002 skipped"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("progress.json: SHA-256 mismatch"), std::string::npos) << log[0];
  EXPECT_THROW(read_checkpoint(step2, model_), ProtocolError);
  EXPECT_THROW(read_checkpoint_metadata(step2), ProtocolError);
  // The older one loads as it was written.
  VectorWorker w(n_);
  DilocoOptions d;
  load_for_resume(found[0], model_, w, d);
  EXPECT_EQ(d.first_outer_step, 1);
  EXPECT_EQ(w.params, state(1).params);
  EXPECT_NE(w.progress_text.find("\"index\":8"), std::string::npos) << w.progress_text;
}

TEST_F(RunCheckpointTest, AMissingManifestATruncatedFileAndAnUnlistedFileAreDetected) {
  write(1, {state(1), state(2), state(3), state(4)});
  const fs::path node = node_checkpoint_dir(dir_, 1);
  // Step 4 as a checkpoint written before manifests (or never finished) looks.
  fs::remove(node / "step-000000000004" / "manifest.json");
  const fs::path progress3 = node / "step-000000000003" / "progress.json";
  fs::resize_file(progress3, fs::file_size(progress3) - 1);  // still valid JSON: the newline
  std::ofstream(node / "step-000000000002" / "notes.txt") << "not part of the checkpoint\n";
  std::vector<std::string> log;
  const auto found = find(0, &log);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].steps_done, 1);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_NE(log[0].find("step-000000000004 has no manifest.json"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("refused"), std::string::npos) << log[0];
  EXPECT_NE(log[1].find("progress.json is "), std::string::npos) << log[1];
  EXPECT_NE(log[1].find("(truncated or replaced)"), std::string::npos) << log[1];
  EXPECT_NE(log[2].find("holds notes.txt, which its manifest does not list"), std::string::npos)
      << log[2];
  // A manifest that is itself damaged.
  const fs::path manifest1 = node / "step-000000000001" / "manifest.json";
  edit(manifest1, "\"files\"", "\"filez\"");
  EXPECT_THROW(read_checkpoint(node / "step-000000000001", model_), ProtocolError);
}

TEST_F(RunCheckpointTest, WithEveryCheckpointOfItsShardCorruptANodeRefusesNamingEach) {
  write(1, {state(1, 0), state(2, 0)});
  write(2, {state(1, 1), state(2, 1), state(3, 1)});
  const fs::path node = node_checkpoint_dir(dir_, 1);
  edit(node / "step-000000000002" / "progress.json", "\"index\": 16", "\"index\": 18");
  const fs::path opt1 = node / "step-000000000001" / "optimizer.safetensors";
  fs::resize_file(opt1, fs::file_size(opt1) - 3);
  // Before issue 36 this node went on from shard 1's step 3, outer state only, silently.
  const std::string why = refusal(0);
  EXPECT_NE(why.find("no valid checkpoint of data shard 0 of 2"), std::string::npos) << why;
  EXPECT_NE(why.find("refusing to resume"), std::string::npos) << why;
  EXPECT_NE(why.find("--resume-from=other-shard"), std::string::npos) << why;
  const auto line2 = why.find((node / "step-000000000002").string() + ": ");
  const auto line1 = why.find((node / "step-000000000001").string() + ": ");
  ASSERT_NE(line2, std::string::npos) << why;
  ASSERT_NE(line1, std::string::npos) << why;
  EXPECT_LT(line2, line1) << why;  // newest first
  EXPECT_NE(why.find("progress.json: SHA-256 mismatch", line2), std::string::npos) << why;
  EXPECT_NE(why.find("(truncated or replaced)", line1), std::string::npos) << why;
  // Another shard's refusal names the damaged progress.json too: it cannot say its shard.
  const std::string other = [&] {
    try {
      find(2, nullptr, {}, 3);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("not refused");
  }();
  EXPECT_NE(other.find("no valid checkpoint of data shard 2 of 3"), std::string::npos) << other;
  EXPECT_NE(other.find((node / "step-000000000002").string() + ": "), std::string::npos) << other;
}

TEST_F(RunCheckpointTest, ResumeFromStartsFromWhatItIsTold) {
  write(1, {state(1, 0), state(2, 0)});
  write(2, {state(1, 1), state(2, 1), state(3, 1)});
  const fs::path node1 = node_checkpoint_dir(dir_, 1), node2 = node_checkpoint_dir(dir_, 2);
  for (const char* s : {"step-000000000001", "step-000000000002"})
    edit(node1 / s / "progress.json", "\"epoch\": 0", "\"epoch\": 7");
  // other-shard: shard 1's steps, newest first, outer state only.
  std::vector<std::string> log;
  const auto other = find(0, &log, parse_resume_from("other-shard"));
  ASSERT_EQ(other.size(), 3u);
  EXPECT_EQ(other[0].path, node2 / "step-000000000003");
  EXPECT_FALSE(other[0].own_shard);
  EXPECT_EQ(log.size(), 2u);  // this shard's two, each named once
  VectorWorker w(n_);
  DilocoOptions d;
  load_for_resume(other[0], model_, w, d);
  EXPECT_EQ(d.first_outer_step, 3);
  EXPECT_EQ(w.params, state(3, 1).params);
  EXPECT_EQ(w.m, std::vector<float>(n_, 0.0f));
  // A path: exactly that checkpoint (here another shard's, so outer state only).
  const auto named = find(0, nullptr, parse_resume_from((node2 / "step-000000000002").string()));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].steps_done, 2);
  EXPECT_FALSE(named[0].own_shard);
  // ... and its own shard's, inner state included.
  const auto own = find(1, nullptr, parse_resume_from((node2 / "step-000000000001").string()));
  ASSERT_EQ(own.size(), 1u);
  EXPECT_TRUE(own[0].own_shard);
  // A named checkpoint that fails verification is a refusal naming why.
  const std::string why = refusal(0, parse_resume_from((node1 / "step-000000000002").string()));
  EXPECT_NE(why.find("is not a usable checkpoint"), std::string::npos) << why;
  EXPECT_NE(why.find("SHA-256 mismatch"), std::string::npos) << why;
  EXPECT_THROW(parse_resume_from(""), ConfigError);
  EXPECT_THROW(find(0, nullptr, parse_resume_from((dir_ / "elsewhere").string())), ConfigError);
  // With every checkpoint of every shard damaged, other-shard is refused too.
  for (const char* s : {"step-000000000001", "step-000000000002", "step-000000000003"})
    fs::remove(node2 / s / "model.safetensors");
  const std::string all = refusal(0, parse_resume_from("other-shard"));
  EXPECT_NE(all.find("no valid checkpoint of any shard"), std::string::npos) << all;
  EXPECT_NE(all.find((node2 / "step-000000000003").string() + ": "), std::string::npos) << all;
}

// Overlapped, streaming and sparse nodes carry one more vector each (the pending
// pseudo-gradient, the local parameters, the error-feedback buffer): written as outer_pending.*
// / outer_local.* / outer_error_feedback.* beside a flag in progress.json, read back bit for bit
// into DilocoOptions by this shard's node only.
TEST_F(RunCheckpointTest, PendingLocalAndErrorFeedbackVectorsRoundTripToTheirOwnShardOnly) {
  NodeState s = state(4, 0);
  s.pending.resize(n_);
  s.local.resize(n_);
  s.error_feedback.resize(n_);
  for (std::uint64_t i = 0; i < n_; ++i) {
    s.pending[i] = 0.125f * static_cast<float>(i) - 3.0f;
    s.local[i] = s.params[i] + 0.0625f;
    s.error_feedback[i] = -0.03125f * static_cast<float>(i);
  }
  const std::vector<float> pending = s.pending, local = s.local, feedback = s.error_feedback;
  NodeState only_local = state(5, 0);
  only_local.local = local;
  write(1, {s, only_local});
  auto candidates = find(0);
  ASSERT_EQ(candidates.size(), 2u);
  ASSERT_EQ(candidates[1].steps_done, 4);
  VectorWorker w(n_);
  DilocoOptions d;
  load_for_resume(candidates[1], model_, w, d);
  EXPECT_EQ(d.initial_pending, pending);
  EXPECT_EQ(d.initial_local, local);
  EXPECT_EQ(d.initial_error_feedback, feedback);
  EXPECT_EQ(w.params, state(4, 0).params);  // the outer parameters, as always
  DilocoOptions d5;
  load_for_resume(candidates[0], model_, w, d5);
  EXPECT_TRUE(d5.initial_pending.empty());
  EXPECT_TRUE(d5.initial_error_feedback.empty());
  EXPECT_EQ(d5.initial_local, local);
  // Another shard's node takes the outer state only.
  const auto other = find(1, nullptr, parse_resume_from("other-shard"));
  ASSERT_FALSE(other.empty());
  DilocoOptions d_other;
  load_for_resume(other[0], model_, w, d_other);
  EXPECT_TRUE(d_other.initial_local.empty());
  EXPECT_TRUE(d_other.initial_error_feedback.empty());
}

TEST(ResumeAgreement, TheNewestStepEveryNodeHasElseAClearError) {
  ThreadRuntime runtime;
  {
    MemoryStore store(runtime);
    const std::vector<std::vector<std::int64_t>> have = {{6, 4, 2}, {6, 4}, {4, 2}};
    std::vector<std::int64_t> got(3, -1);
    std::vector<std::thread> nodes;
    for (int i = 0; i < 3; ++i)
      nodes.emplace_back([&, i] { got[i] = agree_resume_step(store, 3, have[i], 10.0); });
    for (auto& t : nodes) t.join();
    EXPECT_EQ(got, (std::vector<std::int64_t>{4, 4, 4}));
    // A fourth resuming node is told to join instead.
    try {
      agree_resume_step(store, 3, {6, 4}, 1.0);
      ADD_FAILURE() << "a fourth node was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("already resume"), std::string::npos) << e.what();
    }
  }
  {
    MemoryStore store(runtime);
    std::string error;
    std::thread other([&] {
      try {
        agree_resume_step(store, 2, {3}, 10.0);
      } catch (const ConfigError& e) {
        error = e.what();
      }
    });
    EXPECT_THROW(agree_resume_step(store, 2, {5, 4}, 10.0), ConfigError);
    other.join();
    EXPECT_NE(error.find("no checkpoint step is complete on every resuming node"),
              std::string::npos)
        << error;
    EXPECT_TRUE(error.find("5,4") != std::string::npos && error.find(": 3") != std::string::npos)
        << error;
  }
  {
    // A node that refuses publishes no steps and throws at once; the other learns when both
    // have arrived, without waiting for its timeout.
    MemoryStore store(runtime);
    std::string error;
    std::thread other([&] {
      try {
        agree_resume_step(store, 2, {3}, 60.0);
      } catch (const ConfigError& e) {
        error = e.what();
      }
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(agree_resume_step(store, 2, {}, 60.0), ConfigError);
    other.join();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
    EXPECT_NE(error.find("no checkpoint step is complete on every resuming node"),
              std::string::npos)
        << error;
  }
}

TEST(CheckpointDue, TheRoundsFirstMemberDecidesForEveryone) {
  ThreadRuntime runtime;
  MemoryStore store(runtime);
  OuterStepView v;
  v.outer_step = 6;
  v.members = {3, 1, 2};
  v.node = 1;
  bool follower = true;
  std::thread other([&] { follower = agree_checkpoint_due(store, v, true, 10.0); });
  OuterStepView first = v;
  first.node = 3;
  EXPECT_FALSE(agree_checkpoint_due(store, first, false, 10.0));
  other.join();
  EXPECT_FALSE(follower);  // its own clock said yes; the first member's said no
  first.outer_step = 7;
  EXPECT_TRUE(agree_checkpoint_due(store, first, true, 10.0));
  v.outer_step = 7;
  EXPECT_TRUE(agree_checkpoint_due(store, v, false, 10.0));
  // A first member that never decides: no checkpoint this step.
  v.outer_step = 8;
  EXPECT_FALSE(agree_checkpoint_due(store, v, true, 0.2));
}

}  // namespace
}  // namespace meridian::trainer
