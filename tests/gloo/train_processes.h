// Test support for `meridian train RUN.yaml` nodes as separate processes (label `gloo`): a
// fixture that writes RUN.yaml and the secrets in a temporary folder, starts nodes (under a
// launcher such as `ip netns exec NS` where asked), waits for them and reads their files
// (checksums.tsv, logs). Waits poll files with timeouts; every port is ephemeral. Not a launcher
// for real runs (scripts/launch_local.sh).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/mesh/data_records.h"

namespace meridian::testing {

namespace fs = std::filesystem;

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits (polling every 50 ms) until `ready` holds; false after `timeout_s`.
template <typename F>
bool wait_until(F ready, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// outer_step -> {members, crc32c} from a node's checksums.tsv.
inline std::map<long, std::pair<int, std::string>> checksums(const fs::path& node_dir) {
  std::map<long, std::pair<int, std::string>> out;
  std::istringstream in(read_file(node_dir / "checksums.tsv"));
  std::string header, line;
  std::getline(in, header);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    long step = -1, epoch = -1;
    int members = 0;
    std::string crc;
    if (f >> step >> epoch >> members >> crc) out[step] = {members, crc};
  }
  return out;
}

// The `data` records (elastic data) of every node's events.jsonl under `run_dir` (node-*/),
// every life (tests/mesh/data_records.h checks that every node settled a step the same way).
inline DataRecords data_records(const fs::path& run_dir) {
  DataRecords out;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    if (e.path().filename().string().rfind("node-", 0) != 0) continue;
    std::istringstream in(read_file(e.path() / "events.jsonl"));
    for (std::string line; std::getline(in, line);)
      add_data_record(out, nlohmann::json::parse(line, nullptr, false), e.path().string());
  }
  return out;
}

// With a run under way on `etcd` (tests/store/etcd_cluster.h) whose node 1 has applied `steps()`
// outer steps: once it has applied 3, SIGKILLs a follower member, restarts it 3 steps later and
// waits until the cluster is healthy, then SIGKILLs the leader. (With 3 members two dead at once
// would lose the quorum, so the follower is back before the leader goes.) Prints what it did and
// returns node 1's step count when the leader died; a gtest failure (and 0) when a wait runs out.
template <typename Etcd, typename Steps>
std::size_t kill_etcd_follower_then_leader(Etcd& etcd, Steps steps, const std::string& log) {
  if (!wait_until([&] { return steps() >= 3; }, 120)) return ADD_FAILURE() << log, 0;
  const int first_leader = etcd.leader();
  if (first_leader < 0) return ADD_FAILURE() << "etcd has no leader", 0;
  const int follower = (first_leader + 1) % etcd.size();
  etcd.kill(follower);
  const std::size_t follower_killed_at = steps();
  if (!wait_until([&] { return steps() >= follower_killed_at + 3; }, 120))
    return ADD_FAILURE() << log, 0;
  etcd.restart(follower);
  if (!etcd.wait_healthy(30.0)) return ADD_FAILURE() << "etcd did not become healthy", 0;
  const int leader = etcd.leader();
  if (leader < 0) return ADD_FAILURE() << "etcd has no leader", 0;
  etcd.kill(leader);
  const std::size_t leader_killed_at = steps();
  std::cout << "etcd member m" << follower << " (a follower) killed after outer step "
            << follower_killed_at << ", restarted; the leader m" << leader << " killed after "
            << leader_killed_at << std::endl;
  return leader_killed_at;
}

// Forks and executes `argv` with stdout in `out` and stderr in `err` (the same file when equal,
// truncated); returns the child's pid.
inline pid_t spawn(std::vector<std::string> argv, const std::string& out, const std::string& err) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(err == out ? fd : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 2);
    std::vector<char*> c;
    for (auto& s : argv) c.push_back(s.data());
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  return pid;
}

class TrainProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meridian-train-node-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    write_secret("secret", "the-run-secret");
    write_secret("wrong-secret", "not-the-run-secret");
  }
  void TearDown() override {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void write_secret(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text << "\n";
    fs::permissions(dir_ / name, fs::perms::owner_read | fs::perms::owner_write);
  }

  void write_run(int nodes, int outer_steps, const std::string& extra = "") {
    std::ofstream(dir_ / "run.yaml")
        << "run: {seed: 3, nodes: " << nodes << ", outer_steps: " << outer_steps << "}\n"
        << "model: {config: tiny, seq_len: 32}\ntrain: {batch: 2}\n"
        << "output: {dir: " << (dir_ / out_).string() << "}\n"
        << "data:\n  shards: " << shards_ << "\n  cache_dir: " << MERIDIAN_TRAINER_CACHE_DIR
        << "\n  validation_sequences: 2\n"
        << "diloco:\n  H: 4\n  codec: " << codec_ << "\n  local_ranks: 1\n  timeout_s: "
        << allreduce_timeout_s_
        << "\n"
        << "  admission_timeout_s: 90\n  round_timeout_s: 90\n"
        << diloco_extra_
        << "  heartbeat_s: " << heartbeat_s_ << "\n  dead_after_s: " << dead_after_s_ << "\n"
        << "recovery:\n  timeout_s: " << recovery_timeout_s_ << "\n"
        << (recovery_chunk_bytes_ > 0
                ? "  chunk_bytes: " + std::to_string(recovery_chunk_bytes_) + "\n"
                : std::string())
        << extra;
  }

  // Starts `meridian train run.yaml --node-id ID ARGS...` (under launcher_[ID] when set), output
  // in node<ID>.log.
  pid_t start(int id, std::vector<std::string> args, const std::string& secret = "secret") {
    std::vector<std::string> argv = launcher_[id];
    const std::vector<std::string> command = {
        MERIDIAN_BIN,       "train",         run_file_.empty() ? (dir_ / "run.yaml").string() : run_file_, "--node-id",
        std::to_string(id), "--secret-file", (dir_ / secret).string()};
    argv.insert(argv.end(), command.begin(), command.end());
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = (dir_ / ("node" + std::to_string(id) + ".log")).string();
    const pid_t pid = spawn(argv, log, log);
    pids_.push_back(pid);
    return pid;
  }

  // Waits for the process; returns its exit status (128 + signal when killed).
  int finish(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pids_.erase(std::find(pids_.begin(), pids_.end(), pid));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string log(int id) { return read_file(dir_ / ("node" + std::to_string(id) + ".log")); }

  // Starts node 1 with the embedded store on `bind`; returns the store's HOST:PORT.
  std::string start_first(std::vector<std::string> more = {},
                          const std::string& bind = "127.0.0.1") {
    fs::remove(dir_ / "port");
    more.insert(more.begin(), {"--serve-store", "0", "--bind", bind, "--store-port-file",
                               (dir_ / "port").string()});
    start(1, more);
    EXPECT_TRUE(wait_until([&] { return fs::exists(dir_ / "port"); }, 60)) << log(1);
    std::string port = read_file(dir_ / "port");
    while (!port.empty() && port.back() == '\n') port.pop_back();
    return bind + ":" + port;
  }

  fs::path node_dir(int id) { return dir_ / out_ / ("node-" + std::to_string(id)); }

  fs::path dir_;
  std::string out_ = "out";  // output.dir (under dir_) of the next write_run
  std::string diloco_extra_;  // more lines of the diloco section ("  key: value\n" each)
  std::string codec_ = "int8";  // diloco.codec
  std::string run_file_;     // the run file start() gives ("" = dir_/run.yaml)
  std::vector<pid_t> pids_;
  // RUN.yaml's data shards and liveness (write_run).
  int shards_ = 3;
  double heartbeat_s_ = 0.3, dead_after_s_ = 4;
  std::size_t recovery_chunk_bytes_ = 0;  // 0: the default
  double allreduce_timeout_s_ = 15;       // also the bound on an epoch's connect
  double recovery_timeout_s_ = 30;
  std::map<int, std::vector<std::string>> launcher_;  // node id -> argv prefix (ip netns exec)
};

}  // namespace meridian::testing
