// `meridian train RUN.yaml` as separate processes on loopback: three nodes train `tiny` with
// DiLoCo over Gloo and the embedded TCP store; one is SIGKILLed in the middle of an all-reduce
// and a new node id rejoins by live recovery with the peers' parameter checksum; a wrong secret and
// an unknown RUN.yaml key are refused. With `store: etcd://...`, the run finishes while etcd
// members die. Waits poll files with timeouts; every port is ephemeral.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gloo/train_processes.h"
#include "tests/store/etcd_cluster.h"

namespace {

namespace fs = std::filesystem;
using meridian::testing::checksums;
using meridian::testing::expect_every_position_trained_once;
using meridian::testing::read_file;
using meridian::testing::wait_until;

using Checksums = decltype(checksums(fs::path()));

class TrainNodeTest : public meridian::testing::TrainProcessTest {
 protected:
  struct KillAndRejoin {
    Checksums c1, c2, c4;
  };
  // Three nodes of run.yaml (written by the caller); node 3 pauses at its `message`-th outgoing
  // ring message, in outer step 1's all-reduce, and is SIGKILLed there; node 4 starts in its
  // place (no --shard: the run's data plan gives it node 3's share). Every node ends; the
  // survivors ran every step, some without node 3, and agree step by step; node 4 applied a step
  // and agrees with them at each of its steps; every position of the data order handed out was
  // trained exactly once (node 3's positions of step 1 by the next step's members).
  KillAndRejoin kill_node_3_at_message_and_rejoin(int outer_steps, int message) {
    const std::string store = start_first();
    const pid_t n1 = pids_.back();
    const pid_t n2 = start(2, {"--store", store});
    const pid_t n3 = start(3, {"--store", store, "--fault-pause-at-message",
                               std::to_string(message), "--fault-marker",
                               (dir_ / "paused").string()});
    KillAndRejoin out;
    EXPECT_TRUE(wait_until([&] { return fs::exists(dir_ / "paused"); }, 120)) << log(3);
    if (!fs::exists(dir_ / "paused")) return out;
    ::kill(n3, SIGKILL);
    EXPECT_EQ(finish(n3), 128 + SIGKILL);
    EXPECT_NE(log(3).find("paused at outgoing all-reduce message " + std::to_string(message)),
              std::string::npos);
    // It applied outer step 0 only: the kill interrupted outer step 1's all-reduce.
    EXPECT_EQ(checksums(node_dir(3)).size(), 1u);
    // A replacement under a new id.
    const pid_t n4 = start(4, {"--store", store});
    EXPECT_EQ(finish(n2), 0) << log(2);
    EXPECT_EQ(finish(n4), 0) << log(4);
    EXPECT_EQ(finish(n1), 0) << log(1);
    out = {checksums(node_dir(1)), checksums(node_dir(2)), checksums(node_dir(4))};
    // The survivors went on to the end, and some round ran without the killed node.
    EXPECT_EQ(out.c1.size(), static_cast<std::size_t>(outer_steps));
    EXPECT_EQ(out.c2.size(), static_cast<std::size_t>(outer_steps));
    bool two_members = false;
    for (const auto& [step, v] : out.c1) two_members |= v.first == 2;
    EXPECT_TRUE(two_members);
    // Every step's outer parameters are identical on the survivors.
    EXPECT_EQ(out.c1, out.c2);
    // The rejoined node applied at least one step; at each its checksum is its peers'.
    EXPECT_FALSE(out.c4.empty()) << log(4);
    const auto data = meridian::testing::data_records(dir_ / out_);
    expect_every_position_trained_once(data);
    EXPECT_NE(data.at(1).at("returned"), nlohmann::json::array()) << "node 3's share of step 1";
    for (const auto& [step, v] : out.c4) {
      const auto peer = out.c1.find(step);
      EXPECT_NE(peer, out.c1.end()) << "outer step " << step;
      if (peer != out.c1.end()) {
        EXPECT_EQ(v.second, peer->second.second) << "outer step " << step;
      }
    }
    return out;
  }
};

TEST_F(TrainNodeTest, ThreeNodesSurviveAKillAndARejoinMatchesThePeersChecksum) {
  constexpr int kOuterSteps = 80;  // the restarted node races the run's end (label timing)
  write_run(3, kOuterSteps);
  // Node 3 stops at its 20th outgoing ring message: in outer step 1's all-reduce (4 buckets,
  // 2 (W - 1) = 4 ring sends each, so 16 per outer step).
  const auto [c1, c2, c4] = kill_node_3_at_message_and_rejoin(kOuterSteps, 20);
  ASSERT_FALSE(c4.empty());
  std::cout << "node 4 applied outer steps " << c4.begin()->first << ".." << c4.rbegin()->first
            << " of 0.." << kOuterSteps - 1 << std::endl;
  EXPECT_EQ(c4.rbegin()->first, kOuterSteps - 1);
  for (const auto& [step, v] : c4) EXPECT_EQ(v.first, 3) << "outer step " << step;
  EXPECT_NE(log(4).find("joining the run"), std::string::npos) << log(4);
  EXPECT_NE(log(1).find("| nodes 3 | loss "), std::string::npos) << log(1);
  // The terminal says what happened (issue 34), not only events.jsonl: the joiner's admission
  // and live recovery, and on a survivor the round that lost node 3 and the smaller epoch.
  EXPECT_NE(log(4).find("node 4: admitted at epoch "), std::string::npos) << log(4);
  EXPECT_NE(log(4).find("node 4: live recovery: "), std::string::npos) << log(4);
  EXPECT_NE(log(1).find("node 1: outer step 2: all-reduce retry 1 ("), std::string::npos) << log(1);
  EXPECT_NE(log(1).find(": 2 nodes ["), std::string::npos) << log(1);
  // events.jsonl: the config record first, run_finished last.
  const std::string events = read_file(node_dir(4) / "events.jsonl");
  EXPECT_EQ(events.rfind("{\"t\":", 0), 0u);
  EXPECT_NE(events.substr(0, events.find('\n')).find("\"type\":\"config\""), std::string::npos);
  EXPECT_NE(events.find("\"type\":\"admitted\""), std::string::npos);
  EXPECT_NE(events.find("\"type\":\"run_finished\""), std::string::npos);
}

// Streaming DiLoCo over Gloo (diloco.fragments 2, fragment_delay 1, fragment_alpha 0.5): node 3
// is SIGKILLed in the middle of a fragment's all-reduce, which runs beside the others' inner
// steps. The survivors fail that round, retry it without node 3 and go on bit-identical; a node
// restarted under a new id recovers at a boundary and agrees with them from its first step.
TEST_F(TrainNodeTest, StreamingSurvivesAKillDuringAFragmentsAllReduce) {
  // Long enough for node 4 to start and be admitted: node 3's death costs the survivors no
  // lease any more (its lease connection closes with it), so the run goes on at once, and 12
  // steps of `tiny` (then, in a loaded `make test`, 40: 7 s) ran out before node 4's process
  // was up. Still a race with a process start: `timing`.
  constexpr int kOuterSteps = 120;
  diloco_extra_ = "  fragments: 2\n  fragment_delay: 1\n  fragment_alpha: 0.5\n";
  write_run(3, kOuterSteps);
  // tiny's 4 buckets make 2 fragments: the embedding, then the rest. 16 ring sends per outer
  // step (4 per bucket at W = 3); the 18th is in step 1's first fragment, beside inner steps.
  kill_node_3_at_message_and_rejoin(kOuterSteps, 18);
  // The fragments' syncs ran, and the round node 3 died in was retried.
  const std::string events = read_file(node_dir(1) / "events.jsonl");
  EXPECT_NE(events.find("\"type\":\"fragment_sync\""), std::string::npos);
  EXPECT_NE(events.find("\"type\":\"retry\""), std::string::npos);
}

// Events are flushed per record (issue 36): a node SIGKILLed from outside after some outer steps
// (no fault point: nothing flushes on its way out) keeps, whole, every record it emitted up to
// the kill. Its checksums.tsv line of a step is written after that step's `outer_step` record,
// so the file holds at least as many of those as the checksums have lines. (Buffered, the
// records of its first steps were still in the process's stream buffer and died with it.)
TEST_F(TrainNodeTest, ANodeKilledFromOutsideKeepsItsEventsUpToTheKill) {
  write_run(2, 5);
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 = start(2, {"--store", store});
  ASSERT_TRUE(wait_until([&] { return checksums(node_dir(2)).size() >= 2; }, 120)) << log(2);
  ::kill(n2, SIGKILL);
  EXPECT_EQ(finish(n2), 128 + SIGKILL);
  const std::size_t applied = checksums(node_dir(2)).size();
  std::map<std::string, std::size_t> types;
  std::istringstream in(read_file(node_dir(2) / "events.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(record.is_discarded()) << "not a whole JSON record: " << line;
    ++types[record.value("type", "")];
  }
  EXPECT_EQ(types["config"], 1u);
  EXPECT_EQ(types["node_started"], 1u);
  EXPECT_GE(types["epoch_formed"], 1u);
  EXPECT_GE(types["outer_step"], applied);
  EXPECT_GE(types["inner_steps"], applied);
  EXPECT_EQ(types.count("run_finished"), 0u);
  EXPECT_EQ(finish(n1), 0) << log(1);  // it goes on alone to the end
}

// Checkpoints and whole-run resume: three nodes, 8 outer steps, a checkpoint after every step.
// The uninterrupted run is the reference; each test kills every node of a second run and
// resumes it, and the resumed run's last checkpoint (outer parameters, outer momentum, AdamW
// moments) must equal the reference's, byte for byte, on every node.
class TrainResumeTest : public TrainNodeTest {
 protected:
  static constexpr int kOuterSteps = 8;
  static constexpr char kLast[] = "step-000000000008";

  // The run file with checkpoints in <dir_>/ckpt-<name>, output in <dir_>/<name>.
  void write_run_named(const std::string& name, int nodes = 3) {
    out_ = name;
    write_run(nodes, kOuterSteps,
              "checkpoint:\n  dir: ckpt-" + name + "\n  every_steps: 1\n  keep: 20\n");
  }
  fs::path ckpt(const std::string& name, int id) {
    return dir_ / ("ckpt-" + name) / ("node-" + std::to_string(id));
  }

  // Runs three nodes to the end (all with `args`); expects each to finish.
  void run_to_end(const std::vector<std::string>& args) {
    const std::string store = start_first(args);
    const pid_t n1 = pids_.back();
    std::vector<std::string> a2 = {"--store", store}, a3 = a2;
    a2.insert(a2.end(), args.begin(), args.end());
    a3.insert(a3.end(), args.begin(), args.end());
    const pid_t n2 = start(2, a2), n3 = start(3, a3);
    EXPECT_EQ(finish(n2), 0) << log(2);
    EXPECT_EQ(finish(n3), 0) << log(3);
    EXPECT_EQ(finish(n1), 0) << log(1);
  }

  // The uninterrupted run, in <dir_>/ckpt-ref.
  void run_reference() {
    write_run_named("ref");
    run_to_end({});
    for (int id = 1; id <= 3; ++id) ASSERT_TRUE(fs::exists(ckpt("ref", id) / kLast)) << log(id);
  }

  // Resumes run `name` with three nodes and compares its last checkpoints with the reference.
  void resume_and_compare(const std::string& name) {
    write_run_named(name);
    run_to_end({"--resume"});
    for (int id = 1; id <= 3; ++id) {
      SCOPED_TRACE("node " + std::to_string(id));
      for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
        const std::string got = read_file(ckpt(name, id) / kLast / f);
        ASSERT_FALSE(got.empty()) << log(id);
        EXPECT_TRUE(got == read_file(ckpt("ref", id) / kLast / f)) << f << " differs";
      }
      const auto mine = checksums(node_dir(id)),
                 ref = checksums(dir_ / "ref" / ("node-" + std::to_string(id)));
      ASSERT_FALSE(mine.empty());
      EXPECT_EQ(mine.rbegin()->first, kOuterSteps - 1);
      EXPECT_EQ(mine.rbegin()->second, ref.rbegin()->second);
      // One history: the second life appended to the first's file, after a run_resumed record.
      EXPECT_FALSE(fs::exists(node_dir(id) / "events.jsonl.1"));
      const std::string events = read_file(node_dir(id) / "events.jsonl");
      EXPECT_NE(events.find("\"type\":\"checkpoint\""), std::string::npos);
      EXPECT_NE(events.find("\"type\":\"run_resumed\",\"life\":"), std::string::npos) << events;
    }
    // The data each step trained is the uninterrupted run's, node by node, in both lives.
    const auto data = meridian::testing::data_records(dir_ / name),
               ref = meridian::testing::data_records(dir_ / "ref");
    EXPECT_EQ(data, ref);
    expect_every_position_trained_once(data);
    // The report covers the whole run: every planned step done, and where it resumed.
    const fs::path html = dir_ / (name + "-report.html");
    const std::string cmd = std::string(MERIDIAN_BIN) + " report " + (dir_ / name).string() +
                            " --out " + html.string() + " > " + (dir_ / "report.log").string() +
                            " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(dir_ / "report.log");
    const std::string page = read_file(html);
    EXPECT_NE(
        page.find(std::to_string(kOuterSteps) + " of " + std::to_string(kOuterSteps) + " planned"),
        std::string::npos);
    EXPECT_NE(page.find("after outer step"), std::string::npos);
    // And the merged run's summary.json beside it, as a simulation has one.
    const auto summary = nlohmann::json::parse(read_file(dir_ / name / "summary.json"));
    EXPECT_EQ(summary["outer_steps"], kOuterSteps);
    EXPECT_EQ(summary["complete"], true);
    EXPECT_EQ(summary["resumes"].size(), 3u);  // each node once
  }
};

TEST_F(TrainResumeTest, EveryNodeSigkilledMidRunResumesBitIdentical) {
  ASSERT_NO_FATAL_FAILURE(run_reference());
  write_run_named("killed");
  // Node 3 stops at its 68th outgoing ring message, in outer step 4's all-reduce (16 per
  // step); the other two wait in that ring. Then every node is SIGKILLed.
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 = start(2, {"--store", store});
  const pid_t n3 = start(3, {"--store", store, "--fault-pause-at-message", "68", "--fault-marker",
                             (dir_ / "paused").string()});
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "paused"); }, 120)) << log(3);
  for (pid_t p : {n1, n2, n3}) ::kill(p, SIGKILL);
  for (pid_t p : {n1, n2, n3}) EXPECT_EQ(finish(p), 128 + SIGKILL);
  // Node 1's newest checkpoint is damaged: it is skipped (named) and an older step is used.
  const auto steps = [&](int id) {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(ckpt("killed", id))) {
      const std::string name = e.path().filename();
      if (name.size() == 17 && name.find('.') == std::string::npos) v.push_back(name);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto have1 = steps(1);
  ASSERT_GE(have1.size(), 2u);
  const fs::path damaged = ckpt("killed", 1) / have1.back();
  {
    std::fstream f(damaged / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  fs::copy(dir_ / "ckpt-killed", dir_ / "ckpt-fewer", fs::copy_options::recursive);
  // A SIGKILL in the middle of writing a record leaves half a line: the resumed node drops it.
  std::ofstream(node_dir(1) / "events.jsonl", std::ios::app) << R"({"t":9.5,"node":1,"type":"out)";
  resume_and_compare("killed");
  EXPECT_NE(log(1).find("last line was cut short (29 bytes"), std::string::npos) << log(1);
  EXPECT_NE(log(1).find("checkpoint " + damaged.string() + " skipped"), std::string::npos)
      << log(1);
  EXPECT_NE(log(1).find("SHA-256 mismatch"), std::string::npos) << log(1);
  const std::string from = "resuming after outer step ";
  const auto at = log(2).find(from);
  ASSERT_NE(at, std::string::npos) << log(2);
  const long resumed_at = std::stol(log(2).substr(at + from.size()));
  std::cout << "killed during outer step 4; node 1's newest checkpoint " << have1.back()
            << " damaged; resumed after outer step " << resumed_at << std::endl;
  EXPECT_LT(resumed_at, std::stol(have1.back().substr(5)));
  EXPECT_GE(resumed_at, 1);
  // The same checkpoints resumed by two nodes: each takes its own shard's inner state, the data
  // ledger plans for two, and the run ends with every position handed out trained once.
  write_run_named("fewer", 2);
  const std::string store2 = start_first({"--resume"});
  const pid_t f1 = pids_.back();
  const pid_t f2 = start(2, {"--store", store2, "--resume"});
  EXPECT_EQ(finish(f2), 0) << log(2);
  EXPECT_EQ(finish(f1), 0) << log(1);
  EXPECT_NE(log(2).find("resuming after outer step " + std::to_string(resumed_at) + "/8 from " +
                        (ckpt("fewer", 2) / "step-").string()),
            std::string::npos)
      << log(2);
  EXPECT_TRUE(fs::exists(ckpt("fewer", 2) / kLast)) << log(2);
  EXPECT_EQ(checksums(node_dir(1)).rbegin()->second, checksums(node_dir(2)).rbegin()->second);
  {
    // Its steps before the resume are the first life's (the reference's, as above).
    auto data = meridian::testing::data_records(dir_ / "fewer");
    ASSERT_FALSE(data.empty());
    const long first = data.begin()->first;
    for (const auto& [step, r] : meridian::testing::data_records(dir_ / "ref"))
      if (step < first) data.emplace(step, r);
    expect_every_position_trained_once(data);
  }
  // A fresh start (no --resume) over checkpoints of an earlier run is refused.
  start_first();
  EXPECT_EQ(finish(pids_.back()), 2) << log(1);
  EXPECT_NE(log(1).find("holds checkpoints of an earlier run"), std::string::npos) << log(1);
}

TEST_F(TrainResumeTest, ACrashInsideACheckpointWriteLeavesThePreviousOneUsable) {
  ASSERT_NO_FATAL_FAILURE(run_reference());
  write_run_named("crashed");
  // Node 2 exits at a random durable step (seeded) of its checkpoint writes: 6 per write
  // (model, optimizer, progress.json, manifest.json, directory fsync, rename), so inside
  // write 2, 3 or 4.
  std::mt19937 rng(19);
  const int k = std::uniform_int_distribution<int>(7, 23)(rng);
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 =
      start(2, {"--store", store, "--fault-exit-in-checkpoint-write", std::to_string(k)});
  const pid_t n3 = start(3, {"--store", store});
  EXPECT_EQ(finish(n2), 3) << log(2);
  EXPECT_NE(log(2).find("fault: exit in a checkpoint write"), std::string::npos) << log(2);
  for (pid_t p : {n1, n3}) ::kill(p, SIGKILL);
  for (pid_t p : {n1, n3}) finish(p);
  std::cout << "node 2 exited after durable step " << k << " of its checkpoint writes" << std::endl;
  resume_and_compare("crashed");
  // Node 2's interrupted write was cleaned up when it resumed.
  for (const auto& e : fs::directory_iterator(ckpt("crashed", 2)))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// Issue 36, item 5, as a user meets it: one node (nodes: 1) writes a checkpoint after each of
// 8 outer steps; node 2 runs shard 1 alone for 6. One changed digit of data.index in node 1's
// newest progress.json: --resume skips that checkpoint (named, with an event) and resumes from
// the step before, ending bit-identical to the first life. Every checkpoint of node 1 damaged:
// --resume refuses (exit 2) naming each; --resume-from=other-shard then starts from shard 1's.
TEST_F(TrainResumeTest, AModifiedProgressJsonIsSkippedAndANodeWithNoValidCheckpointRefuses) {
  write_run_named("solo", 1);
  start_first();
  ASSERT_EQ(finish(pids_.back()), 0) << log(1);
  const pid_t n2 = start(2, {"--serve-store", "0", "--set", "run.outer_steps=6"});
  ASSERT_EQ(finish(n2), 0) << log(2);
  const fs::path node1 = ckpt("solo", 1);
  const fs::path last = node1 / kLast;
  {  // one digit of data.index
    std::string text = read_file(last / "progress.json");
    const auto at = text.find("\"index\": ");
    ASSERT_NE(at, std::string::npos) << text;
    char& digit = text[at + 9];
    ASSERT_TRUE(digit >= '0' && digit <= '9') << text;
    digit = digit == '9' ? '8' : static_cast<char>(digit + 1);
    std::ofstream(last / "progress.json", std::ios::trunc) << text;
  }
  start_first({"--resume"});
  EXPECT_EQ(finish(pids_.back()), 0) << log(1);
  EXPECT_NE(log(1).find("checkpoint " + last.string() + " skipped"), std::string::npos) << log(1);
  EXPECT_NE(log(1).find("progress.json: SHA-256 mismatch"), std::string::npos) << log(1);
  EXPECT_NE(log(1).find("resuming after outer step 7/8 from " + (node1 / "step-").string()),
            std::string::npos)
      << log(1);
  EXPECT_NE(read_file(node_dir(1) / "events.jsonl").find("\"type\":\"checkpoint_skipped\""),
            std::string::npos);
  // The first life's step 8 (its tensors were not touched) was set aside; the second's equals it.
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string got = read_file(last / f);
    ASSERT_FALSE(got.empty()) << f;
    EXPECT_TRUE(got == read_file(node1 / "superseded" / kLast / f)) << f << " differs";
  }

  // Every checkpoint of node 1 (shard 0) damaged: a refusal naming each, not shard 1's state.
  std::vector<fs::path> damaged;
  for (const auto& e : fs::directory_iterator(node1))
    if (e.path().filename().string().rfind("step-", 0) == 0) damaged.push_back(e.path());
  ASSERT_EQ(damaged.size(), 8u);
  for (const fs::path& p : damaged)
    fs::resize_file(p / "model.safetensors", fs::file_size(p / "model.safetensors") - 1);
  start_first({"--resume"});
  EXPECT_EQ(finish(pids_.back()), 2) << log(1);
  EXPECT_NE(log(1).find("no valid checkpoint of data shard 0 of 3"), std::string::npos) << log(1);
  EXPECT_NE(log(1).find("--resume-from=other-shard"), std::string::npos) << log(1);
  for (const fs::path& p : damaged)
    EXPECT_NE(log(1).find(p.string() + ": checkpoint file"), std::string::npos) << p << log(1);
  EXPECT_EQ(log(1).find("resuming after"), std::string::npos) << log(1);

  // Told to, it starts from shard 1's newest (step 6): outer state only, and finishes.
  start_first({"--resume-from=other-shard"});
  EXPECT_EQ(finish(pids_.back()), 0) << log(1);
  EXPECT_NE(log(1).find("resuming after outer step 6/8 from " +
                        (ckpt("solo", 2) / "step-000000000006").string() +
                        " (another shard's: outer state only, fresh inner state)"),
            std::string::npos)
      << log(1);
  EXPECT_EQ(checksums(node_dir(1)).rbegin()->first, kOuterSteps - 1);
}

// The run's store on a 3-member etcd cluster (tests/store/etcd_cluster.h): a follower member is
// SIGKILLed mid-run and restarted, then the leader is SIGKILLed. The nodes finish every
// outer step, all three in every round, with identical parameters at every step.
TEST_F(TrainNodeTest, ThreeNodesOnAnEtcdClusterFinishWhileAFollowerThenTheLeaderIsKilled) {
  using meridian::testing::EtcdCluster;
  if (!EtcdCluster::available())
    GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd, /usr/bin/etcdctl): apt-get install "
                    "etcd-server etcd-client";
  EtcdCluster etcd(3);
  constexpr int kOuterSteps = 60;
  write_run(3, kOuterSteps, "store: {address: '" + etcd.url("train-test") + "'}\n");
  const pid_t n1 = start(1, {}), n2 = start(2, {}), n3 = start(3, {});
  const auto steps = [&] { return checksums(node_dir(1)).size(); };
  const std::size_t leader_killed_at =
      meridian::testing::kill_etcd_follower_then_leader(etcd, steps, log(1));
  EXPECT_LT(leader_killed_at, static_cast<std::size_t>(kOuterSteps))
      << "the run ended before the leader was killed: nothing was shown";

  EXPECT_EQ(finish(n1), 0) << log(1);
  EXPECT_EQ(finish(n2), 0) << log(2);
  EXPECT_EQ(finish(n3), 0) << log(3);
  const auto c1 = checksums(node_dir(1)), c2 = checksums(node_dir(2)), c3 = checksums(node_dir(3));
  ASSERT_EQ(c1.size(), static_cast<std::size_t>(kOuterSteps));
  for (const auto& [step, v] : c1) EXPECT_EQ(v.first, 3) << "outer step " << step;
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(c1, c3);
}

// One run file for simulation and reality: the simulator's INTELLECT-1 scenario, as it is in
// scenarios/, starts real nodes on loopback once --set shrinks the model and the run (the
// scenario's network and hardware sections are noted as not used).
TEST_F(TrainNodeTest, TheSimulatorsScenarioRunsForRealWithSetOverrides) {
  run_file_ = std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-global.yaml";
  const std::vector<std::string> shrink = {
      "--set", "model={config: tiny, seq_len: 32}", "--set", "train.batch=2",
      "--set", "run.nodes=2",       "--set", "run.outer_steps=2",
      "--set", "diloco.H=2",        "--set", "diloco.local_ranks=1",
      "--set", "data.cache_dir=" MERIDIAN_TRAINER_CACHE_DIR,
      "--set", "data.validation_sequences=2",
      "--set", "output.dir=" + (dir_ / out_).string()};
  const std::string store = start_first(shrink);
  std::vector<std::string> second = {"--store", store};
  second.insert(second.end(), shrink.begin(), shrink.end());
  const pid_t n2 = start(2, second);
  EXPECT_EQ(finish(n2), 0) << log(2);
  EXPECT_EQ(finish(pids_.front()), 0) << log(1);
  EXPECT_NE(log(1).find("intellect1-global.yaml: network: not used by a real run"),
            std::string::npos)
      << log(1);
  const auto c1 = checksums(node_dir(1)), c2 = checksums(node_dir(2));
  ASSERT_EQ(c1.size(), 2u) << log(1);
  EXPECT_EQ(c1, c2);  // both nodes applied the same two outer steps
}

TEST_F(TrainNodeTest, AWrongSecretIsRefused) {
  write_run(2, 1);
  const std::string store = start_first();
  const pid_t intruder = start(2, {"--store", store}, "wrong-secret");
  EXPECT_EQ(finish(intruder), 2);
  EXPECT_NE(log(2).find("wrong secret"), std::string::npos) << log(2);
}

TEST_F(TrainNodeTest, ADifferentRunConfigurationIsRefused) {
  write_run(2, 1);
  const std::string store = start_first();  // node 1 has read run.yaml once its store listens
  write_run(2, 2);                          // node 2 reads another outer_steps
  const pid_t other = start(2, {"--store", store});
  EXPECT_EQ(finish(other), 2);
  EXPECT_NE(log(2).find("run configuration differs"), std::string::npos) << log(2);
}

TEST_F(TrainNodeTest, AMalformedEtcdStoreUrlIsAConfigErrorNamingTheKeyAndTheProblem) {
  write_run(1, 1, "store: {address: 'etcd://127.0.0.1'}\n");
  const pid_t p = start(1, {});
  EXPECT_EQ(finish(p), 2);
  EXPECT_NE(log(1).find("run.yaml: store.address: endpoint '127.0.0.1' is not HOST:PORT"),
            std::string::npos)
      << log(1);
  write_run(1, 1, "store: {address: 'etcd://127.0.0.1:2379'}\n");
  const pid_t both = start(1, {"--serve-store", "0"});
  EXPECT_EQ(finish(both), 2);
  EXPECT_NE(log(1).find("the run uses etcd; --store and --serve-store are for"), std::string::npos)
      << log(1);
}

// Connections per peer are the Gloo transport's: with NCCL the key is refused, by name, before
// anything connects.
TEST_F(TrainNodeTest, ConnectionsPerPeerWithNcclIsAConfigErrorNamingTheKey) {
  write_run(1, 1, "transport: {kind: nccl, connections_per_peer: 4}\n");
  const pid_t p = start(1, {"--serve-store", "0"});
  EXPECT_EQ(finish(p), 2);
  EXPECT_NE(log(1).find("run.yaml: transport.connections_per_peer: 4 is the Gloo transport's"),
            std::string::npos)
      << log(1);
}

TEST_F(TrainNodeTest, AnUnknownRunKeyIsAConfigErrorNamingFileAndKey) {
  write_run(1, 1, "diloco_typo: 3\n");
  const pid_t p = start(1, {"--serve-store", "0"});
  EXPECT_EQ(finish(p), 2);
  EXPECT_NE(log(1).find("run.yaml:20: unknown key 'diloco_typo'; keys of a run file:"),
            std::string::npos)
      << log(1);
}

}  // namespace
