// Live recovery on its own: exact transfer from parallel sources, a corrupted chunk caught by
// CRC-32C and refetched elsewhere, a lost source resumed elsewhere, all sources lost, bad
// layouts, phantom states, the source assignment.
#include "engine/core/recovery/live_recovery.h"

#include <gtest/gtest.h>

#include "engine/backends/faults/faulty_transport.h"
#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

RoundRecord round_with(std::vector<std::int64_t> sources, std::vector<std::int64_t> joiners) {
  RoundRecord r;
  r.round = 7;
  r.sources = sources;
  r.joiners = joiners;
  r.members = sources;
  r.members.insert(r.members.end(), joiners.begin(), joiners.end());
  return r;
}

std::shared_ptr<RecoveryState> make_state(std::size_t shared, std::size_t priv, int salt) {
  auto s = std::make_shared<RecoveryState>();
  s->shared_bytes = shared;
  s->private_bytes = priv;
  for (std::size_t i = 0; i < shared; ++i) s->shared.push_back(std::byte(i * 7 % 251));
  for (std::size_t i = 0; i < priv; ++i) s->priv.push_back(std::byte((i + salt) % 13));
  return s;
}

struct Served {
  std::vector<std::unique_ptr<Activity>> servers;
  std::vector<std::string> errors;
};

// Starts one server per source; `states[i]` is source i's state.
void serve_all(Runtime& rt, TransportFactory& f, const RoundRecord& r, std::int64_t joiner,
               const std::vector<std::shared_ptr<RecoveryState>>& states, const RecoveryOptions& o,
               Served& out) {
  for (std::size_t i = 0; i < r.sources.size(); ++i) {
    const EpochSpec spec = recovery_spec(r, joiner, r.sources[i], true, o);
    out.servers.push_back(rt.spawn("serve", [&f, spec, st = states[i], o] {
      try {
        serve_recovery(f, spec, st, o);
      } catch (const Error&) {
      }
    }));
  }
}

TEST(LiveRecovery, FetchesExactBytesFromParallelSources) {
  ThreadRuntime rt;
  InProcNetwork net;
  RecoveryOptions o;
  o.chunk_bytes = 10;
  o.timeout_s = 5;
  const RoundRecord r = round_with({1, 2, 3}, {9});
  const auto a = make_state(95, 23, 1), b = make_state(95, 23, 2), c = make_state(95, 23, 3);
  Served s;
  serve_all(rt, net, r, 9, {a, b, c}, o, s);
  const FetchResult got = fetch_recovery(net, rt, r, 9, {1, 2, 3}, 95, 1000, false, o);
  for (auto& x : s.servers) x->join();
  EXPECT_EQ(got.state.shared, a->shared);
  EXPECT_EQ(got.state.priv, a->priv);  // the private part comes whole from the first source
  EXPECT_EQ(got.served_by, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(got.resumed, 0);
  EXPECT_EQ(got.bytes, 95u + 23u);
}

TEST(LiveRecovery, ACorruptedChunkIsCaughtAndFetchedFromAnotherSource) {
  ThreadRuntime rt;
  InProcNetwork net;
  // Source 1's third message (a chunk reply) has a byte of its payload flipped.
  FaultyTransportFactory faulty(net, rt, [](const EpochSpec& spec) {
    FaultOptions f;
    if (spec.rank == 1 && spec.members[1] == 1) {
      f.flip_byte_at_message = 3;
      f.flip_byte_offset = 30;
    }
    return f;
  });
  RecoveryOptions o;
  o.chunk_bytes = 16;
  o.timeout_s = 5;
  const RoundRecord r = round_with({1, 2}, {9});
  const auto a = make_state(160, 8, 1), b = make_state(160, 8, 2);
  Served s;
  serve_all(rt, faulty, r, 9, {a, b}, o, s);
  const FetchResult got = fetch_recovery(faulty, rt, r, 9, {1, 2}, 160, 100, false, o);
  for (auto& x : s.servers) x->join();
  EXPECT_EQ(got.state.shared, a->shared);
  EXPECT_EQ(got.resumed, 1);
}

TEST(LiveRecovery, ALostSourceIsResumedFromTheOthers) {
  ThreadRuntime rt;
  InProcNetwork net;
  FaultyTransportFactory faulty(net, rt, [](const EpochSpec& spec) {
    FaultOptions f;
    if (spec.rank == 1 && spec.members[1] == 2) f.die_at_message = 4;  // layout + 2 chunks
    return f;
  });
  RecoveryOptions o;
  o.chunk_bytes = 8;
  o.timeout_s = 5;
  const RoundRecord r = round_with({1, 2}, {9});
  const auto a = make_state(200, 40, 1), b = make_state(200, 40, 2);
  Served s;
  serve_all(rt, faulty, r, 9, {a, b}, o, s);
  const FetchResult got = fetch_recovery(faulty, rt, r, 9, {1, 2}, 200, 100, false, o);
  for (auto& x : s.servers) x->join();
  EXPECT_EQ(got.state.shared, a->shared);
  EXPECT_EQ(got.state.priv, a->priv);
  EXPECT_EQ(got.resumed, 1);
  EXPECT_EQ(got.served_by, (std::vector<std::int64_t>{1, 2}));
}

TEST(LiveRecovery, EverySourceLostIsAPeerLostError) {
  ThreadRuntime rt;
  InProcNetwork net;
  net.kill_node(1);
  net.kill_node(2);
  RecoveryOptions o;
  o.timeout_s = 1;
  const RoundRecord r = round_with({1, 2}, {9});
  EXPECT_THROW(fetch_recovery(net, rt, r, 9, {1, 2}, 64, 64, false, o), PeerLostError);
  EXPECT_THROW(fetch_recovery(net, rt, r, 9, {}, 64, 64, false, o), PeerLostError);
}

TEST(LiveRecovery, ALayoutThatDoesNotMatchIsRejected) {
  ThreadRuntime rt;
  InProcNetwork net;
  RecoveryOptions o;
  o.timeout_s = 2;
  const RoundRecord r = round_with({1}, {9});
  Served s;
  serve_all(rt, net, r, 9, {make_state(64, 10, 0)}, o, s);
  // The joiner expects 128 shared bytes: the only source is rejected, nothing is allocated.
  EXPECT_THROW(fetch_recovery(net, rt, r, 9, {1}, 128, 64, false, o), PeerLostError);
  for (auto& x : s.servers) x->join();
  Served s2;
  const RoundRecord r2 = round_with({1}, {10});
  serve_all(rt, net, r2, 10, {make_state(64, 1000, 0)}, o, s2);
  // A private part beyond the bound is rejected too.
  EXPECT_THROW(fetch_recovery(net, rt, r2, 10, {1}, 64, 100, false, o), PeerLostError);
  for (auto& x : s2.servers) x->join();
}

TEST(LiveRecovery, PhantomStatesShipSizesOnly) {
  ThreadRuntime rt;
  InProcNetwork net;
  RecoveryOptions o;
  o.chunk_bytes = 1000;
  o.timeout_s = 5;
  const RoundRecord r = round_with({1, 2}, {9});
  auto st = std::make_shared<RecoveryState>();
  st->phantom = true;
  st->shared_bytes = 4500;
  st->private_bytes = 1200;
  Served s;
  serve_all(rt, net, r, 9, {st, st}, o, s);
  const FetchResult got = fetch_recovery(net, rt, r, 9, {1, 2}, 4500, 2000, true, o);
  for (auto& x : s.servers) x->join();
  EXPECT_TRUE(got.state.shared.empty());
  EXPECT_EQ(got.state.private_bytes, 1200u);
  EXPECT_EQ(got.bytes, 5700u);
}

TEST(LiveRecovery, SourcesAreSpreadOverJoiners) {
  const RoundRecord r = round_with({1, 2, 3}, {7, 8});
  EXPECT_EQ(recovery_sources_for(r, 7, 2), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(recovery_sources_for(r, 8, 2), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(recovery_sources_for(r, 8, 5), (std::vector<std::int64_t>{2, 3, 1}));
  EXPECT_TRUE(recovery_sources_for(r, 1, 2).empty());  // not a joiner
  EXPECT_NE(recovery_spec(r, 7, 1, false, RecoveryOptions{}).epoch,
            recovery_spec(r, 8, 1, false, RecoveryOptions{}).epoch);
  EXPECT_EQ(recovery_spec(r, 7, 1, false, RecoveryOptions{}).epoch >> 62, 1u);
}

}  // namespace
}  // namespace meridian
