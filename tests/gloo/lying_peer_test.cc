// A participant that lies during training, over real processes: DiLoCo nodes (DilocoNode over
// the Gloo transport and the TCP store, one forked process each) where one node's ring chunks
// claim a huge element count or carry a bad checksum (engine/backends/faults flips the bytes
// after sealing) and where that node also sends the store an oversized frame from a joined
// connection. The honest receivers reject the chunks with ProtocolError naming the sender, the
// mesh evicts the liar and retries the round without it, the store cuts off the connection, and
// the honest nodes finish every outer step with identical parameters; no process crashes or
// grows.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backends/event_sinks/sinks.h"
#include "engine/backends/faults/faulty_transport.h"
#include "engine/backends/gloo/gloo_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/codec/fp32_codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/diloco/diloco.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/wire/chunk.h"
#include "tests/gloo/multi_process.h"
#include "tests/gloo/raw_store_client.h"

namespace meridian {
namespace {

using namespace meridian::testing;
using gloo_transport::GlooTransportFactory;

constexpr double kTimeoutS = 20.0;
// Byte 39 is the top byte of the chunk header's element count (offset 32, 8 bytes LE): flipped,
// the chunk claims about 2^64 - 2^56 elements.
constexpr std::size_t kCountTopByte = 39;
// A byte of the payload: the header is intact and the CRC-32C no longer matches.
constexpr std::size_t kPayloadByte = kChunkHeaderBytes + 5;
// No process of these tests gets near this (the model is 16 KiB); an allocation sized by a
// lying count would.
constexpr long kMaxRssKib = 512 * 1024;

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The ring over Gloo with one rank's first message corrupted: its receiver raises
// ProtocolError, every other rank PeerLostError (the receiver aborts the epoch), inputs intact.
class LyingPeerRingTest : public WithStore<::testing::TestWithParam<std::size_t>> {};

TEST_P(LyingPeerRingTest, ACorruptChunkIsAProtocolErrorAtItsReceiverOnly) {
  const int world = 3, liar = 1;
  const std::size_t count = 3000;
  const auto pids = fork_ranks(world, [&](int rank) {
    auto store = store_client(port_, "rank" + std::to_string(rank));
    GlooTransportFactory factory(*store);
    EpochSpec spec;
    spec.epoch = 3;
    spec.rank = rank;
    spec.members = {0, 1, 2};
    spec.timeout_s = kTimeoutS;
    auto gloo = factory.connect(spec);
    ThreadRuntime runtime;
    FaultOptions lie;
    if (rank == liar) {
      lie.flip_byte_at_message = 1;
      lie.flip_byte_offset = GetParam();
    }
    FaultyTransport t(*gloo, runtime, lie);
    std::vector<float> buf(count, static_cast<float>(rank + 1));
    const std::vector<float> input = buf;
    RingOptions o;
    o.timeout_s = kTimeoutS;
    o.max_chunk_bytes = 1024;
    try {
      ring_all_reduce(t, runtime, Fp32Codec(), ReduceBuffer::of(buf), o);
    } catch (const Error&) {
      MERIDIAN_RANK_EXPECT(buf == input);
      MERIDIAN_RANK_EXPECT(max_rss_kib() < kMaxRssKib);
      throw;
    }
    return kRankWrongResult;  // must have failed
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankPeerLost, kRankPeerLost, kRankProtocol}));
}

INSTANTIATE_TEST_SUITE_P(HugeCountOrBadChecksum, LyingPeerRingTest,
                         ::testing::Values(kCountTopByte, kPayloadByte));

// Parameters start at p[i] = i / 64; inner step k of node `id` subtracts ((id + k + i) % 7)/64:
// exact in fp32, different per node, so a lost or doubled contribution shows in the sum.
class TinyWorker final : public InnerWorker {
 public:
  TinyWorker(std::int64_t id, std::size_t count) : id_(id), params_(count) {
    for (std::size_t i = 0; i < count; ++i) params_[i] = static_cast<float>(i) / 64.0f;
  }
  InnerStepsResult run_inner_steps(int steps) override {
    for (int s = 0; s < steps; ++s) {
      ++step_;
      for (std::size_t i = 0; i < params_.size(); ++i)
        params_[i] -= static_cast<float>((id_ + step_ + static_cast<std::int64_t>(i)) % 7) / 64.0f;
    }
    return {steps, 10 * steps, static_cast<double>(step_), 0.0};
  }
  std::uint64_t parameter_count() const override { return params_.size(); }
  std::span<float> parameters() override { return params_; }
  std::vector<std::uint64_t> bucket_boundaries() const override { return {0, params_.size()}; }
  std::vector<StateSection> state_sections() override { return {}; }
  std::string progress() const override { return "step=" + std::to_string(step_); }
  void restore_progress(const std::string&) override {}

 private:
  std::int64_t id_;
  std::int64_t step_ = 0;
  std::vector<float> params_;
};

constexpr int kNodes = 3, kLiar = 2;  // node ids 1..3; the liar is node id 3

// What a node of a lying-peer run reports back (from its own process).
struct NodeOutcome {
  NodeResult result;
  std::vector<Event> events;
  std::uint32_t crc = 0;  // of its outer parameters after the last outer step
};

class LyingPeerTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreServerOptions o;
    o.identity = {kTestSecret, "test", ""};
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.push_back(line);
    };
    server_ = std::make_unique<TcpStoreServer>(o);
    port_ = server_->start();
  }

  // One DiLoCo node (in a forked process) over Gloo; the liar corrupts its first ring message
  // of each of its first `lying_epochs` epochs (a huge element count, then bad checksums) and,
  // with `store_lie`, sends the store an oversized frame before it starts.
  // With `nan`, the liar's chunks are instead valid (good checksums) and carry NaN: a node that
  // skipped its own non-finite guard.
  NodeOutcome run_node(int rank, int lying_epochs, bool store_lie, std::int64_t outer_steps,
                       bool nan = false) {
    const std::int64_t id = rank + 1;
    auto store = store_client(port_, "node" + std::to_string(id));
    GlooTransportFactory gloo(*store);
    ThreadRuntime runtime;
    std::atomic<int> epochs{0};
    FaultyTransportFactory transports(gloo, runtime, [&](const EpochSpec&) {
      FaultOptions lie;
      const int n = ++epochs;
      if (rank == kLiar && n <= lying_epochs && nan) {
        lie.nan_from_message = 1;
      } else if (rank == kLiar && n <= lying_epochs) {
        lie.flip_byte_at_message = 1;
        lie.flip_byte_offset = n == 1 ? kCountTopByte : kPayloadByte;
      }
      return lie;
    });
    TinyWorker worker(id, 4096);
    MemoryEventSink events;
    DilocoOptions o;
    o.inner_steps = 2;
    o.outer_steps = outer_steps;
    o.allreduce_timeout_s = kTimeoutS;
    o.max_chunk_bytes = 2048;
    o.mesh.initial_world = kNodes;
    o.mesh.outer_steps = outer_steps;
    o.mesh.heartbeat_interval_s = 0.1;
    o.mesh.dead_after_s = 10.0;  // nobody dies here: a lie is not a death
    o.mesh.round_timeout_s = 60.0;
    o.mesh.admission_timeout_s = 60.0;
    if (store_lie && rank == kLiar) {
      // An oversized frame from a joined store connection, while the others start the run.
      const int fd = raw_store_join(port_, kTestSecret, "test", "");
      const timeval bound{10, 0};  // a server that failed to cut it off shows in the parent
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
      const char huge[4] = {'\x7f', '\xff', '\xff', '\xff'};  // 2 GiB announced
      if (::send(fd, huge, sizeof(huge), MSG_NOSIGNAL) != 4 || !closed_by_server(fd)) {
        std::fprintf(stderr, "the store did not cut off the oversized frame\n");
      }
      ::close(fd);
    }
    NodeOutcome out;
    o.on_outer_step = [&](const OuterStepView& v) {
      out.crc = crc32c(std::as_bytes(v.outer_parameters));
    };
    DilocoNode node(worker, *store, transports, runtime, events, o);
    out.result = node.run(true, id);
    out.events = events.events();
    store->set("crc/" + std::to_string(id), std::to_string(out.crc));
    for (const Event& e : out.events) {
      if (e.type != "fail_detected") continue;
      const std::string f = e.fields.str();  // {"failed":3,"by":"protocol"}
      if (f.find("\"failed\":" + std::to_string(kLiar + 1)) != std::string::npos)
        store->set("removed_by/" + std::to_string(kLiar + 1), f);
    }
    for (const Event& e : out.events)
      if (e.type == "nonfinite") store->set("nonfinite/" + std::to_string(id), e.fields.str());
    return out;
  }

  // In the rank's process: the liar was evicted before applying any outer step; the others
  // retried outer step 0 once without it and applied every step with 2 participants.
  // Returns the rank's exit code (kRankOk when all holds).
  static RankExit expect_liar_evicted_at_once(int rank, const NodeOutcome& n,
                                              std::int64_t outer_steps) {
    if (rank == kLiar) {
      MERIDIAN_RANK_EXPECT(n.result.exit == NodeExit::kEvicted);
      MERIDIAN_RANK_EXPECT(n.result.outer_steps_applied == 0);
      return kRankOk;
    }
    MERIDIAN_RANK_EXPECT(n.result.exit == NodeExit::kFinished);
    MERIDIAN_RANK_EXPECT(n.result.outer_steps_applied == outer_steps);
    MERIDIAN_RANK_EXPECT(count(n, "retry") == 1);
    MERIDIAN_RANK_EXPECT(count(n, "fallback") == 0);
    for (const Event& e : n.events)
      if (e.type == "outer_step")
        MERIDIAN_RANK_EXPECT(e.fields.str().find("\"participants\":2") != std::string::npos);
    return kRankOk;
  }

  static std::size_t count(const NodeOutcome& n, const std::string& type) {
    std::size_t k = 0;
    for (const Event& e : n.events) k += e.type == type;
    return k;
  }

  // The log outlives the server, whose thread writes to it until the server is destroyed.
  std::mutex log_mu_;
  std::vector<std::string> log_;
  std::uint16_t port_ = 0;
  std::unique_ptr<TcpStoreServer> server_;
};

// The liar's first chunk claims a huge element count, every later one has a bad checksum, and
// before training it sends the store an oversized frame. Its successor rejects the chunk and
// blames it; the coordinator retries outer step 0 without it, so the liar is cut off at its
// first lie (evicted) and the honest nodes finish every outer step together, with no fallback.
TEST_F(LyingPeerTrainingTest, ALiarIsCutOffAndTheHonestNodesFinishEveryOuterStep) {
  const std::int64_t outer_steps = 3;
  const auto pids = fork_ranks(kNodes, [&](int rank) {
    const NodeOutcome n = run_node(rank, 1000, true, outer_steps);
    if (const RankExit bad = expect_liar_evicted_at_once(rank, n, outer_steps); bad != kRankOk)
      return bad;
    MERIDIAN_RANK_EXPECT(max_rss_kib() < kMaxRssKib);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(kNodes, kRankOk));
  auto store = store_client(port_, "parent");
  EXPECT_EQ(store->get("crc/1", kTimeoutS), store->get("crc/2", kTimeoutS));
  // Whoever held the coordinator lease wrote why the liar went.
  EXPECT_NE(store->get("removed_by/3", kTimeoutS).find("protocol"), std::string::npos);
  EXPECT_GE(server_->stats().cut_off, 1u);
  std::lock_guard<std::mutex> lock(log_mu_);
  bool logged = false;
  for (const auto& line : log_) logged = logged || line.find("frame claims") != std::string::npos;
  EXPECT_TRUE(logged) << "the store's log names the oversized frame";
}

// The liar sends NaN in valid chunks (what a node without the non-finite guard sends). Its
// successor's ring finds the non-finite sum (NonFiniteError naming the liar), reports it (event
// `nonfinite`, detected by the receiver) and blames it; the coordinator evicts it and retries
// outer step 0 without it, and the honest nodes finish every step together on finite values.
TEST_F(LyingPeerTrainingTest, APeerSendingNaNAnywayIsEvictedAndTheOthersFinish) {
  const std::int64_t outer_steps = 3;
  const auto pids = fork_ranks(kNodes, [&](int rank) {
    const NodeOutcome n = run_node(rank, 1000, false, outer_steps, true);
    return expect_liar_evicted_at_once(rank, n, outer_steps);
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>(kNodes, kRankOk));
  auto store = store_client(port_, "parent");
  EXPECT_EQ(store->get("crc/1", kTimeoutS), store->get("crc/2", kTimeoutS));
  EXPECT_NE(store->get("removed_by/3", kTimeoutS).find("protocol"), std::string::npos);
  const auto reports = store->read_prefix("nonfinite/");
  ASSERT_EQ(reports.size(), 1u);  // the liar's successor, once
  EXPECT_NE(reports[0].first, "nonfinite/3");
  EXPECT_NE(reports[0].second.find("\"faulty\":3"), std::string::npos) << reports[0].second;
  EXPECT_NE(reports[0].second.find("\"detected_by\":\"receiver\""), std::string::npos);
}

}  // namespace
}  // namespace meridian
