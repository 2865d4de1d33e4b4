// `meridian store` and `meridian train` nodes as processes (issue 36, item 6): the standalone
// store compares the hash of the resolved run configuration, the one the nodes send. With --config
// RUN.yaml it admits a node started with RUN.yaml and refuses one whose --set changes the
// configuration; without --config the first node to join fixes the run's hash. The nodes are
// killed once admitted or refused: nothing is trained.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <optional>

#include "tests/gloo/train_processes.h"

namespace meridian {
namespace {

using testing::read_file;
using testing::wait_until;

class StoreConfigTest : public testing::TrainProcessTest {
 protected:
  // Starts `meridian store --port 0 --secret-file secret ARGS...` (stdout in store.out, stderr in
  // store.log); returns its HOST:PORT once it listens ("" and a failure when it does not).
  std::string start_store(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {MERIDIAN_BIN, "store",         "--port",
                                     "0",          "--secret-file", (dir_ / "secret").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = (dir_ / "store.out").string(), err = (dir_ / "store.log").string();
    const pid_t pid = testing::spawn(argv, out, err);
    pids_.push_back(pid);
    const std::string prefix = "store listening on ";
    if (!wait_until([&] { return read_file(out).find('\n') != std::string::npos; }, 60)) {
      ADD_FAILURE() << "the store did not start: " << read_file(err);
      return "";
    }
    const std::string line = read_file(out);
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
    return line.substr(prefix.size(), line.find(' ', prefix.size()) - prefix.size());
  }

  std::string store_log() { return read_file(dir_ / "store.log"); }

  // The exit status of `pid` once it has exited, or nothing after `timeout_s` (it still runs).
  std::optional<int> exit_status(pid_t pid, double timeout_s) {
    int status = 0;
    if (!wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout_s))
      return std::nullopt;
    pids_.erase(std::find(pids_.begin(), pids_.end(), pid));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Node `id` (the run file with `args`) is admitted: the store logs its join.
  void expect_joins(int id, const std::string& store, std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"--store", store});
    start(id, args);
    const std::string joined = "store: joined 'node-" + std::to_string(id) + "'";
    EXPECT_TRUE(wait_until([&] { return store_log().find(joined) != std::string::npos; }, 60))
        << "store:\n"
        << store_log() << "node " << id << ":\n"
        << log(id);
  }

  // Node `id` is refused: it exits with status 2 and an error that contains `reason`.
  void expect_refused(int id, const std::string& store, std::vector<std::string> args,
                      const std::string& reason) {
    args.insert(args.begin(), {"--store", store});
    const pid_t pid = start(id, args);
    EXPECT_EQ(exit_status(pid, 60), std::optional<int>(2)) << "node " << id << ":\n" << log(id);
    EXPECT_NE(log(id).find(reason), std::string::npos) << log(id);
  }
};

TEST_F(StoreConfigTest, WithConfigANodeOfTheSameFileJoinsAndAnOverriddenOneIsRefused) {
  write_run(2, 1);
  const std::string store = start_store({"--config", (dir_ / "run.yaml").string()});
  ASSERT_FALSE(store.empty());
  // The store prints the hash it holds; a node started with the same file sends the same.
  const std::string out = read_file(dir_ / "store.out");
  const std::size_t at = out.find("configuration ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string hash = out.substr(at + 14, 64);
  expect_joins(1, store);
  expect_refused(2, store, {"--set", "train.lr=1e30"},
                 "run configuration differs: the run's configuration hash is " + hash +
                     " (the store's), the node's is ");
}

TEST_F(StoreConfigTest, WithoutConfigTheFirstNodeToJoinFixesTheRunsConfiguration) {
  write_run(2, 1);
  const std::string store = start_store({});
  ASSERT_FALSE(store.empty());
  expect_joins(1, store);
  expect_refused(2, store, {"--set", "train.lr=1e30"},
                 "(from node 'node-1', the first to join), the node's is ");
  expect_joins(3, store);  // the same configuration as node 1
}

TEST_F(StoreConfigTest, ConfigOverridesResolveAsTheNodesDo) {
  write_run(2, 1);
  const std::string store =
      start_store({"--config", (dir_ / "run.yaml").string(), "--set", "train.lr=0.5"});
  ASSERT_FALSE(store.empty());
  expect_joins(1, store, {"--set", "train.lr=0.5"});
  expect_refused(2, store, {}, "run configuration differs");
}

}  // namespace
}  // namespace meridian
