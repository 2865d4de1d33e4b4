// In-process transport: delivery, ordering, phantom payloads, and the error contract of
// engine/core/transport.h (PeerLostError for dead/aborted/closed peers, TimeoutError,
// ProtocolError).
#include "engine/backends/inproc/inproc_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "tests/collective/rank_threads.h"

namespace meridian {
namespace {

using testing::holds;
using testing::run_ranks;

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

const Tag kTagA = make_tag(TagKind::kTest, 1);
const Tag kTagB = make_tag(TagKind::kTest, 2);

TEST(InProcTransport, DeliversInOrderPerTagAndKeepsTagsApart) {
  InProcHub hub(2, 7);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  EXPECT_EQ(a->rank(), 0);
  EXPECT_EQ(b->size(), 2);
  EXPECT_EQ(b->epoch(), 7u);
  const auto one = bytes_of({1, 2, 3});
  const auto two = bytes_of({4});
  const auto other = bytes_of({9, 9});
  a->send(1, kTagA, Payload::of(one), 1.0);
  a->send(1, kTagB, Payload::of(other), 1.0);
  a->send(1, kTagA, Payload::of(two), 1.0);
  std::vector<std::byte> into(8);
  Received got = b->recv(0, kTagA, into, 1.0);
  EXPECT_EQ(got.bytes, 3u);
  EXPECT_EQ(got.wire_bytes, 3u);
  EXPECT_EQ(into[2], std::byte{3});
  got = b->recv(0, kTagA, into, 1.0);
  EXPECT_EQ(got.bytes, 1u);
  EXPECT_EQ(into[0], std::byte{4});
  got = b->recv(0, kTagB, into, 1.0);
  EXPECT_EQ(got.bytes, 2u);
  EXPECT_EQ(into[1], std::byte{9});
}

TEST(InProcTransport, PhantomPayloadArrivesAsWireBytesOnly) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  a->send(1, kTagA, Payload::phantom(123456789), 1.0);
  const Received got = b->recv(0, kTagA, {}, 1.0);
  EXPECT_EQ(got.bytes, 0u);
  EXPECT_EQ(got.wire_bytes, 123456789u);
}

TEST(InProcTransport, ExchangeAroundARing) {
  constexpr int kWorld = 5;
  InProcHub hub(kWorld, 1);
  std::vector<std::unique_ptr<Transport>> ends;
  for (int r = 0; r < kWorld; ++r) ends.push_back(hub.endpoint(r));
  std::vector<int> got_from(kWorld, -1);
  auto errors = run_ranks(kWorld, [&](int r) {
    const auto out = bytes_of({r});
    std::vector<std::byte> in(1);
    auto ex = ends[r]->start_exchange((r + 1) % kWorld, Payload::of(out), (r + kWorld - 1) % kWorld,
                                      in, kTagA);
    EXPECT_EQ(ex->wait(5.0).bytes, 1u);
    got_from[r] = static_cast<int>(in[0]);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(errors[r]) << testing::describe(errors[r]);
    EXPECT_EQ(got_from[r], (r + kWorld - 1) % kWorld);
  }
}

TEST(InProcTransport, SilentPeerTimesOut) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  std::vector<std::byte> into(4);
  EXPECT_THROW(b->recv(0, kTagA, into, 0.05), TimeoutError);
  auto ex = b->start_exchange(0, Payload::of(into), 0, into, kTagA);
  EXPECT_THROW(ex->wait(0.05), TimeoutError);
}

TEST(InProcTransport, OversizedMessageIsAProtocolError) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  const std::vector<std::byte> big(100);
  a->send(1, kTagA, Payload::of(big), 1.0);
  std::vector<std::byte> small(99);
  EXPECT_THROW(b->recv(0, kTagA, small, 1.0), ProtocolError);
}

TEST(InProcTransport, KilledPeerFailsPendingReceive) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  // The receive may start before or after the kill: either way it must end in PeerLostError
  // (a pending operation or a future one), never in the 60 s timeout.
  auto errors = run_ranks(2, [&](int r) {
    if (r == 0) {
      hub.kill(1);
    } else {
      std::vector<std::byte> into(4);
      a->recv(1, kTagA, into, 60.0);
    }
  });
  EXPECT_TRUE(holds<PeerLostError>(errors[1])) << testing::describe(errors[1]);
  const std::vector<std::byte> msg(4);
  EXPECT_THROW(a->send(1, kTagA, Payload::of(msg), 1.0), PeerLostError);
  // The dead rank's own calls fail too.
  EXPECT_THROW(b->send(0, kTagA, Payload::of(msg), 1.0), PeerLostError);
}

TEST(InProcTransport, AbortedPeerFailsExchangeButEarlierMessagesArrive) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  auto b = hub.endpoint(1);
  const auto msg = bytes_of({5});
  b->send(0, kTagA, Payload::of(msg), 1.0);
  b->abort();
  b->abort();  // idempotent
  std::vector<std::byte> into(1);
  EXPECT_EQ(a->recv(1, kTagA, into, 1.0).bytes, 1u);  // sent before the abort
  EXPECT_THROW(a->recv(1, kTagA, into, 60.0), PeerLostError);
  auto ex = a->start_exchange(1, Payload::of(msg), 1, into, kTagB);
  try {
    ex->wait(60.0);
    FAIL() << "exchange with an aborted peer succeeded";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.peer(), 1);
  }
}

TEST(InProcTransport, DestroyedEndpointIsAClosedPeer) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  hub.endpoint(1).reset();
  std::vector<std::byte> into(1);
  EXPECT_THROW(a->recv(1, kTagA, into, 60.0), PeerLostError);
}

TEST(InProcTransport, BadRanksAreConfigErrors) {
  InProcHub hub(2, 0);
  auto a = hub.endpoint(0);
  std::vector<std::byte> into(1);
  EXPECT_THROW(a->send(2, kTagA, Payload::of(into), 1.0), ConfigError);
  EXPECT_THROW(a->recv(-1, kTagA, into, 1.0), ConfigError);
  EXPECT_THROW(hub.endpoint(5), ConfigError);
  EXPECT_THROW(InProcHub(0, 0), ConfigError);
}

EpochSpec spec(std::uint64_t epoch, int rank, std::vector<std::int64_t> members) {
  EpochSpec s;
  s.epoch = epoch;
  s.rank = rank;
  s.members = std::move(members);
  return s;
}

TEST(InProcNetwork, MembersOfAnEpochMeetAndEpochsStayApart) {
  InProcNetwork net;
  auto a1 = net.connect(spec(1, 0, {10, 20}));
  auto b1 = net.connect(spec(1, 1, {10, 20}));
  auto a2 = net.connect(spec(2, 0, {10, 20}));
  auto b2 = net.connect(spec(2, 1, {10, 20}));
  const auto m1 = bytes_of({1});
  const auto m2 = bytes_of({2});
  a1->send(1, kTagA, Payload::of(m1), 1.0);
  a2->send(1, kTagA, Payload::of(m2), 1.0);
  std::vector<std::byte> into(1);
  b2->recv(0, kTagA, into, 1.0);
  EXPECT_EQ(into[0], std::byte{2});
  b1->recv(0, kTagA, into, 1.0);
  EXPECT_EQ(into[0], std::byte{1});
  EXPECT_THROW(net.connect(spec(1, 0, {10, 30})), ConfigError);
  EXPECT_THROW(net.connect(spec(1, 2, {10, 20})), ConfigError);
}

TEST(InProcNetwork, KillNodeIsDeadInEveryEpochUntilRevived) {
  InProcNetwork net;
  auto a1 = net.connect(spec(1, 0, {10, 20}));
  auto b1 = net.connect(spec(1, 1, {10, 20}));
  net.kill_node(20);
  std::vector<std::byte> into(1);
  EXPECT_THROW(a1->recv(1, kTagA, into, 60.0), PeerLostError);
  auto a2 = net.connect(spec(2, 0, {10, 20}));
  EXPECT_THROW(a2->recv(1, kTagA, into, 60.0), PeerLostError);
  net.revive_node(20);
  auto a3 = net.connect(spec(3, 0, {10, 20}));
  auto b3 = net.connect(spec(3, 1, {10, 20}));
  b3->send(0, kTagA, Payload::of(into), 1.0);
  EXPECT_EQ(a3->recv(1, kTagA, into, 1.0).bytes, 1u);
}

}  // namespace
}  // namespace meridian
