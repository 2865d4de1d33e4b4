// FaultyTransport over the in-process transport: each fault fires at exactly the configured
// outgoing message and nowhere else; delays go through the Runtime.
#include "engine/backends/faults/faulty_transport.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/backends/inproc/inproc_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

const Tag kTag = make_tag(TagKind::kTest, 3);

// A Runtime that records sleeps instead of sleeping (the wrapper must use it, not the OS).
class RecordingRuntime final : public Runtime {
 public:
  double now_s() override { return slept_s; }
  void sleep_s(double seconds) override {
    slept_s += seconds;
    ++sleeps;
  }
  void compute_s(double seconds) override { sleep_s(seconds); }
  std::unique_ptr<Activity> spawn(std::string name, std::function<void()> body) override {
    return real_.spawn(std::move(name), std::move(body));
  }
  std::unique_ptr<Mutex> make_mutex() override { return real_.make_mutex(); }
  std::unique_ptr<CondVar> make_condvar() override { return real_.make_condvar(); }

  double slept_s = 0;
  int sleeps = 0;

 private:
  ThreadRuntime real_;
};

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i + 1);
  return v;
}

struct Pair {
  InProcHub hub{2, 0};
  std::unique_ptr<Transport> sender = hub.endpoint(0);
  std::unique_ptr<Transport> receiver = hub.endpoint(1);
  RecordingRuntime runtime;
};

TEST(FaultyTransport, FlipsOneByteOfTheKthMessageOnly) {
  Pair p;
  // Offset 13 modulo the 10-byte message: byte 3.
  FaultyTransport faulty(*p.sender, p.runtime, {.flip_byte_at_message = 2, .flip_byte_offset = 13});
  const auto msg = pattern(10);
  std::vector<std::byte> into(10);
  for (int k = 1; k <= 3; ++k) {
    faulty.send(1, kTag, Payload::of(msg), 1.0);
    ASSERT_EQ(p.receiver->recv(0, kTag, into, 1.0).bytes, 10u);
    for (std::size_t i = 0; i < 10; ++i) {
      const std::byte want = (k == 2 && i == 3) ? (msg[i] ^ std::byte{0xFF}) : msg[i];
      EXPECT_EQ(into[i], want) << "message " << k << " byte " << i;
    }
  }
  EXPECT_EQ(faulty.messages_sent(), 3u);
}

TEST(FaultyTransport, TruncatesTheKthMessageThroughAnExchange) {
  Pair p;
  FaultyTransport faulty(*p.sender, p.runtime, {.truncate_at_message = 1, .truncate_to_bytes = 4});
  const auto msg = pattern(10);
  std::vector<std::byte> into(10), back(10);
  auto ex = faulty.start_exchange(1, Payload::of(msg), 1, back, kTag);
  const Received got = p.receiver->recv(0, kTag, into, 1.0);
  EXPECT_EQ(got.bytes, 4u);
  EXPECT_EQ(got.wire_bytes, 4u);
  EXPECT_EQ(into[3], msg[3]);
  p.receiver->send(0, kTag, Payload::of(msg), 1.0);
  EXPECT_EQ(ex->wait(1.0).bytes, 10u);
}

TEST(FaultyTransport, DiesAtTheKthMessageAndPeersSeePeerLost) {
  Pair p;
  FaultyTransport faulty(*p.sender, p.runtime, {.die_at_message = 2});
  const auto msg = pattern(3);
  faulty.send(1, kTag, Payload::of(msg), 1.0);
  try {
    faulty.send(1, kTag, Payload::of(msg), 1.0);
    FAIL() << "the second message should have killed the rank";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.peer(), 0);
  }
  EXPECT_TRUE(faulty.dead());
  std::vector<std::byte> into(3);
  EXPECT_EQ(p.receiver->recv(0, kTag, into, 1.0).bytes, 3u);  // the first one got through
  EXPECT_THROW(p.receiver->recv(0, kTag, into, 60.0), PeerLostError);
  EXPECT_THROW(faulty.recv(1, kTag, into, 1.0), PeerLostError);
  EXPECT_THROW(faulty.start_exchange(1, Payload::of(msg), 1, into, kTag), PeerLostError);
}

TEST(FaultyTransport, DelaysThroughTheRuntime) {
  Pair p;
  FaultyTransport faulty(*p.sender, p.runtime, {.delay_s = 0.25, .delay_from_message = 2});
  const auto msg = pattern(1);
  for (int k = 0; k < 3; ++k) faulty.send(1, kTag, Payload::of(msg), 1.0);
  EXPECT_EQ(p.runtime.sleeps, 2);
  EXPECT_DOUBLE_EQ(p.runtime.slept_s, 0.5);
}

TEST(FaultyTransport, PhantomPayloadsPassFlipsAndTruncateToWireSize) {
  Pair p;
  FaultyTransport faulty(
      *p.sender, p.runtime,
      {.flip_byte_at_message = 1, .truncate_at_message = 2, .truncate_to_bytes = 10});
  faulty.send(1, kTag, Payload::phantom(1000), 1.0);
  faulty.send(1, kTag, Payload::phantom(1000), 1.0);
  EXPECT_EQ(p.receiver->recv(0, kTag, {}, 1.0).wire_bytes, 1000u);
  EXPECT_EQ(p.receiver->recv(0, kTag, {}, 1.0).wire_bytes, 10u);
}

TEST(FaultyTransportFactory, WrapsOnlyTheChosenMembers) {
  InProcNetwork net;
  RecordingRuntime runtime;
  FaultyTransportFactory factory(net, runtime, [](const EpochSpec& s) {
    FaultOptions o;
    if (s.members[s.rank] == 20) o.die_at_message = 1;
    return o;
  });
  EpochSpec a{5, 0, {10, 20}, 1.0};
  EpochSpec b{5, 1, {10, 20}, 1.0};
  auto ta = factory.connect(a);
  auto tb = factory.connect(b);
  const auto msg = pattern(2);
  ta->send(1, kTag, Payload::of(msg), 1.0);
  EXPECT_THROW(tb->send(0, kTag, Payload::of(msg), 1.0), PeerLostError);
  std::vector<std::byte> into(2);
  EXPECT_THROW(ta->recv(1, kTag, into, 60.0), PeerLostError);
}

}  // namespace
}  // namespace meridian
