// GlooTransport conformance between forked processes on loopback: send/recv, fused exchange,
// zero-byte and large messages, concurrent tags, timeouts, an oversize message refused as a
// ProtocolError (Gloo itself would abort the process), abort(), and a SIGKILLed peer surfacing
// as PeerLostError (not a timeout) on the survivors; with several connections per peer, messages
// striped whole and in order, and one connection shut down failing the epoch on every member.
// Ephemeral ports; no sleeps.
#include "engine/backends/gloo/gloo_transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstring>
#include <set>
#include <thread>

#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/util/epoch_keys.h"
#include "tests/gloo/multi_process.h"

namespace meridian {
namespace {

using namespace meridian::testing;
using gloo_transport::GlooTransportFactory;

constexpr double kTimeoutS = 20.0;

EpochSpec spec_for(int rank, int world, std::uint64_t epoch = 1) {
  EpochSpec s;
  s.epoch = epoch;
  s.rank = rank;
  for (int i = 0; i < world; ++i) s.members.push_back(100 + i);
  s.timeout_s = kTimeoutS;
  return s;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span(v));
}
std::span<std::byte> bytes_of(std::vector<float>& v) {
  return std::as_writable_bytes(std::span(v));
}

// Values unique to (rank, element) so a misrouted or shifted message shows.
std::vector<float> pattern(int rank, std::size_t n, int salt = 0) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(rank * 1000003 + salt * 7919 + i % 65536);
  return v;
}

// A rank's store client, factory and epoch-1 transport.
struct RankSetup {
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<GlooTransportFactory> factory;
  std::unique_ptr<Transport> t;
};

RankSetup join_epoch(std::uint16_t port, int rank, int world,
                     gloo_transport::GlooOptions options = {}) {
  RankSetup r;
  r.store = store_client(port, "rank" + std::to_string(rank));
  r.factory = std::make_unique<GlooTransportFactory>(*r.store, options);
  r.t = r.factory->connect(spec_for(rank, world));
  return r;
}

// K connections per peer, messages striped from 1 KiB on (several stripes at small sizes).
gloo_transport::GlooOptions striped(int k) {
  gloo_transport::GlooOptions o;
  o.connections_per_peer = k;
  o.min_stripe_bytes = 1024;
  return o;
}

// This process's connected TCP sockets other than those of the store at `store_port` (its
// client's, and the server's that a forked rank inherits): the Gloo connections.
std::vector<int> gloo_sockets(std::uint16_t store_port) {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (e->d_name[0] == '.' || fd == ::dirfd(dir) || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    sockaddr_in local{}, peer{};
    socklen_t n = sizeof(local), m = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &m) != 0 ||
        local.sin_family != AF_INET)
      continue;  // not connected (a listener), or not TCP over IPv4
    if (ntohs(local.sin_port) == store_port || ntohs(peer.sin_port) == store_port) continue;
    fds.push_back(fd);
  }
  ::closedir(dir);
  return fds;
}

class GlooTransportTest : public WithStore<> {};

TEST_F(GlooTransportTest, SendRecvExchangeAndConcurrentTagsBetweenThreeProcesses) {
  const int world = 3;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, world);
    MERIDIAN_RANK_EXPECT(t->rank() == rank && t->size() == world && t->epoch() == 1);
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;

    // Plain send/recv around the ring; even ranks send first, odd ranks receive first.
    const auto out = pattern(rank, 1000);
    std::vector<float> in(1000, -1.0f);
    const Tag tag = make_tag(TagKind::kTest, 1);
    Received r;
    if (rank % 2 == 0) {
      t->send(next, tag, Payload::of(bytes_of(out)), kTimeoutS);
      r = t->recv(prev, tag, bytes_of(in), kTimeoutS);
    } else {
      r = t->recv(prev, tag, bytes_of(in), kTimeoutS);
      t->send(next, tag, Payload::of(bytes_of(out)), kTimeoutS);
    }
    MERIDIAN_RANK_EXPECT(r.bytes == 4000 && r.wire_bytes == 4000);
    MERIDIAN_RANK_EXPECT(in == pattern(prev, 1000));

    // recv with a buffer larger than the message: only the message's bytes are written.
    std::vector<float> roomy(50, -1.0f);
    const auto ten = pattern(rank, 10);
    if (rank % 2 == 0) {
      t->send(next, make_tag(TagKind::kTest, 2), Payload::of(bytes_of(ten)), kTimeoutS);
      r = t->recv(prev, make_tag(TagKind::kTest, 2), bytes_of(roomy), kTimeoutS);
    } else {
      r = t->recv(prev, make_tag(TagKind::kTest, 2), bytes_of(roomy), kTimeoutS);
      t->send(next, make_tag(TagKind::kTest, 2), Payload::of(bytes_of(ten)), kTimeoutS);
    }
    MERIDIAN_RANK_EXPECT(r.bytes == 40);
    MERIDIAN_RANK_EXPECT(std::vector<float>(roomy.begin(), roomy.begin() + 10) ==
                         pattern(prev, 10));
    MERIDIAN_RANK_EXPECT(roomy[10] == -1.0f);

    // Zero bytes.
    auto ex = t->start_exchange(next, Payload::of({}), prev, {}, make_tag(TagKind::kTest, 3));
    MERIDIAN_RANK_EXPECT(ex->wait(kTimeoutS).bytes == 0);

    // Two exchanges in flight on different tags, waited in the opposite order; 8 MiB each.
    const std::size_t big = std::size_t{2} << 20;
    const auto out_a = pattern(rank, big, 1), out_b = pattern(rank, big, 2);
    std::vector<float> in_a(big), in_b(big);
    auto ex_a = t->start_exchange(next, Payload::of(bytes_of(out_a)), prev, bytes_of(in_a),
                                  make_tag(TagKind::kTest, 4));
    auto ex_b = t->start_exchange(prev, Payload::of(bytes_of(out_b)), next, bytes_of(in_b),
                                  make_tag(TagKind::kTest, 5));
    MERIDIAN_RANK_EXPECT(ex_b->wait(kTimeoutS).bytes == big * 4);
    MERIDIAN_RANK_EXPECT(ex_a->wait(kTimeoutS).bytes == big * 4);
    MERIDIAN_RANK_EXPECT(in_a == pattern(prev, big, 1));
    MERIDIAN_RANK_EXPECT(in_b == pattern(next, big, 2));

    // Concurrent callers on different (peer, tag) streams.
    std::vector<float> from_prev(100), from_next(100);
    std::thread th(
        [&] { t->send(next, make_tag(TagKind::kTest, 6), Payload::of(bytes_of(out)), kTimeoutS); });
    std::thread th2(
        [&] { t->recv(next, make_tag(TagKind::kTest, 7), bytes_of(from_next), kTimeoutS); });
    const auto hundred = pattern(rank, 100);
    t->send(prev, make_tag(TagKind::kTest, 7), Payload::of(bytes_of(hundred)), kTimeoutS);
    std::vector<float> ring_in(1000);
    t->recv(prev, make_tag(TagKind::kTest, 6), bytes_of(ring_in), kTimeoutS);
    th.join();
    th2.join();
    MERIDIAN_RANK_EXPECT(ring_in == pattern(prev, 1000));
    MERIDIAN_RANK_EXPECT(from_next == pattern(next, 100));

    // A barrier before leaving, so nobody's exit looks like a lost peer to a slower rank.
    store_barrier(*store, "done", rank, world, kTimeoutS);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(world, kRankOk));
}

// Exchanges on one (peer, tag) stream keep their order even when several are in flight and the
// later one is waited for first (Gloo matches receives of one slot in the order they are posted;
// exchanges of equal size share the slot).
TEST_F(GlooTransportTest, ExchangesOfOneTagInFlightTogetherStayInOrder) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, 2);
    const int peer = 1 - rank;
    const Tag tag = make_tag(TagKind::kTest, 9);
    for (int round = 0; round < 3; ++round) {
      const auto small = pattern(rank, 10, round), big = pattern(rank, 5000, round + 10);
      std::vector<float> got_small(10), got_big(5000);
      auto first = t->start_exchange(peer, Payload::of(bytes_of(small)), peer,
                                     bytes_of(got_small), tag);
      auto second =
          t->start_exchange(peer, Payload::of(bytes_of(big)), peer, bytes_of(got_big), tag);
      MERIDIAN_RANK_EXPECT(second->wait(kTimeoutS).bytes == big.size() * sizeof(float));
      MERIDIAN_RANK_EXPECT(first->wait(kTimeoutS).bytes == small.size() * sizeof(float));
      MERIDIAN_RANK_EXPECT(got_small == pattern(peer, 10, round));
      MERIDIAN_RANK_EXPECT(got_big == pattern(peer, 5000, round + 10));
      // Equal sizes: the same Gloo slot, matched in posting order.
      const auto a = pattern(rank, 3000, round + 20), b = pattern(rank, 3000, round + 30);
      std::vector<float> got_a(3000), got_b(3000);
      auto ea = t->start_exchange(peer, Payload::of(bytes_of(a)), peer, bytes_of(got_a), tag);
      auto eb = t->start_exchange(peer, Payload::of(bytes_of(b)), peer, bytes_of(got_b), tag);
      MERIDIAN_RANK_EXPECT(eb->wait(kTimeoutS).bytes == b.size() * sizeof(float));
      MERIDIAN_RANK_EXPECT(ea->wait(kTimeoutS).bytes == a.size() * sizeof(float));
      MERIDIAN_RANK_EXPECT(got_a == pattern(peer, 3000, round + 20));
      MERIDIAN_RANK_EXPECT(got_b == pattern(peer, 3000, round + 30));
    }
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankOk}));
}

// An exchange whose message is larger than the receiver's buffer (a bug or a lying peer) never
// reaches Gloo (which would abort the process): it matches no posted receive, and both sides
// fail with TimeoutError at their deadline; nothing is written into the receiver's buffer.
TEST_F(GlooTransportTest, AnExchangeOfTheWrongSizeTimesOutOnBothSidesAndNobodyCrashes) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, 2);
    const int peer = 1 - rank;
    const auto out = pattern(rank, rank == 1 ? 256 : 128);  // rank 1 sends twice what 0 expects
    std::vector<float> in(128, -1.0f);
    bool timed_out = false, lost = false;
    try {
      auto ex = t->start_exchange(peer, Payload::of(bytes_of(out)), peer, bytes_of(in),
                                  make_tag(TagKind::kTest, 1));
      ex->wait(1.0);
    } catch (const TimeoutError&) {
      timed_out = true;
    } catch (const PeerLostError&) {
      lost = true;  // the other side timed out first and aborted the epoch
    }
    store->set("timed-out/" + std::to_string(rank), timed_out ? "1" : "0");
    store_barrier(*store, "done", rank, 2, kTimeoutS);
    MERIDIAN_RANK_EXPECT(timed_out || lost);
    // At least one side ran into its deadline (nobody learns of the mismatch any other way).
    MERIDIAN_RANK_EXPECT(store->get("timed-out/0", kTimeoutS) == "1" ||
                         store->get("timed-out/1", kTimeoutS) == "1");
    // Rank 0's buffer never saw the oversize message (rank 1 got rank 0's right-sized one).
    if (rank == 0) MERIDIAN_RANK_EXPECT(in == std::vector<float>(128, -1.0f));
    if (rank == 1) MERIDIAN_RANK_EXPECT(in == pattern(0, 128) || lost);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankOk}));
}

TEST_F(GlooTransportTest, ARecvWithNoSenderTimesOut) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, 2);
    if (rank == 0) {
      std::vector<float> in(10);
      try {
        t->recv(1, make_tag(TagKind::kTest, 1), bytes_of(in), 0.2);
      } catch (const TimeoutError&) {
        store->set("rank0-timed-out", "1");
        return kRankOk;
      }
      return kRankWrongResult;
    }
    store->get("rank0-timed-out", kTimeoutS);  // stay alive (and silent) until then
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankOk}));
}

TEST_F(GlooTransportTest, AnOversizeMessageIsAProtocolErrorAndNobodyCrashes) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, 2);
    if (rank == 0) {
      std::vector<float> small(128);
      t->recv(1, make_tag(TagKind::kTest, 1), bytes_of(small), kTimeoutS);
      return kRankWrongResult;  // must have thrown
    }
    const auto big = pattern(1, 256);
    t->send(0, make_tag(TagKind::kTest, 1), Payload::of(bytes_of(big)), kTimeoutS);
    return kRankWrongResult;  // the sender learns of the receiver's smaller buffer too
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankProtocol, kRankProtocol}));
}

TEST_F(GlooTransportTest, AbortFailsThePeersPendingOperationsWithPeerLost) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, 2);
    if (rank == 0) {
      store->get("rank1-posted", kTimeoutS);
      t->abort();
      t->abort();  // idempotent
      std::vector<float> in(1);
      try {
        t->recv(1, make_tag(TagKind::kTest, 2), bytes_of(in), kTimeoutS);
      } catch (const PeerLostError&) {
        return kRankOk;  // an aborted transport refuses further work
      }
      return kRankWrongResult;
    }
    std::vector<float> in(10);
    store->set("rank1-posted", "1");
    t->recv(0, make_tag(TagKind::kTest, 1), bytes_of(in), kTimeoutS);
    return kRankWrongResult;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankPeerLost}));
}

TEST_F(GlooTransportTest, ASigkilledPeerIsAPeerLostErrorOnTheSurvivors) {
  const int world = 3;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, world);
    if (rank == 2) {
      store->set("victim-connected", "1");
      store->get("never", 1e6);  // parked until killed
      return kRankWrongResult;
    }
    // Survivors: one waits in a fused exchange with the victim, one in a plain receive.
    std::vector<float> in(1000);
    const auto out = pattern(rank, 1000);
    store->set("posted/" + std::to_string(rank), "1");
    if (rank == 0) {
      t->start_exchange(2, Payload::of(bytes_of(out)), 2, bytes_of(in), make_tag(TagKind::kTest, 1))
          ->wait(kTimeoutS);
    } else {
      t->recv(2, make_tag(TagKind::kTest, 1), bytes_of(in), kTimeoutS);
    }
    return kRankWrongResult;
  });
  auto store = store_client(port_, "parent");
  store->get("victim-connected", kTimeoutS);
  store->wait({"posted/0", "posted/1"}, kTimeoutS);
  ::kill(pids[2], SIGKILL);
  const auto codes = wait_all(pids);
  EXPECT_EQ(codes[0], kRankPeerLost);
  EXPECT_EQ(codes[1], kRankPeerLost);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

// K connections per peer: each pair of ranks holds K sockets, and messages of every size (none,
// under one stripe, a few stripes, more than K) arrive whole; two in flight with one tag and
// size (the same slot, so the same connection for each stripe) arrive in posting order.
TEST_F(GlooTransportTest, ExchangesStripedOverFourConnectionsArriveWholeAndInOrder) {
  const int world = 3, k = 4;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, world, striped(k));
    MERIDIAN_RANK_EXPECT(gloo_sockets(port_).size() == static_cast<std::size_t>(k * (world - 1)));
    const int to = (rank + 1) % world, from = (rank + world - 1) % world;
    const Tag tag = make_tag(TagKind::kTest, 5);
    int salt = 0;
    for (const std::size_t n : {0, 10, 300, 1000, 5000, 100003}) {
      const auto a = pattern(rank, n, ++salt), b = pattern(rank, n, ++salt);
      std::vector<float> got_a(n), got_b(n);
      auto ea = t->start_exchange(to, Payload::of(bytes_of(a)), from, bytes_of(got_a), tag);
      auto eb = t->start_exchange(to, Payload::of(bytes_of(b)), from, bytes_of(got_b), tag);
      MERIDIAN_RANK_EXPECT(eb->wait(kTimeoutS).bytes == n * sizeof(float));
      MERIDIAN_RANK_EXPECT(ea->wait(kTimeoutS).bytes == n * sizeof(float));
      MERIDIAN_RANK_EXPECT(got_a == pattern(from, n, salt - 1));
      MERIDIAN_RANK_EXPECT(got_b == pattern(from, n, salt));
    }
    // send/recv (the credit protocol, on the first connection) still work beside them.
    const auto out = pattern(rank, 777);
    std::vector<float> in(1000);
    std::thread sender(
        [&] { t->send(to, make_tag(TagKind::kTest, 6), Payload::of(bytes_of(out)), kTimeoutS); });
    const Received r = t->recv(from, make_tag(TagKind::kTest, 6), bytes_of(in), kTimeoutS);
    sender.join();
    MERIDIAN_RANK_EXPECT(r.bytes == 777 * sizeof(float));
    MERIDIAN_RANK_EXPECT(std::vector<float>(in.begin(), in.begin() + 777) == pattern(from, 777));
    store_barrier(*store, "done", rank, world, kTimeoutS);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(world, kRankOk));
}

// A lost connection is a lost peer: rank 1 shuts down one of its eight connections (four per
// peer), then all three ranks run ring exchanges whose 64 kB messages are striped over every
// connection. The stripe on the dead connection fails at one end or the other, that rank aborts
// its epoch (closing every connection of it), and every member fails with PeerLostError, at the
// latest at its next exchange, long before the 20 s deadline.
TEST_F(GlooTransportTest, OneOfAPeersFourConnectionsShutDownIsPeerLostOnEveryMember) {
  const int world = 3, k = 4;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto [store, factory, t] = join_epoch(port_, rank, world, striped(k));
    store_barrier(*store, "connected", rank, world, kTimeoutS);
    if (rank == 1) {
      const std::vector<int> fds = gloo_sockets(port_);
      MERIDIAN_RANK_EXPECT(fds.size() == static_cast<std::size_t>(k * (world - 1)));
      MERIDIAN_RANK_EXPECT(::shutdown(fds.back(), SHUT_RDWR) == 0);
    }
    const int to = (rank + 1) % world, from = (rank + world - 1) % world;
    const auto out = pattern(rank, 16000);
    std::vector<float> in(16000);
    for (int round = 0; round < 3; ++round) {
      try {
        t->start_exchange(to, Payload::of(bytes_of(out)), from, bytes_of(in),
                          make_tag(TagKind::kTest, round))
            ->wait(kTimeoutS);
      } catch (const PeerLostError&) {
        return kRankPeerLost;
      }
    }
    return kRankWrongResult;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(world, kRankPeerLost));
}

// The K meshes connect on threads of their own: a peer that passes the arrival barrier and
// connects its first mesh, then goes silent (here: it opens one connection per peer, not three),
// leaves the other meshes waiting for it. They end at the epoch's connect bound (TimeoutError),
// all three threads are joined, and the epoch fails instead of hanging.
TEST_F(GlooTransportTest, APeerSilentAfterTheFirstOfThreeMeshesFailsTheEpochAtItsConnectBound) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    gloo_transport::GlooOptions o;
    o.connections_per_peer = rank == 0 ? 3 : 1;
    GlooTransportFactory factory(*store, o);
    auto spec = spec_for(rank, 2);
    spec.connect_timeout_s = 1;
    if (rank == 1) {
      auto t = factory.connect(spec);  // mesh 0 only
      store->get("rank0-done", kTimeoutS);
      return kRankOk;
    }
    RankExit code = kRankWrongResult;
    try {
      factory.connect(spec);
    } catch (const TimeoutError&) {
      code = kRankTimeout;
    } catch (const PeerLostError&) {
      code = kRankPeerLost;
    }
    store->set("rank0-done", "1");
    return code;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankTimeout, kRankOk}));
}

TEST_F(GlooTransportTest, AnEpochWhoseMembersNeverArriveTimesOut) {
  auto store = store_client(port_, "alone");
  GlooTransportFactory factory(*store);
  auto spec = spec_for(0, 2);
  spec.timeout_s = 0.2;
  EXPECT_THROW(factory.connect(spec), TimeoutError);
}

TEST_F(GlooTransportTest, AMemberThatCannotProveTheRunsSecretFailsTheEpochOnBothSides) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    // One connection per peer (epoch 1), then three (epoch 2: every mesh proves the secret).
    for (const int k : {1, 3}) {
      gloo_transport::GlooOptions o;
      o.secret = rank == 0 ? "the-run-secret" : "a-guess";
      o.connections_per_peer = k;
      GlooTransportFactory factory(*store, o);
      auto spec = spec_for(rank, 2, k == 1 ? 1 : 2);
      spec.connect_timeout_s = 5;
      try {
        factory.connect(spec);
        return kRankWrongResult;
      } catch (const PeerLostError& e) {
        // Each names the other as the one that failed the proof.
        const std::string other = "rank " + std::to_string(1 - rank);
        if (std::string(e.what()).find(other + " (node " + std::to_string(101 - rank) +
                                       ") sent a wrong proof") == std::string::npos)
          return kRankWrongResult;
      }
    }
    return kRankPeerLost;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankPeerLost, kRankPeerLost}));
}

TEST_F(GlooTransportTest, MembersHoldingTheSecretConnectAndTalk) {
  const auto pids = fork_ranks(2, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    gloo_transport::GlooOptions o;
    o.secret = "the-run-secret";
    GlooTransportFactory factory(*store, o);
    auto spec = spec_for(rank, 2);
    spec.connect_timeout_s = 5;
    auto t = factory.connect(spec);
    const auto out = pattern(rank, 100);
    std::vector<float> in(100);
    t->start_exchange(1 - rank, Payload::of(bytes_of(out)), 1 - rank, bytes_of(in),
                      make_tag(TagKind::kTest, 1))
        ->wait(kTimeoutS);
    return in == pattern(1 - rank, 100) ? kRankOk : kRankWrongResult;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankOk}));
}

TEST_F(GlooTransportTest, AWaitForAMemberThatCannotComeIsAbandonedAtOnce) {
  auto store = store_client(port_, "alone");
  GlooTransportFactory factory(*store);
  auto spec = spec_for(0, 2);
  spec.timeout_s = 600;  // far beyond the test's own timeout: only the abandon rule ends it
  spec.poll_s = 0.05;
  int asked = 0;
  spec.abandon = [&asked] { return ++asked < 3 ? std::string() : std::string("node 101 died"); };
  try {
    factory.connect(spec);
    ADD_FAILURE() << "connect returned";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("node 101 died"), std::string::npos) << e.what();
  }
  EXPECT_EQ(asked, 3);
}

// A member that arrives, publishes its addresses and dies before its pairs connect: Gloo's wait
// for that pair cannot be interrupted, and the survivor waited for the whole connect bound
// ("Connect timeout" at its bound; twice the lease in real runs: the churn soak's 8 s stalls). The
// connect asks the mesh (spec.abandon) while it waits and fails the epoch as soon as the mesh
// says the member is gone, with a secret as without.
TEST_F(GlooTransportTest, AMemberThatDiesAfterPublishingItsAddressesIsGivenUpOnAtOnce) {
  // The dying rank's store dies with it right after it publishes its pairs' addresses.
  class DiesAfterPublishing final : public ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    void set(const std::string& key, const std::string& value) override {
      ForwardingStore::set(key, value);
      // Gloo's rendezvous writes `rank_<r>`, then the addresses of rank r's pairs under `<r>`.
      const std::string leaf = key.substr(key.rfind('/') + 1);
      if (leaf.empty() || leaf.find_first_not_of("0123456789") != std::string::npos) return;
      ForwardingStore::set("dying-rank-died", "1");
      ::raise(SIGKILL);
    }
  };
  // Either side of the pair: Gloo's lower rank listens, its higher rank connects.
  gloo_transport::GlooOptions with_secret;
  with_secret.secret = "the-run-secret";
  for (const int dying : {0, 1}) {
    SCOPED_TRACE("dying rank " + std::to_string(dying));
    const auto pids = fork_ranks(2, [&](int rank) {
      auto store = store_client(port_, "rank" + std::to_string(rank));
      auto spec = spec_for(rank, 2, 1 + dying);
      spec.timeout_s = 20;
      spec.connect_timeout_s = 20;  // far beyond the bound below: only the abandon rule ends it
      spec.poll_s = 0.05;
      if (rank == dying) {
        DiesAfterPublishing store_dying_with_it(*store);
        GlooTransportFactory factory(store_dying_with_it, with_secret);
        factory.connect(spec);
        return kRankWrongResult;  // not reached
      }
      spec.abandon = [&] {
        return store->try_get("dying-rank-died") ? std::string("the other rank died")
                                                 : std::string();
      };
      GlooTransportFactory factory(*store, with_secret);
      const auto start = std::chrono::steady_clock::now();
      try {
        factory.connect(spec);
        return kRankWrongResult;
      } catch (const PeerLostError& e) {
        const double waited_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "rank %d: gave up after %.2f s: %s\n", rank, waited_s, e.what());
        // The factory's destructor then waits for Gloo's own connect bound (20 s).
        return waited_s < 5 ? kRankPeerLost : kRankTimeout;
      }
    });
    std::vector<int> expected = {kRankPeerLost, kRankPeerLost};
    expected[dying] = 128 + SIGKILL;
    EXPECT_EQ(wait_all(pids), expected);
    store_client(port_, "cleanup")->erase("dying-rank-died");
  }
}

TEST_F(GlooTransportTest, AWorldOfOneNeedsNoPeers) {
  auto store = store_client(port_, "solo");
  GlooTransportFactory factory(*store);
  auto t = factory.connect(spec_for(0, 1));
  EXPECT_EQ(t->size(), 1);
  std::vector<float> in(1);
  EXPECT_THROW(t->recv(0, make_tag(TagKind::kTest, 1), bytes_of(in), 1.0), ConfigError);
}

// The store holds the rendezvous of the current epochs only: an epoch's keys are erased when a
// later epoch connects (engine/core/transport.h, epoch_superseded), for rings over 30 epochs and
// for recoveries over 10 rounds. Before that rule every epoch left its keys behind for good. Two
// ranks as threads of this process, on one in-memory store.
TEST(GlooStoreKeys, OnlyTheCurrentEpochsRendezvousStaysInTheStore) {
  ThreadRuntime runtime;
  MemoryStore store(runtime);
  GlooTransportFactory f0(store), f1(store);
  const auto connect_both = [&](EpochSpec s0, EpochSpec s1) {
    std::unique_ptr<Transport> t0;
    std::thread th([&] { t0 = f0.connect(s0); });
    auto t1 = f1.connect(s1);
    th.join();
    ASSERT_TRUE(t0 && t1);
  };
  const auto epochs_in_store = [&] {
    std::set<std::uint64_t> out;
    for (const std::string& k : store.list("gloo/")) out.insert(parse_epoch_store_key(k)->epoch);
    return out;
  };
  for (std::uint64_t e = 1; e <= 30; ++e) {
    connect_both(spec_for(0, 2, e), spec_for(1, 2, e));
    EXPECT_EQ(epochs_in_store(), std::set<std::uint64_t>{e}) << "after epoch " << e;
  }
  std::size_t ring_keys = store.list("gloo/").size();
  EXPECT_GT(ring_keys, 0u);
  for (std::uint64_t round = 1; round <= 10; ++round) {
    EpochSpec s0 = spec_for(0, 2, recovery_epoch_id(round, 0, 0)), s1 = s0;
    s1.rank = 1;
    connect_both(s0, s1);
    std::set<std::uint64_t> expected = {30};  // rings and recoveries never supersede each other
    for (std::uint64_t r = 1; r <= round; ++r)
      if (r + 3 > round) expected.insert(recovery_epoch_id(r, 0, 0));
    EXPECT_EQ(epochs_in_store(), expected) << "after the recovery of round " << round;
  }
}

}  // namespace
}  // namespace meridian
