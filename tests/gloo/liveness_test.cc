// Liveness of real runs (`meridian train` processes on loopback, the embedded TCP store): what a
// stranger or a dying joiner can cost a run is bounded by the lease, never by the recovery or
// all-reduce timeouts and never forever. Each test measures the longest gap between two of a
// survivor's outer steps; both are `timing` (the bound assumes the machine trains a round of
// `tiny` in a few seconds). Every port is ephemeral; waits poll files with timeouts.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gloo/train_processes.h"
#include "tests/store/etcd_cluster.h"

namespace {

namespace fs = std::filesystem;
using meridian::testing::checksums;
using meridian::testing::read_file;
using meridian::testing::wait_until;

// The times (`t`) of a node's records of `type`, in file order.
std::vector<double> times_of(const fs::path& events, const std::string& type = "outer_step") {
  std::vector<double> out;
  std::istringstream in(read_file(events));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"" + type + "\"") == std::string::npos) continue;
    if (line.rfind("{\"t\":", 0) != 0) continue;
    out.push_back(std::strtod(line.c_str() + 5, nullptr));
  }
  return out;
}

// The longest gap between consecutive outer steps `from`..`to` (from >= 1 skips start-up).
double longest_stall_s(const std::vector<double>& t, std::size_t from, std::size_t to) {
  double worst = 0;
  for (std::size_t i = std::max<std::size_t>(from, 1); i < std::min(to, t.size()); ++i)
    worst = std::max(worst, t[i] - t[i - 1]);
  return worst;
}

// A stranger that opens a TCP connection to each listening port of the given processes (but
// one: the store's) as soon as it sees it, up to kConnections ports, and then holds them
// without a byte, as half-open peers would. Gloo's tcp pairs listen on a short-lived port each
// and accept the first connection that arrives. It looks every millisecond, so it reaches the
// ports of the first epochs for certain; unbounded, a stranger this fast wins almost every
// epoch's accept race on this machine and denies progress (engine/backends/gloo/README.md,
// "Every pair authenticated"), which only a transport with its own listener can close. Stops
// (closing what it holds) when destroyed.
class ListenerSquatter {
 public:
  static constexpr std::chrono::milliseconds kScanInterval{1};
  static constexpr int kConnections = 3;

  explicit ListenerSquatter(int store_port) : store_port_(store_port) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ListenerSquatter() {
    stop_ = true;
    thread_.join();
    for (int fd : held_) ::close(fd);
  }
  void watch(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    pids_.push_back(pid);
  }
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(held_.size());
  }

 private:
  // LISTEN sockets of IPv4: (port, inode).
  static std::vector<std::pair<int, std::string>> listening() {
    std::vector<std::pair<int, std::string>> out;
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode))
        continue;
      if (state != "0A") continue;
      out.emplace_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16), inode);
    }
    return out;
  }
  bool owned_by_a_watched_process(const std::string& inode) {
    std::vector<pid_t> pids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pids = pids_;
    }
    const std::string want = "socket:[" + inode + "]";
    for (pid_t pid : pids) {
      const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
      DIR* d = ::opendir(dir.c_str());
      if (d == nullptr) continue;
      bool found = false;
      while (dirent* e = ::readdir(d)) {
        char target[64] = {};
        const std::string link = dir + "/" + e->d_name;
        const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
        if (n > 0 && want == target) found = true;
      }
      ::closedir(d);
      if (found) return true;
    }
    return false;
  }
  void loop() {
    std::set<std::string> seen;
    while (!stop_ && held() < kConnections) {
      for (const auto& [port, inode] : listening()) {
        if (held() >= kConnections) break;
        if (port == store_port_ || !seen.insert(inode).second) continue;
        if (!owned_by_a_watched_process(inode)) {
          seen.erase(inode);  // perhaps not yet a watched process's: look again
          continue;
        }
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
          std::lock_guard<std::mutex> lock(mu_);
          held_.push_back(fd);
        } else {
          ::close(fd);
        }
      }
      std::this_thread::sleep_for(kScanInterval);
    }
  }

  const int store_port_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<pid_t> pids_;  // guarded by mu_
  std::vector<int> held_;    // guarded by mu_
  std::thread thread_;
};

class LivenessTest : public meridian::testing::TrainProcessTest {
 protected:
  void SetUp() override {
    TrainProcessTest::SetUp();
    // The recovery and all-reduce bounds far above the lease: a stall that waits for either
    // shows as one, and the lease (3 s) is what should bound it.
    heartbeat_s_ = 0.3;
    dead_after_s_ = 3;
    recovery_timeout_s_ = 60;
    allreduce_timeout_s_ = 60;
  }
  // The lease, the connections' bound (twice the lease) and a round of `tiny` on a loaded
  // 2-vCPU machine.
  double stall_bound_s() const { return dead_after_s_ + 2 * dead_after_s_ + 10; }

  // More outer steps than a test waits for: the run is ended by stop_after.
  static constexpr int kLongRun = 100000;

  // Waits until node 1 has applied `steps` outer steps (a frozen run fails here), then stops
  // `nodes` gracefully (SIGTERM: leave after the current round; node 1 keeps the store it
  // serves up until the others have left), each expected to exit 0. Returns node 1's outer
  // steps when they were asked to stop: the steps every survivor made.
  // `watched`: the node whose outer steps are counted (node 1 unless it was killed).
  std::size_t stop_after(std::size_t steps, const std::vector<std::pair<int, pid_t>>& nodes,
                         int watched = 1) {
    const bool reached =
        wait_until([&] { return checksums(node_dir(watched)).size() >= steps; }, 240);
    const std::size_t done = checksums(node_dir(watched)).size();
    for (const auto& [id, pid] : nodes) ::kill(pid, SIGTERM);
    finish_within(nodes, 120);
    if (!reached)
      ADD_FAILURE() << "node " << watched << " applied " << done << " of " << steps
                    << " outer steps within 240 s (frozen):\n"
                    << log(watched);
    return done;
  }

  // Finishes nodes `ids` (exit 0 expected) or, when they are not all done within `timeout_s`,
  // kills them and fails: a frozen run.
  void finish_within(const std::vector<std::pair<int, pid_t>>& nodes, double timeout_s) {
    const bool done = wait_until(
        [&] {
          for (const auto& [id, pid] : nodes) {
            if (exit_.count(id)) continue;
            int status = 0;
            if (::waitpid(pid, &status, WNOHANG) != pid) return false;
            pids_.erase(std::find(pids_.begin(), pids_.end(), pid));
            exit_[id] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          }
          return true;
        },
        timeout_s);
    if (!done) {
      for (const auto& [id, pid] : nodes) ADD_FAILURE() << "node " << id << ":\n" << log(id);
      FAIL() << "the run did not finish within " << timeout_s << " s (frozen)";
    }
    for (const auto& [id, pid] : nodes) EXPECT_EQ(exit_[id], 0) << log(id);
  }

  // At every outer step that node `reference` (node 1 unless it was killed) and node `id` both
  // applied, their checksums are equal.
  void expect_agree(const std::vector<int>& ids, int reference = 1) {
    const auto c1 = checksums(node_dir(reference));
    for (int id : ids)
      for (const auto& [step, v] : checksums(node_dir(id))) {
        if (c1.count(step)) {
          EXPECT_EQ(v.second, c1.at(step).second)
              << "node " << id << " against node " << reference << ", outer step " << step;
        }
      }
  }

  // The `process_gone` records in the events of nodes `ids`; `gone` > 0: only those naming it.
  std::size_t process_gone_records(const std::vector<int>& ids, int gone = 0) {
    const std::string names = "\"node_gone\":" + std::to_string(gone);
    std::size_t n = 0;
    for (int id : ids) {
      std::istringstream in(read_file(node_dir(id) / "events.jsonl"));
      for (std::string line; std::getline(in, line);)
        n += line.find("\"type\":\"process_gone\"") != std::string::npos &&
             (gone <= 0 || line.find(names) != std::string::npos);
    }
    return n;
  }

  std::map<int, int> exit_;
};

TEST_F(LivenessTest, AJoinerThatDiesRightAfterAdmissionCostsTheRunALeaseNotTheRecoveryTimeout) {
  write_run(3, kLongRun);
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 = start(2, {"--store", store}), n3 = start(3, {"--store", store});
  // Once the run has formed, node 4 starts, is admitted at the first boundary after it queued,
  // and dies before it connects to its sources.
  ASSERT_TRUE(wait_until([&] { return !checksums(node_dir(1)).empty(); }, 180)) << log(1);
  const pid_t n4 = start(4, {"--store", store, "--shard", "0", "--fault-kill", "admitted"});
  EXPECT_EQ(finish(n4), 128 + SIGKILL) << log(4);
  EXPECT_NE(log(4).find("fault: SIGKILL in admission"), std::string::npos) << log(4);
  const std::size_t killed_at = checksums(node_dir(1)).size();
  const std::size_t end = stop_after(killed_at + 10, {{1, n1}, {2, n2}, {3, n3}});

  const auto c1 = checksums(node_dir(1));
  ASSERT_GE(c1.size(), end);
  expect_agree({2, 3});
  const double stall = longest_stall_s(times_of(node_dir(1) / "events.jsonl"), 1, end);
  std::cout << "node 4 killed at admission after outer step " << killed_at
            << "; longest gap between outer steps 1.." << end << ": " << stall << " s (bound "
            << stall_bound_s() << " s; recovery and all-reduce timeouts 60 s)" << std::endl;
  EXPECT_LT(stall, stall_bound_s());
}

// A joiner SIGKILLed right after its admission is dead to the others at once, on either store,
// with a lease of 30 s: on the TCP store its lease ends when the connection it is held on closes
// (engine/backends/store_tcp/tcp_store.h); on etcd, which has no such signal, the coordinator's
// process probe, answered at the joiner's admission, is refused (engine/core/process_probe.h).
// The stall its death costs must stay far below the lease (it was the lease).
class KilledJoinerTest : public LivenessTest {
 protected:
  // The longest gap between node 1's outer steps around the joiner's death; `store_line`: the
  // run file's store section ("" = the embedded TCP store node 1 serves).
  double killed_joiner_stall_s(const std::string& store_line) {
    dead_after_s_ = 30;
    write_run(3, kLongRun, store_line);
    std::vector<std::string> args;
    pid_t n1 = 0;
    if (store_line.empty()) {
      args = {"--store", start_first()};
      n1 = pids_.back();
    } else {
      n1 = start(1, {});
    }
    const pid_t n2 = start(2, args), n3 = start(3, args);
    if (!wait_until([&] { return !checksums(node_dir(1)).empty(); }, 180))
      return ADD_FAILURE() << log(1), 0.0;
    std::vector<std::string> joiner = args;
    joiner.insert(joiner.end(), {"--shard", "0", "--fault-kill", "admitted"});
    const pid_t n4 = start(4, joiner);
    EXPECT_EQ(finish(n4), 128 + SIGKILL) << log(4);
    const std::size_t killed_at = checksums(node_dir(1)).size();
    const std::size_t end = stop_after(killed_at + 5, {{1, n1}, {2, n2}, {3, n3}});
    expect_agree({2, 3});
    const double stall = longest_stall_s(times_of(node_dir(1) / "events.jsonl"), 1, end);
    std::cout << "node 4 killed at admission after outer step " << killed_at
              << "; longest gap between outer steps 1.." << end << ": " << stall
              << " s (lease 30 s)" << std::endl;
    return stall;
  }
};

TEST_F(KilledJoinerTest, OnTheTcpStoreItIsDeadAtOnceNotAfterItsLease) {
  EXPECT_LT(killed_joiner_stall_s(""), dead_after_s_ / 2.0);
}

TEST_F(KilledJoinerTest, OnEtcdItIsDeadAtOnceNotAfterItsLease) {
  if (!meridian::testing::EtcdCluster::available())
    GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd, /usr/bin/etcdctl): apt-get install "
                    "etcd-server etcd-client";
  meridian::testing::EtcdCluster etcd(3);
  EXPECT_LT(killed_joiner_stall_s("store: {address: '" + etcd.url("liveness") + "'}\n"),
            dead_after_s_ / 2.0);
  EXPECT_EQ(process_gone_records({1, 2, 3}), 1u)
      << "the coordinator's probe, not the lease, found node 4 gone";
}

// The coordinator SIGKILLed on etcd, with a lease of 30 s: the other nodes probe its process
// (ElasticMesh::probe_coordinator), and the first refusal ends its lease, so one of them takes
// the role and the round that removes it at once. Before, every member waited the whole lease
// for a record only the dead coordinator could write. (On the TCP store the lease ends with the
// coordinator's connection; the embedded store dies with node 1, so only etcd is tried here.)
TEST_F(LivenessTest, ACoordinatorKilledOnEtcdIsReplacedAtOnceNotAfterItsLease) {
  if (!meridian::testing::EtcdCluster::available())
    GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd, /usr/bin/etcdctl): apt-get install "
                    "etcd-server etcd-client";
  meridian::testing::EtcdCluster etcd(3);
  dead_after_s_ = 30;
  write_run(3, kLongRun, "store: {address: '" + etcd.url("liveness") + "'}\n");
  // Node 1 takes the role as it starts (right after node_started), before the others exist.
  const pid_t n1 = start(1, {});
  ASSERT_TRUE(wait_until(
      [&] { return !times_of(node_dir(1) / "events.jsonl", "node_started").empty(); }, 60))
      << log(1);
  const pid_t n2 = start(2, {}), n3 = start(3, {});
  ASSERT_TRUE(wait_until([&] { return checksums(node_dir(2)).size() >= 2; }, 180)) << log(2);
  ::kill(n1, SIGKILL);
  EXPECT_EQ(finish(n1), 128 + SIGKILL);
  const std::size_t killed_at = checksums(node_dir(2)).size();
  const std::size_t end = stop_after(killed_at + 5, {{2, n2}, {3, n3}}, 2);
  expect_agree({3}, 2);
  const double stall = longest_stall_s(times_of(node_dir(2) / "events.jsonl"), 1, end);
  std::cout << "node 1 (the coordinator) killed after outer step " << killed_at
            << "; node 2's longest gap between outer steps 1.." << end << ": " << stall
            << " s (lease 30 s)" << std::endl;
  EXPECT_LT(stall, dead_after_s_ / 2.0);
  EXPECT_EQ(process_gone_records({2, 3}, 1), 1u)
      << "a probe of node 1's process, not its lease, ended it (said once)";
}

TEST_F(LivenessTest, APeerFrozenInTheRingCostsALeaseNotTheAllReduceTimeout) {
  write_run(3, kLongRun);
  const std::string store = start_first();
  const pid_t n1 = pids_.back();
  const pid_t n2 = start(2, {"--store", store});
  // Node 3 stops in its 20th outgoing ring message (outer step 1's all-reduce), its connections
  // open; then the whole process is frozen (SIGSTOP: its heartbeats stop too).
  const pid_t n3 = start(3, {"--store", store, "--fault-pause-at-message", "20", "--fault-marker",
                             (dir_ / "paused").string()});
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "paused"); }, 180)) << log(3);
  ::kill(n3, SIGSTOP);
  const std::size_t frozen_at = checksums(node_dir(1)).size();
  const std::size_t end = stop_after(frozen_at + 10, {{1, n1}, {2, n2}});
  ::kill(n3, SIGKILL);
  EXPECT_EQ(finish(n3), 128 + SIGKILL);

  expect_agree({2});
  const double stall = longest_stall_s(times_of(node_dir(1) / "events.jsonl"), 1, end);
  std::cout << "node 3 frozen in outer step " << frozen_at << "'s all-reduce; longest gap "
            << "between outer steps 1.." << end << ": " << stall << " s (bound "
            << stall_bound_s() << " s; all-reduce timeout 60 s)" << std::endl;
  EXPECT_LT(stall, stall_bound_s());
}

TEST_F(LivenessTest, SilentConnectionsToEveryGlooListeningPortNeverFreezeTheRun) {
  write_run(3, kLongRun);
  const std::string store = start_first();
  ListenerSquatter squatter(std::stoi(store.substr(store.rfind(':') + 1)));
  const pid_t n1 = pids_.back();
  squatter.watch(n1);
  const pid_t n2 = start(2, {"--store", store});
  squatter.watch(n2);
  const pid_t n3 = start(3, {"--store", store});
  squatter.watch(n3);
  // Once the run has formed (through the epochs whose ports the stranger took), node 4 joins
  // by live recovery, at the first boundary after it queued.
  ASSERT_TRUE(wait_until([&] { return !checksums(node_dir(1)).empty(); }, 180)) << log(1);
  const pid_t n4 = start(4, {"--store", store, "--shard", "0"});
  squatter.watch(n4);
  ASSERT_TRUE(wait_until([&] { return !checksums(node_dir(4)).empty(); }, 180)) << log(4);
  const std::size_t joined_at = checksums(node_dir(1)).size();
  const std::size_t end = stop_after(joined_at + 10, {{4, n4}, {1, n1}, {2, n2}, {3, n3}});

  EXPECT_GT(squatter.held(), 0) << "the stranger never got a connection: nothing was tested";
  const auto c1 = checksums(node_dir(1));
  ASSERT_GE(c1.size(), end);
  expect_agree({2, 3, 4});
  // Every attempt, failed or not, ends within the bound: an attempt ends with a retry record
  // (an epoch the stranger broke) or an outer step.
  std::vector<double> ends = times_of(node_dir(1) / "events.jsonl");
  const std::size_t steps_seen = ends.size();
  const std::vector<double> retries = times_of(node_dir(1) / "events.jsonl", "retry");
  ends.insert(ends.end(), retries.begin(), retries.end());
  std::sort(ends.begin(), ends.end());
  const double attempt = longest_stall_s(ends, 1, ends.size());
  const double stall = longest_stall_s(times_of(node_dir(1) / "events.jsonl"), 1, end);
  std::cout << "the stranger held " << squatter.held() << " connections; " << retries.size()
            << " retries in " << steps_seen << " outer steps; node 4 applied its first outer step "
            << "after node 1's " << joined_at << "; longest attempt " << attempt << " s (bound "
            << stall_bound_s() << " s), longest gap between outer steps " << stall << " s"
            << std::endl;
  EXPECT_LT(attempt, stall_bound_s());
  EXPECT_TRUE(read_file(node_dir(1) / "events.jsonl").find("\"type\":\"fallback\"") ==
              std::string::npos);
}

}  // namespace
