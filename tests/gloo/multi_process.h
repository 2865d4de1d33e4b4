// Test support for label `gloo`: run ranks as forked processes against an in-test TCP store,
// and report each rank's outcome through its exit status. Not a launcher for real runs
// (scripts/ has those).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"

namespace meridian::testing {

inline constexpr char kTestSecret[] = "gloo-test-secret";

// Exit codes of a rank body; anything else is a crash or a signal.
enum RankExit : int {
  kRankOk = 0,
  kRankPeerLost = 10,
  kRankTimeout = 11,
  kRankProtocol = 12,
  kRankOtherError = 13,
  kRankWrongResult = 14,
};

inline std::unique_ptr<TcpStore> store_client(std::uint16_t port, const std::string& id) {
  TcpStoreClientOptions o;
  o.port = port;
  o.client_id = id;
  o.identity = {kTestSecret, "test", ""};
  return std::make_unique<TcpStore>(o);
}

inline std::unique_ptr<TcpStoreServer> start_store(std::uint16_t* port) {
  TcpStoreServerOptions o;
  o.identity = {kTestSecret, "test", ""};
  auto server = std::make_unique<TcpStoreServer>(o);
  *port = server->start();
  return server;
}

// Every rank (and the parent, counted in `parties` if it takes part) sets <name>/<rank> and
// waits for all of them: a store barrier, no polling.
inline void store_barrier(Store& store, const std::string& name, int rank, int parties,
                          double timeout_s) {
  store.set(name + "/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int i = 0; i < parties; ++i) keys.push_back(name + "/" + std::to_string(i));
  store.wait(keys, timeout_s);
}

// A test fixture (over gtest's Base) owning a TCP store server on an ephemeral port.
template <typename Base = ::testing::Test>
class WithStore : public Base {
 protected:
  void SetUp() override { server_ = start_store(&port_); }
  std::uint16_t port_ = 0;
  std::unique_ptr<TcpStoreServer> server_;
};

// Forks one process per rank; each runs body(rank) and exits with its return value (or the
// RankExit of the Meridian error that escaped it). Never returns in the child.
// The ranks start together, once all are forked (a pipe's end of file is the gate): a rank that
// talks to the fixture's store server while the parent forks the next one could make the server
// thread hold a lock (OpenSSL's, for a handshake's nonce and HMAC) at the moment of the fork,
// and the new child, which inherits the lock held, would hang at its own handshake. A full
// suite run saw a rank that never arrived at its epoch's rendezvous (20 s, once).
inline std::vector<pid_t> fork_ranks(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  int gate[2];
  if (::pipe(gate) != 0) throw Error("fork_ranks: pipe failed");
  std::fflush(nullptr);
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(gate[1]);
      char byte;
      while (::read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      ::close(gate[0]);
      int code = kRankOtherError;
      try {
        code = body(rank);
      } catch (const PeerLostError& e) {
        std::fprintf(stderr, "rank %d: PeerLostError: %s\n", rank, e.what());
        code = kRankPeerLost;
      } catch (const TimeoutError& e) {
        std::fprintf(stderr, "rank %d: TimeoutError: %s\n", rank, e.what());
        code = kRankTimeout;
      } catch (const ProtocolError& e) {
        std::fprintf(stderr, "rank %d: ProtocolError: %s\n", rank, e.what());
        code = kRankProtocol;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // every rank reads end of file now: they start together
  return pids;
}

// The exit code of `pid`, or 128 + signal number when a signal ended it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

inline std::vector<int> wait_all(const std::vector<pid_t>& pids) {
  std::vector<int> codes;
  for (const pid_t p : pids) codes.push_back(wait_exit(p));
  return codes;
}

// In a rank body: report a wrong value and make the rank fail.
#define MERIDIAN_RANK_EXPECT(cond)                                                             \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: rank expectation failed: %s\n", __FILE__, __LINE__, #cond); \
      return ::meridian::testing::kRankWrongResult;                                            \
    }                                                                                          \
  } while (0)

}  // namespace meridian::testing
