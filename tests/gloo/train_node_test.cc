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
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/etcd_cluster.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
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
std::map<long, std::pair<int, std::string>> checksums(const fs::path& node_dir) {
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

class TrainNodeTest : public ::testing::Test {
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
        << "model: tiny\nseed: 3\nnodes: " << nodes << "\nouter_steps: " << outer_steps
        << "\noutput_dir: " << (dir_ / "out").string() << "\n"
        << "data:\n  shards: 3\n  cache_dir: " << MERIDIAN_TRAINER_CACHE_DIR
        << "\n  batch: 2\n  seq_len: 32\n  validation_sequences: 2\n"
        << "diloco:\n  inner_steps: 4\n  codec: int8\n  allreduce_timeout_s: 15\n"
        << "  admission_timeout_s: 90\n  round_timeout_s: 90\n"
        << "heartbeat:\n  interval_s: 0.3\n  dead_after_s: 4\n"
        << "recovery:\n  timeout_s: 30\n"
        << extra;
  }

  // Starts `meridian train run.yaml --node-id ID ARGS...`, output in node<ID>.log.
  pid_t start(int id, std::vector<std::string> args, const std::string& secret = "secret") {
    std::vector<std::string> argv = {
        MERIDIAN_BIN,       "train",         (dir_ / "run.yaml").string(), "--node-id",
        std::to_string(id), "--secret-file", (dir_ / secret).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = (dir_ / ("node" + std::to_string(id) + ".log")).string();
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> c;
      for (auto& s : argv) c.push_back(s.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
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

  // Starts node 1 with the embedded store; returns the store's HOST:PORT.
  std::string start_first() {
    start(1, {"--serve-store", "0", "--bind", "127.0.0.1", "--store-port-file",
              (dir_ / "port").string()});
    EXPECT_TRUE(wait_until([&] { return fs::exists(dir_ / "port"); }, 60)) << log(1);
    std::string port = read_file(dir_ / "port");
    while (!port.empty() && port.back() == '\n') port.pop_back();
    return "127.0.0.1:" + port;
  }

  fs::path node_dir(int id) { return dir_ / "out" / ("node-" + std::to_string(id)); }

  fs::path dir_;
  std::vector<pid_t> pids_;
};

TEST_F(TrainNodeTest, ThreeNodesSurviveAKillAndARejoinMatchesThePeersChecksum) {
  constexpr int kOuterSteps = 40;
  write_run(3, kOuterSteps);
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 = start(2, {"--store", store});
  // Node 3 stops at its 20th outgoing ring message: in outer step 1's all-reduce (4 buckets,
  // 2 (W - 1) = 4 ring sends each, so 16 per outer step). Kill it there.
  const pid_t n3 = start(3, {"--store", store, "--fault-pause-at-message", "20", "--fault-marker",
                             (dir_ / "paused").string()});
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "paused"); }, 120)) << log(3);
  ::kill(n3, SIGKILL);
  EXPECT_EQ(finish(n3), 128 + SIGKILL);
  EXPECT_NE(log(3).find("paused at outgoing all-reduce message 20"), std::string::npos);
  // It applied outer step 0 only: the kill interrupted outer step 1's all-reduce.
  EXPECT_EQ(checksums(node_dir(3)).size(), 1u);
  // Restart it under a new id, on the dead node's data shard.
  const pid_t n4 = start(4, {"--store", store, "--shard", "2"});

  EXPECT_EQ(finish(n2), 0) << log(2);
  EXPECT_EQ(finish(n4), 0) << log(4);
  EXPECT_EQ(finish(n1), 0) << log(1);

  const auto c1 = checksums(node_dir(1)), c2 = checksums(node_dir(2)), c4 = checksums(node_dir(4));
  // The survivors went on to the end, and some round ran without the killed node.
  ASSERT_EQ(c1.size(), static_cast<std::size_t>(kOuterSteps));
  ASSERT_EQ(c2.size(), static_cast<std::size_t>(kOuterSteps));
  bool two_members = false;
  for (const auto& [step, v] : c1) two_members |= v.first == 2;
  EXPECT_TRUE(two_members);
  // Every step's outer parameters are identical on the survivors.
  EXPECT_EQ(c1, c2);
  // The rejoined node applied at least one step; at each (from its first) its checksum is its
  // peers'.
  ASSERT_FALSE(c4.empty()) << log(4);
  std::cout << "node 4 applied outer steps " << c4.begin()->first << ".." << c4.rbegin()->first
            << " of 0.." << kOuterSteps - 1 << std::endl;
  EXPECT_EQ(c4.rbegin()->first, kOuterSteps - 1);
  for (const auto& [step, v] : c4) {
    EXPECT_EQ(v.first, 3) << "outer step " << step;
    EXPECT_EQ(v.second, c1.at(step).second) << "outer step " << step;
  }
  EXPECT_NE(log(4).find("joining the run"), std::string::npos) << log(4);
  EXPECT_NE(log(1).find("| nodes 3 | loss "), std::string::npos) << log(1);
  // events.jsonl: the config record first, run_finished last.
  const std::string events = read_file(node_dir(4) / "events.jsonl");
  EXPECT_EQ(events.rfind("{\"t\":", 0), 0u);
  EXPECT_NE(events.substr(0, events.find('\n')).find("\"type\":\"config\""), std::string::npos);
  EXPECT_NE(events.find("\"type\":\"admitted\""), std::string::npos);
  EXPECT_NE(events.find("\"type\":\"run_finished\""), std::string::npos);
}

// The run's store on a 3-member etcd cluster (tests/store/etcd_cluster.h): a follower member is
// SIGKILLed mid-run and restarted, then the leader is SIGKILLed. With 3 members two dead at once
// would lose the quorum, so the follower is back before the leader goes. The nodes finish every
// outer step, all three in every round, with identical parameters at every step.
TEST_F(TrainNodeTest, ThreeNodesOnAnEtcdClusterFinishWhileAFollowerThenTheLeaderIsKilled) {
  using meridian::testing::EtcdCluster;
  if (!EtcdCluster::available())
    GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd, /usr/bin/etcdctl): apt-get install "
                    "etcd-server etcd-client";
  EtcdCluster etcd(3);
  constexpr int kOuterSteps = 60;
  write_run(3, kOuterSteps, "store: " + etcd.url("train-test") + "\n");
  const pid_t n1 = start(1, {}), n2 = start(2, {}), n3 = start(3, {});
  const auto steps = [&] { return checksums(node_dir(1)).size(); };
  ASSERT_TRUE(wait_until([&] { return steps() >= 3; }, 120)) << log(1);
  const int first_leader = etcd.leader();
  ASSERT_GE(first_leader, 0);
  const int follower = (first_leader + 1) % etcd.size();
  etcd.kill(follower);
  const std::size_t follower_killed_at = steps();
  ASSERT_TRUE(wait_until([&] { return steps() >= follower_killed_at + 3; }, 120)) << log(1);
  etcd.restart(follower);
  ASSERT_TRUE(etcd.wait_healthy(30.0));
  const int leader = etcd.leader();
  ASSERT_GE(leader, 0);
  etcd.kill(leader);
  const std::size_t leader_killed_at = steps();
  std::cout << "etcd member m" << follower << " (a follower) killed after outer step "
            << follower_killed_at << ", restarted; the leader m" << leader << " killed after "
            << leader_killed_at << " of " << kOuterSteps << std::endl;
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
  write_run(1, 1, "store: etcd://127.0.0.1\n");
  const pid_t p = start(1, {});
  EXPECT_EQ(finish(p), 2);
  EXPECT_NE(log(1).find("run.yaml: store: endpoint '127.0.0.1' is not HOST:PORT"),
            std::string::npos)
      << log(1);
  write_run(1, 1, "store: etcd://127.0.0.1:2379\n");
  const pid_t both = start(1, {"--serve-store", "0"});
  EXPECT_EQ(finish(both), 2);
  EXPECT_NE(log(1).find("the run uses etcd; --store and --serve-store are for"), std::string::npos)
      << log(1);
}

TEST_F(TrainNodeTest, AnUnknownRunKeyIsAConfigErrorNamingFileAndKey) {
  write_run(1, 1, "diloco_typo: 3\n");
  const pid_t p = start(1, {"--serve-store", "0"});
  EXPECT_EQ(finish(p), 2);
  EXPECT_NE(log(1).find("run.yaml: diloco_typo: unknown key"), std::string::npos) << log(1);
}

}  // namespace
