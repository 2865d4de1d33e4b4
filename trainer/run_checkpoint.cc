// Run checkpoints: the writer thread, retention, the resume scan and the two store agreements
// (which step to resume from; whether a clock-driven checkpoint is due). The files themselves
// are trainer/checkpoint.cc's; nothing here writes bytes of its own.
#include "trainer/run_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/error.h"

namespace meridian::trainer {
namespace fs = std::filesystem;
namespace {

constexpr char kStepPrefix[] = "step-";
constexpr std::size_t kStepDigits = 12;
constexpr char kResumeKey[] = "train/resume/";
constexpr char kDueKey[] = "train/checkpoint-due/";

// The steps_done of a complete checkpoint directory name "step-<12 digits>", else nullopt.
std::optional<std::int64_t> parse_step_name(const std::string& name) {
  const std::size_t p = sizeof kStepPrefix - 1;
  if (name.size() != p + kStepDigits || name.compare(0, p, kStepPrefix) != 0) return std::nullopt;
  std::int64_t v = 0;
  for (std::size_t i = p; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Complete checkpoint directories of one node directory, by steps_done.
std::map<std::int64_t, fs::path> complete_steps(const fs::path& node_dir) {
  std::map<std::int64_t, fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(node_dir, ec)) {
    const auto step = parse_step_name(e.path().filename().string());
    if (step && e.is_directory()) out[*step] = e.path();
  }
  return out;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<std::int64_t> split_steps(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

// The data shard recorded in a checkpoint's progress.json, once that file matches the
// manifest (the tensors are not read): {rank, world}, or nullopt when it does not match or does
// not say (full verification will name the problem).
std::optional<std::pair<int, int>> recorded_shard(const fs::path& step_dir) {
  try {
    const auto doc = nlohmann::json::parse(read_checkpoint_metadata(step_dir));
    const auto& s = doc.at("progress").at("shard");
    return std::make_pair(s.at("rank").get<int>(), s.at("world").get<int>());
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

NodeState snapshot_node_state(const OuterStepView& view, InnerWorker& worker) {
  NodeState s;
  s.steps_done = view.outer_step + 1;
  s.params.assign(view.outer_parameters.begin(), view.outer_parameters.end());
  s.momentum.assign(view.momentum.begin(), view.momentum.end());
  s.pending.assign(view.pending.begin(), view.pending.end());
  s.local.assign(view.local.begin(), view.local.end());
  s.error_feedback.assign(view.error_feedback.begin(), view.error_feedback.end());
  for (const StateSection& sec : worker.state_sections()) {
    if (sec.name == "adamw.exp_avg")
      s.exp_avg.assign(sec.values.begin(), sec.values.end());
    else if (sec.name == "adamw.exp_avg_sq")
      s.exp_avg_sq.assign(sec.values.begin(), sec.values.end());
    else
      throw ConfigError("checkpoint: the worker's state section '" + sec.name +
                        "' has no place in a checkpoint (AdamW moments only)");
  }
  MERIDIAN_CHECK_EQ(s.exp_avg.size(), s.params.size());
  MERIDIAN_CHECK_EQ(s.exp_avg_sq.size(), s.params.size());
  s.worker_progress = worker.progress();
  nlohmann::json outer = {{"steps_done", s.steps_done},
                          {"epoch", view.epoch},
                          {"members", view.members},
                          {"node", view.node},
                          {"fallback", view.fallback}};
  if (!view.data_ledger.empty()) outer["data_ledger"] = std::string(view.data_ledger);
  s.outer_json = outer.dump();
  return s;
}

fs::path node_checkpoint_dir(const fs::path& dir, std::int64_t node_id) {
  return dir / ("node-" + std::to_string(node_id));
}

std::string step_dir_name(std::int64_t steps_done) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%012lld", kStepPrefix, static_cast<long long>(steps_done));
  return buf;
}

std::vector<std::int64_t> checkpoint_steps(const fs::path& node_dir) {
  std::vector<std::int64_t> out;
  for (const auto& [step, path] : complete_steps(node_dir)) out.push_back(step);
  return out;
}

void apply_retention(const fs::path& node_dir, int keep) {
  MERIDIAN_CHECK_GE(keep, 1);
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& e : fs::directory_iterator(node_dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto dot = name.find('.');
    if (dot != std::string::npos && parse_step_name(name.substr(0, dot)))
      leftovers.push_back(e.path());  // step-<n>.tmp<pid>, .old<pid>, .deleting
  }
  std::sort(leftovers.begin(), leftovers.end());
  for (const fs::path& p : leftovers) {
    const std::string name = p.filename().string();
    const auto dot = name.find('.');
    const fs::path base = node_dir / name.substr(0, dot);
    // A replace that stopped between its two renames left the only copy of the step here.
    if (name.compare(dot, 4, ".old") == 0 && !fs::exists(base)) {
      fs::rename(p, base);
      continue;
    }
    fs::remove_all(p);
  }
  auto steps = complete_steps(node_dir);
  while (static_cast<int>(steps.size()) > keep) {
    const fs::path old = steps.begin()->second;
    const fs::path doomed = old.string() + ".deleting";
    fs::rename(old, doomed);
    fs::remove_all(doomed);
    steps.erase(steps.begin());
  }
}

CheckpointWriter::CheckpointWriter(fs::path node_dir, ModelConfig model, int keep,
                                   std::function<void(const CheckpointWriteResult&)> on_done,
                                   std::function<void(const fs::path&)> after_each_step)
    : node_dir_(std::move(node_dir)),
      model_(std::move(model)),
      keep_(keep),
      on_done_(std::move(on_done)),
      after_each_step_(std::move(after_each_step)) {
  if (keep_ < 1) throw ConfigError("checkpoint.keep: expected a positive integer");
  fs::create_directories(node_dir_);
  apply_retention(node_dir_, keep_);  // leftovers of a previous life
  thread_ = std::thread([this] { loop(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::wait_idle() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CheckpointWriter::submit(NodeState state) {
  wait_idle();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(state);
    pending_wait_s_ = wait_s_;
    wait_s_ = 0.0;
    busy_ = true;
  }
  cv_.notify_all();
}

void CheckpointWriter::loop() {
  while (true) {
    NodeState s;
    CheckpointWriteResult r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || pending_.has_value(); });
      if (!pending_) return;
      s = std::move(*pending_);
      pending_.reset();
      r.wait_s = pending_wait_s_;
    }
    r.steps_done = s.steps_done;
    r.path = (node_dir_ / step_dir_name(s.steps_done)).string();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      CheckpointView v;
      v.model = &model_;
      v.params = s.params;
      v.exp_avg = s.exp_avg;
      v.exp_avg_sq = s.exp_avg_sq;
      v.progress_json = s.worker_progress;
      v.outer_momentum = s.momentum;
      v.outer_pending = s.pending;
      v.outer_local = s.local;
      v.outer_error_feedback = s.error_feedback;
      v.outer_json = s.outer_json;
      v.after_each_step = after_each_step_;
      r.bytes = write_checkpoint(r.path, v);
      r.written = true;
      apply_retention(node_dir_, keep_);
    } catch (const std::exception& e) {  // a full or failing disk must not stop training
      r.error = e.what();
    }
    r.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s = NodeState{};  // free the snapshot before the next one can be taken
    if (on_done_) on_done_(r);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

ResumeFrom parse_resume_from(const std::string& text) {
  if (text.empty())
    throw ConfigError("--resume-from: expected own-shard, other-shard or a checkpoint directory");
  if (text == "own-shard") return {};
  if (text == "other-shard") return {ResumeFrom::Kind::kOtherShard, {}};
  return {ResumeFrom::Kind::kPath, fs::path(text)};
}

std::vector<ResumeCandidate> find_resume_candidates(
    const fs::path& dir, const ModelConfig& model, int shard, int shards, const ResumeFrom& from,
    const std::function<void(const SkippedCheckpoint&)>& skipped) {
  std::vector<SkippedCheckpoint> tried;  // every failure, for the refusal
  const auto skip = [&](const fs::path& p, const std::string& reason) {
    tried.push_back({p, reason});
    if (skipped) skipped(tried.back());
    return false;
  };
  // Fully verified, and the state after outer step `step` as the directory's name says.
  const auto verified = [&](std::int64_t step, const fs::path& p) {
    try {
      const LoadedCheckpoint l = read_checkpoint(p, model);
      if (l.outer_json.empty())
        throw ConfigError("a trainer checkpoint without a DiLoCo outer state");
      const auto done = nlohmann::json::parse(l.outer_json).at("steps_done").get<std::int64_t>();
      if (done != step)
        throw ConfigError("holds the state after outer step " + std::to_string(done) + ", not " +
                          std::to_string(step) + " as its name says");
      return true;
    } catch (const nlohmann::json::exception& e) {
      return skip(p, std::string("bad outer record (") + e.what() + ")");
    } catch (const Error& e) {
      return skip(p, e.what());
    }
  };
  const std::string this_shard =
      "data shard " + std::to_string(shard) + " of " + std::to_string(shards);
  const auto refuse = [&](const std::string& what) {
    std::string msg = "--resume: " + what;
    for (const auto& t : tried) msg += "\n  " + t.path.string() + ": " + t.reason;
    throw ConfigError(msg);
  };
  if (from.kind == ResumeFrom::Kind::kPath) {
    const auto step = parse_step_name(from.path.filename().string());
    if (!step)
      throw ConfigError("--resume-from=" + from.path.string() +
                        ": expected a checkpoint directory named step-<12 digits>");
    if (!verified(*step, from.path))
      refuse("--resume-from=" + from.path.string() + " is not a usable checkpoint; refusing:");
    const auto rec = recorded_shard(from.path);
    return {{*step, from.path, rec == std::make_pair(shard, shards)}};
  }
  if (!fs::is_directory(dir))
    throw ConfigError("--resume: checkpoint directory " + dir.string() + " not found");
  // Every complete step directory of every node, newest first.
  std::vector<std::pair<std::int64_t, fs::path>> all;
  std::error_code ec;
  for (const auto& node : fs::directory_iterator(dir, ec)) {
    if (!node.is_directory() || node.path().filename().string().rfind("node-", 0) != 0) continue;
    for (const auto& [step, path] : complete_steps(node.path())) all.emplace_back(step, path);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<ResumeCandidate> out;
  // This shard's checkpoints. One whose progress.json does not match its manifest cannot say
  // its shard: it is verified, to name why it is unusable.
  for (const auto& [step, path] : all) {
    if (!out.empty() && out.back().steps_done == step) continue;
    const auto rec = recorded_shard(path);
    if (rec && *rec != std::make_pair(shard, shards)) continue;
    if (verified(step, path)) out.push_back({step, path, true});
  }
  if (!out.empty()) return out;
  const std::string choices =
      " (pass --resume-from=other-shard to start from another shard's outer state with fresh "
      "AdamW moments and this shard's data from its start, or --resume-from=STEP_DIR to name "
      "one checkpoint)";
  if (from.kind != ResumeFrom::Kind::kOtherShard) {
    if (tried.empty())
      refuse("no checkpoint of " + this_shard + " under " + dir.string() + "; refusing to resume" +
             choices);
    refuse("no valid checkpoint of " + this_shard + " under " + dir.string() +
           "; refusing to resume" + choices + ". Tried, newest first:");
  }
  // --resume-from=other-shard: another shard's, for the outer state only (this shard's all
  // failed above).
  for (const auto& [step, path] : all) {
    if (!out.empty() && out.back().steps_done == step) continue;
    const auto rec = recorded_shard(path);
    if (rec && *rec != std::make_pair(shard, shards) && verified(step, path))
      out.push_back({step, path, false});
  }
  if (out.empty())
    refuse("no valid checkpoint of any shard under " + dir.string() +
           "; refusing to resume. Tried, newest first:");
  return out;
}

std::int64_t agree_resume_step(Store& store, int nodes, const std::vector<std::int64_t>& steps,
                               double timeout_s) {
  const std::string k = kResumeKey;
  const std::int64_t ticket = store.add(k + "ticket", 1);
  if (ticket > nodes)
    throw ConfigError("--resume: " + std::to_string(nodes) +
                      " nodes (RUN.yaml `nodes`) already resume this run; start this one without "
                      "--resume to join it by live recovery");
  store.set(k + "have/" + std::to_string(ticket), join(steps));
  if (store.add(k + "written", 1) == nodes) store.set(k + "ready", "1");
  if (steps.empty())
    throw ConfigError("--resume: no checkpoint to resume from (the others are told)");
  store.wait({k + "ready"}, timeout_s);
  std::set<std::int64_t> common(steps.begin(), steps.end());
  std::string detail;
  for (int t = 1; t <= nodes; ++t) {
    const std::string text = store.get(k + "have/" + std::to_string(t), timeout_s);
    const auto theirs = split_steps(text);
    std::set<std::int64_t> keep;
    for (std::int64_t s : theirs)
      if (common.count(s)) keep.insert(s);
    common = std::move(keep);
    detail += (detail.empty() ? "" : "; ") + std::string("node ") + std::to_string(t) + ": " +
              (text.empty() ? "none" : text);
  }
  if (common.empty())
    throw ConfigError(
        "--resume: no checkpoint step is complete on every resuming node (steps "
        "done, per node in order of arrival: " +
        detail + ")");
  return *common.rbegin();
}

bool agree_checkpoint_due(Store& store, const OuterStepView& view, bool due, double timeout_s) {
  const std::int64_t steps_done = view.outer_step + 1;
  const std::string key = kDueKey + std::to_string(steps_done);
  if (!view.members.empty() && view.members.front() == view.node) {
    store.set(key, due ? "1" : "0");
    if (steps_done > 3) store.erase(kDueKey + std::to_string(steps_done - 3));
    return due;
  }
  try {
    return store.get(key, timeout_s) == "1";
  } catch (const TimeoutError&) {
    return false;  // the deciding member is gone: the round after this one says so
  }
}

void load_for_resume(const ResumeCandidate& c, const ModelConfig& model, InnerWorker& worker,
                     DilocoOptions& options) {
  LoadedCheckpoint l = read_checkpoint(c.path, model);
  if (l.outer_json.empty())
    throw ConfigError("--resume: " + c.path.string() +
                      " is a trainer checkpoint without a DiLoCo outer state");
  std::string progress = l.progress_json;
  if (!c.own_shard) {
    // Another shard's inner state is not this node's: keep the inner step (the learning-rate
    // schedule), start the moments at zero and the data at the start of this shard.
    auto p = nlohmann::json::parse(progress);
    p["data"] = {{"epoch", 0}, {"index", 0}};
    progress = p.dump();
    std::fill(l.exp_avg.begin(), l.exp_avg.end(), 0.0f);
    std::fill(l.exp_avg_sq.begin(), l.exp_avg_sq.end(), 0.0f);
  }
  const std::span<float> params = worker.parameters();
  MERIDIAN_CHECK_EQ(params.size(), l.params.size());
  for (const StateSection& s : worker.state_sections()) {
    const std::vector<float>& src = s.name == "adamw.exp_avg" ? l.exp_avg : l.exp_avg_sq;
    MERIDIAN_CHECK_EQ(s.values.size(), src.size());
    std::copy(src.begin(), src.end(), s.values.begin());
  }
  worker.restore_progress(progress);
  std::copy(l.params.begin(), l.params.end(), params.begin());
  worker.parameters_updated();
  const auto outer = nlohmann::json::parse(l.outer_json);
  options.first_outer_step = outer.at("steps_done").get<std::int64_t>();
  MERIDIAN_CHECK_EQ(options.first_outer_step, c.steps_done);  // find_resume_candidates checked
  // The run's data ledger (the same in every node's checkpoint of a step: any shard's serves).
  if (const auto it = outer.find("data_ledger"); it != outer.end()) {
    if (!it->is_string())
      throw ConfigError("--resume: " + c.path.string() + ": outer.data_ledger is not a string");
    options.initial_data_ledger = it->get<std::string>();
    try {
      DataLedger::decode(options.initial_data_ledger);
    } catch (const ProtocolError& e) {
      throw ConfigError("--resume: " + c.path.string() + ": " + e.what());
    }
  }
  options.initial_momentum = std::move(l.outer_momentum);
  // An overlapped node's next pseudo-gradient came from its own shard's inner steps: from
  // another shard's checkpoint it would be counted twice (its owner sends it too), so that
  // node runs the step's inner steps again instead.
  // A streaming node's local parameters likewise hold its own shard's inner steps since each
  // fragment's merge: from another shard's checkpoint the node starts from the outer ones.
  // An error-feedback buffer is what that shard's node has not sent yet: its owner still holds
  // it, so from another shard's checkpoint the node starts from zeros, as a joiner does.
  if (c.own_shard) {
    options.initial_pending = std::move(l.outer_pending);
    options.initial_local = std::move(l.outer_local);
    options.initial_error_feedback = std::move(l.outer_error_feedback);
  }
}

int set_aside_newer(const fs::path& node_dir, std::int64_t steps_done) {
  int moved = 0;
  for (const auto& [step, path] : complete_steps(node_dir)) {
    if (step <= steps_done) continue;
    const fs::path to = node_dir / "superseded" / path.filename();
    fs::create_directories(to.parent_path());
    fs::remove_all(to);
    fs::rename(path, to);
    ++moved;
  }
  return moved;
}

}  // namespace meridian::trainer
