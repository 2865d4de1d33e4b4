// NcclTransport between forked processes, one GPU each (label gpu; needs 2 GPUs for the pair
// tests and says so when skipped): host and device buffers, fused exchange, zero bytes, an
// oversize message as ProtocolError, abort() reaching the peer as PeerLostError through the
// store, and a world of one. The parent never touches CUDA (a forked child could not use it).
#include "engine/backends/nccl/nccl_transport.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/gloo/multi_process.h"

namespace meridian {
namespace {

using namespace meridian::testing;
using nccl_transport::NcclOptions;
using nccl_transport::NcclTransportFactory;

constexpr double kTimeoutS = 60.0;

// CUDA devices visible, counted in a child process so this process stays CUDA-free.
int visible_gpus() {
  const auto pids = fork_ranks(1, [](int) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return std::min(n, 9);
  });
  return wait_all(pids)[0];
}

EpochSpec spec_for(int rank, int world) {
  EpochSpec s;
  s.epoch = 3;
  s.rank = rank;
  for (int i = 0; i < world; ++i) s.members.push_back(i);
  s.timeout_s = kTimeoutS;
  return s;
}

std::vector<float> pattern(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 100000 + i);
  return v;
}

// Rank `rank` of a 2-rank epoch on GPU `rank`.
struct GpuRank {
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<NcclTransportFactory> factory;
  std::unique_ptr<Transport> t;
};
GpuRank join_pair(std::uint16_t port, int rank) {
  GpuRank r;
  r.store = store_client(port, "rank" + std::to_string(rank));
  NcclOptions o;
  o.cuda_device = rank;
  r.factory = std::make_unique<NcclTransportFactory>(*r.store, o);
  r.t = r.factory->connect(spec_for(rank, 2));
  return r;
}

class NcclTransportTest : public WithStore<> {
 protected:
  void SetUp() override {
    gpus_ = visible_gpus();
    if (gpus_ < 1) GTEST_SKIP() << "no CUDA device visible: NCCL transport tests skipped";
    WithStore<>::SetUp();
  }
  int gpus_ = 0;
};

TEST_F(NcclTransportTest, AWorldOfOneConnectsAndRefusesPeers) {
  const auto pids = fork_ranks(1, [&](int) {
    auto store = store_client(port_, "solo");
    NcclTransportFactory factory(*store);
    auto t = factory.connect(spec_for(0, 1));
    MERIDIAN_RANK_EXPECT(t->size() == 1);
    std::vector<float> in(1);
    try {
      t->recv(0, make_tag(TagKind::kTest, 1), std::as_writable_bytes(std::span(in)), 1.0);
    } catch (const ConfigError&) {
      return kRankOk;
    }
    return kRankWrongResult;
  });
  EXPECT_EQ(wait_all(pids), std::vector<int>{kRankOk});
}

TEST_F(NcclTransportTest, HostAndDeviceMessagesBetweenTwoGpus) {
  if (gpus_ < 2)
    GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU); " << gpus_ << " visible";
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_pair(port_, rank);
    const int peer = 1 - rank;
    // Host buffers through the fused exchange, then plain send/recv in a fixed order.
    const auto out = pattern(rank, 1 << 20);
    std::vector<float> in(1 << 20);
    auto ex = t->start_exchange(peer, Payload::of(std::as_bytes(std::span(out))), peer,
                                std::as_writable_bytes(std::span(in)), make_tag(TagKind::kTest, 1));
    MERIDIAN_RANK_EXPECT(ex->wait(kTimeoutS).bytes == out.size() * 4);
    MERIDIAN_RANK_EXPECT(in == pattern(peer, 1 << 20));
    std::vector<float> small(10, -1.0f);
    const auto five = pattern(rank, 5);
    if (rank == 0) {
      t->send(peer, make_tag(TagKind::kTest, 2), Payload::of(std::as_bytes(std::span(five))),
              kTimeoutS);
    } else {
      MERIDIAN_RANK_EXPECT(t->recv(peer, make_tag(TagKind::kTest, 2),
                                   std::as_writable_bytes(std::span(small)), kTimeoutS)
                               .bytes == 20);
      MERIDIAN_RANK_EXPECT(small[4] == pattern(peer, 5)[4] && small[5] == -1.0f);
    }
    // Device buffers, used in place.
    float* dev_out = nullptr;
    float* dev_in = nullptr;
    cudaMalloc(&dev_out, 4096 * 4);
    cudaMalloc(&dev_in, 4096 * 4);
    const auto host_out = pattern(rank, 4096);
    cudaMemcpy(dev_out, host_out.data(), 4096 * 4, cudaMemcpyHostToDevice);
    ex = t->start_exchange(peer, Payload::of({reinterpret_cast<std::byte*>(dev_out), 4096 * 4}),
                           peer, {reinterpret_cast<std::byte*>(dev_in), 4096 * 4},
                           make_tag(TagKind::kTest, 3));
    ex->wait(kTimeoutS);
    std::vector<float> host_in(4096);
    cudaMemcpy(host_in.data(), dev_in, 4096 * 4, cudaMemcpyDeviceToHost);
    MERIDIAN_RANK_EXPECT(host_in == pattern(peer, 4096));
    // Zero bytes.
    ex = t->start_exchange(peer, Payload::of({}), peer, {}, make_tag(TagKind::kTest, 4));
    MERIDIAN_RANK_EXPECT(ex->wait(kTimeoutS).bytes == 0);
    store_barrier(*store, "done", rank, 2, kTimeoutS);
    return kRankOk;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankOk, kRankOk}));
}

TEST_F(NcclTransportTest, OversizeIsAProtocolErrorAndAbortReachesThePeer) {
  if (gpus_ < 2)
    GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU); " << gpus_ << " visible";
  const auto pids = fork_ranks(2, [&](int rank) {
    auto [store, factory, t] = join_pair(port_, rank);
    if (rank == 0) {
      std::vector<float> small(16);
      t->recv(1, make_tag(TagKind::kTest, 1), std::as_writable_bytes(std::span(small)), kTimeoutS);
      return kRankWrongResult;
    }
    const auto big = pattern(1, 64);
    // A small send may complete eagerly (NCCL buffers it); the receive that follows must then
    // learn of rank 0's abort through the store.
    t->send(0, make_tag(TagKind::kTest, 1), Payload::of(std::as_bytes(std::span(big))), kTimeoutS);
    std::vector<float> reply(1);
    t->recv(0, make_tag(TagKind::kTest, 2), std::as_writable_bytes(std::span(reply)), kTimeoutS);
    return kRankWrongResult;
  });
  EXPECT_EQ(wait_all(pids), (std::vector<int>{kRankProtocol, kRankPeerLost}));
}

}  // namespace
}  // namespace meridian
