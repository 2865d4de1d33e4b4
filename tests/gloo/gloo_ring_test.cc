// Meridian's ring all-reduce over the Gloo transport between forked processes on loopback:
// exact fp32 sums (integer-valued, distinct per rank and element) for 2-4 ranks and awkward
// sizes, over one connection per peer and striped over several, bit-identical int8 results on
// every rank and between one connection and three, and a SIGKILLed rank during an all-reduce
// surfacing as PeerLostError on every survivor with its input left untouched.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstring>

#include "engine/backends/gloo/gloo_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/codec/fp32_codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/util/crc32c.h"
#include "tests/gloo/multi_process.h"

namespace meridian {
namespace {

using namespace meridian::testing;
using gloo_transport::GlooTransportFactory;

constexpr double kTimeoutS = 20.0;

EpochSpec spec_for(int rank, int world) {
  EpochSpec s;
  s.epoch = 7;
  s.rank = rank;
  for (int i = 0; i < world; ++i) s.members.push_back(i);
  s.timeout_s = kTimeoutS;
  return s;
}

// Integer values < 2^20 so every partial sum of up to 4 ranks is exact in fp32.
float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 100000 + i % 99991); }

struct RingCase {
  int world;
  std::size_t count;
  // 256 KiB: several pieces per share; 4 MiB: pieces of 2 MiB and more, which travel as split
  // messages (header, then the payload straight from the buffer).
  std::size_t max_chunk_bytes = 256 * 1024;
  int connections = 1;  // GlooOptions::connections_per_peer: messages striped over K connections
};

class GlooRingTest : public WithStore<::testing::TestWithParam<RingCase>> {};

TEST_P(GlooRingTest, Fp32SumsAreExactOnEveryRank) {
  const auto [world, count, max_chunk, connections] = GetParam();
  const auto pids = fork_ranks(
      world, [&, world = world, count = count, c = max_chunk, k = connections](int rank) {
        auto store = store_client(port_, "rank" + std::to_string(rank));
        gloo_transport::GlooOptions go;
        go.connections_per_peer = k;
        GlooTransportFactory factory(*store, go);
        auto t = factory.connect(spec_for(rank, world));
        ThreadRuntime runtime;
        std::vector<float> buf(count);
        for (std::size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
        RingOptions o;
        o.timeout_s = kTimeoutS;
        o.max_chunk_bytes = c;
        const RingStats stats = ring_all_reduce(*t, runtime, Fp32Codec(), ReduceBuffer::of(buf), o);
        MERIDIAN_RANK_EXPECT(stats.participants == world);
        for (std::size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < world; ++r) expected += value(r, i);
          MERIDIAN_RANK_EXPECT(buf[i] == expected);
        }
        store_barrier(*store, "done", rank, world, kTimeoutS);
        return kRankOk;
      });
  EXPECT_EQ(wait_all(pids), std::vector<int>(world, kRankOk));
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, GlooRingTest,
                         ::testing::Values(RingCase{2, 1000003}, RingCase{3, 1000003},
                                           RingCase{4, 1 << 20}, RingCase{4, 3}, RingCase{3, 0},
                                           RingCase{3, 3000017, 4 << 20},
                                           // Striped: 256 KiB pieces in four 64 KiB stripes; a
                                           // 4 MiB piece's payload in eight; three values on one.
                                           RingCase{4, 1 << 20, 256 * 1024, 4},
                                           RingCase{3, 3000017, 4 << 20, 8},
                                           RingCase{4, 3, 256 * 1024, 4}));

class GlooRingFaultTest : public WithStore<> {};

TEST_F(GlooRingFaultTest, Int8ResultsAreBitIdenticalOnEveryRankAndOverOneOrThreeConnections) {
  const int world = 4;
  const std::size_t count = 300001;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    // One all-reduce over one connection per peer, then the same one striped over three.
    std::vector<float> result[2];
    for (const int k : {1, 3}) {
      gloo_transport::GlooOptions go;
      go.connections_per_peer = k;
      go.store_prefix = "gloo-k" + std::to_string(k);
      go.min_stripe_bytes = 4096;  // a share's 75 kB message in three stripes
      GlooTransportFactory factory(*store, go);
      auto t = factory.connect(spec_for(rank, world));
      ThreadRuntime runtime;
      std::vector<float>& buf = result[k == 1 ? 0 : 1];
      buf.resize(count);
      for (std::size_t i = 0; i < count; ++i) buf[i] = std::sin(0.001f * i + rank);
      RingOptions o;
      o.timeout_s = kTimeoutS;
      o.measure_error = true;
      const RingStats stats =
          ring_all_reduce(*t, runtime, *make_codec(CodecId::kInt8Prime), ReduceBuffer::of(buf), o);
      MERIDIAN_RANK_EXPECT(stats.relative_error > 0 && stats.relative_error < 0.05);
    }
    MERIDIAN_RANK_EXPECT(std::memcmp(result[0].data(), result[1].data(), count * sizeof(float)) ==
                         0);
    const auto crc = crc32c(std::as_bytes(std::span(result[1])));
    store->set("crc/" + std::to_string(rank), std::to_string(crc));
    for (int r = 0; r < world; ++r) {
      MERIDIAN_RANK_EXPECT(store->get("crc/" + std::to_string(r), kTimeoutS) ==
                           std::to_string(crc));
    }
    store_barrier(*store, "done", rank, world, kTimeoutS);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(world, kRankOk));
}

TEST_F(GlooRingFaultTest, ASigkilledRankDuringAnAllReduceIsPeerLostOnEverySurvivor) {
  const int world = 4, victim = 2;
  const std::size_t count = 1 << 18;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    GlooTransportFactory factory(*store);
    auto t = factory.connect(spec_for(rank, world));
    if (rank == victim) {
      store->set("victim-connected", "1");
      store->get("never", 1e6);  // parked until killed: its share never arrives
      return kRankWrongResult;
    }
    ThreadRuntime runtime;
    std::vector<float> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
    const std::vector<float> input = buf;
    RingOptions o;
    o.timeout_s = kTimeoutS;
    store->set("entering/" + std::to_string(rank), "1");
    try {
      ring_all_reduce(*t, runtime, Fp32Codec(), ReduceBuffer::of(buf), o);
    } catch (const PeerLostError& e) {
      std::fprintf(stderr, "rank %d: PeerLostError: %s\n", rank, e.what());
      MERIDIAN_RANK_EXPECT(buf == input);  // a failed round leaves the input untouched
      return kRankPeerLost;
    }
    return kRankWrongResult;
  });
  auto store = store_client(port_, "parent");
  store->wait({"victim-connected", "entering/0", "entering/1", "entering/3"}, kTimeoutS);
  ::kill(pids[victim], SIGKILL);
  const auto codes = wait_all(pids);
  EXPECT_EQ(codes, (std::vector<int>{kRankPeerLost, kRankPeerLost, 128 + SIGKILL, kRankPeerLost}));
}

}  // namespace
}  // namespace meridian
