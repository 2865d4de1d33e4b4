// Unit tests of the delay element's logic (cli/netdelay/delay_forwarder.h): delay matrices and
// their errors, MAC learning, release order and times, flooding, and the fixed buffer pool.
// Pure code: frames are byte vectors and time is a number.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cli/netdelay/delay_forwarder.h"
#include "engine/core/error.h"

namespace meridian::netdelay {
namespace {

constexpr std::int64_t kMs = 1'000'000;
const Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

Mac host(std::uint8_t i) { return Mac{0x02, 0, 0, 0, 0, i}; }  // locally administered unicast

// A frame: `prefix` opaque bytes, then dst, src, EtherType 0x0800 and a payload tag.
std::vector<std::uint8_t> frame(const Mac& dst, const Mac& src, std::uint8_t tag,
                                std::size_t prefix = 0, std::size_t payload = 46) {
  std::vector<std::uint8_t> f(prefix, 0xee);
  f.insert(f.end(), dst.begin(), dst.end());
  f.insert(f.end(), src.begin(), src.end());
  f.push_back(0x08);
  f.push_back(0x00);
  f.resize(f.size() + payload, tag);
  return f;
}

struct Sent {
  int port;
  std::int64_t release_ns;
  std::uint8_t tag;  // the frame's last byte
  std::size_t bytes;
  bool operator==(const Sent&) const = default;
};

std::vector<Sent> drain(DelayForwarder& f, std::int64_t now_ns) {
  std::vector<Sent> out;
  f.release_due(now_ns, [&](int port, std::span<const std::uint8_t> bytes, std::int64_t release) {
    out.push_back(Sent{port, release, bytes.back(), bytes.size()});
  });
  return out;
}

TEST(DelayMatrix, UniformAndAccessDelays) {
  const DelayMatrix u = DelayMatrix::uniform(3, 20);
  EXPECT_EQ(u.ports(), 3);
  EXPECT_EQ(u.delay_ns(0, 2), 20 * kMs);
  EXPECT_EQ(u.delay_ns(2, 1), 20 * kMs);
  const std::vector<double> access{5, 10, 0.5};
  const DelayMatrix a = DelayMatrix::from_access_delays(access);
  EXPECT_EQ(a.delay_ns(0, 1), 15 * kMs);
  EXPECT_EQ(a.delay_ns(1, 0), 15 * kMs);
  EXPECT_EQ(a.delay_ns(2, 0), 5'500'000);
}

TEST(DelayMatrix, ParsesRowsWithCommasBlanksAndComments) {
  const DelayMatrix m =
      DelayMatrix::parse("# one-way ms\n0, 10, 20\n\n10 0 30  # row 2\n20,30,0\n", "m.txt");
  EXPECT_EQ(m.ports(), 3);
  EXPECT_EQ(m.delay_ns(0, 1), 10 * kMs);
  EXPECT_EQ(m.delay_ns(1, 2), 30 * kMs);
  EXPECT_EQ(m.delay_ns(2, 0), 20 * kMs);
}

TEST(DelayMatrix, BadInputNamesTheProblem) {
  const auto message = [](const std::string& text) {
    try {
      DelayMatrix::parse(text, "m.txt");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("0 1\n1 x\n"), "m.txt:2: expected a delay in ms, got 'x'");
  EXPECT_EQ(message("0 1\n1\n"), "m.txt:2: expected 2 delays (as the first row), got 1");
  EXPECT_EQ(message("0 1\n"), "m.txt: expected a square matrix, got 1 rows of 2");
  EXPECT_EQ(message("# nothing\n"), "m.txt: no delays (expected N lines of N delays in ms)");
  EXPECT_NE(message("0 -1\n1 0\n").find("row 1, column 2: expected a one-way delay"),
            std::string::npos);
  EXPECT_THROW(DelayMatrix::uniform(0, 1), ConfigError);
  EXPECT_THROW(DelayMatrix::uniform(2, -1), ConfigError);
}

TEST(DelayMatrix, DelayListsTakeCommasOrBlanks) {
  EXPECT_EQ(parse_delays_ms("5,10 2.5", "--x"), (std::vector<double>{5, 10, 2.5}));
  EXPECT_TRUE(parse_delays_ms("  ", "--x").empty());
  try {
    parse_delays_ms("5,1O", "--access-delay-ms");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--access-delay-ms: expected a delay in ms, got '1O'");
  }
}

TEST(MacTable, LearnsMovesAndIgnoresGroupAddresses) {
  MacTable t(4);
  EXPECT_EQ(t.lookup(host(1)), -1);
  t.learn(host(1), 0);
  t.learn(host(2), 3);
  EXPECT_EQ(t.lookup(host(1)), 0);
  EXPECT_EQ(t.lookup(host(2)), 3);
  t.learn(host(1), 2);  // the host moved
  EXPECT_EQ(t.lookup(host(1)), 2);
  t.learn(kBroadcast, 1);
  t.learn(Mac{0x33, 0x33, 0, 0, 0, 1}, 1);  // IPv6 multicast
  EXPECT_EQ(t.lookup(kBroadcast), -1);
  EXPECT_EQ(t.size(), 2u);
}

TEST(MacTable, FullTableStopsLearningButKeepsWhatItKnows) {
  MacTable t(4);
  for (std::uint8_t i = 1; i <= 40; ++i) t.learn(host(i), i % 7);
  EXPECT_LE(t.size(), 8u);  // the table is at most half full (16 slots for capacity 4)
  EXPECT_GE(t.size(), 4u);
  std::size_t known = 0;
  for (std::uint8_t i = 1; i <= 40; ++i) {
    const int p = t.lookup(host(i));
    if (p >= 0) {
      EXPECT_EQ(p, i % 7);
      ++known;
    }
  }
  EXPECT_EQ(known, t.size());
}

TEST(DelayForwarder, UnknownDestinationFloodsWithEachPairsDelay) {
  const std::vector<double> access{1, 2, 3};
  DelayForwarder f(DelayMatrix::from_access_delays(access), 0);
  EXPECT_EQ(f.on_frame(0, frame(host(2), host(1), 7), 100), 2);
  EXPECT_EQ(f.stats().flooded, 1u);
  EXPECT_EQ(f.next_release_ns(), 100 + 3 * kMs);
  EXPECT_TRUE(drain(f, 100 + 3 * kMs - 1).empty());
  const auto sent = drain(f, 100 + 4 * kMs);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0], (Sent{1, 100 + 3 * kMs, 7, 60}));
  EXPECT_EQ(sent[1], (Sent{2, 100 + 4 * kMs, 7, 60}));
  EXPECT_EQ(f.next_release_ns(), kNever);
}

TEST(DelayForwarder, LearntDestinationGetsTheOnlyCopy) {
  DelayForwarder f(DelayMatrix::uniform(4, 10), 0);
  f.on_frame(2, frame(kBroadcast, host(3), 1), 0);  // ARP request from host 3 on port 2: flood
  EXPECT_EQ(drain(f, 10 * kMs).size(), 3u);
  EXPECT_EQ(f.on_frame(0, frame(host(3), host(1), 2), 50 * kMs), 1);  // the reply: port 2 only
  const auto sent = drain(f, 60 * kMs);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0], (Sent{2, 60 * kMs, 2, 60}));
  EXPECT_EQ(f.on_frame(2, frame(host(1), host(3), 3), 61 * kMs), 1);  // host 1 learnt on port 0
  EXPECT_EQ(drain(f, 71 * kMs), (std::vector<Sent>{{0, 71 * kMs, 3, 60}}));
  EXPECT_EQ(f.stats().flooded, 1u);
  EXPECT_EQ(f.stats().copies_released, 5u);
}

TEST(DelayForwarder, OnePairKeepsArrivalOrderAndPairsInterleaveByReleaseTime) {
  // Port 0 -> 1 is 30 ms, port 2 -> 1 is 5 ms: a later frame from port 2 overtakes.
  DelayForwarder f(DelayMatrix::parse("0 30 0\n30 0 5\n0 5 0\n", "m"), 0);
  f.on_frame(1, frame(kBroadcast, host(2), 0), 0);  // learn host 2 on port 1
  drain(f, 100 * kMs);
  for (std::uint8_t k = 0; k < 5; ++k)
    f.on_frame(0, frame(host(2), host(1), static_cast<std::uint8_t>(10 + k)), 200 * kMs);
  f.on_frame(2, frame(host(2), host(3), 99), 201 * kMs);
  const auto sent = drain(f, 1000 * kMs);
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(sent[0], (Sent{1, 206 * kMs, 99, 60}));
  for (std::uint8_t k = 0; k < 5; ++k)
    EXPECT_EQ(sent[1 + k], (Sent{1, 230 * kMs, static_cast<std::uint8_t>(10 + k), 60}));
}

TEST(DelayForwarder, PrefixBytesTravelWithTheFrame) {
  DelayForwarder f(DelayMatrix::uniform(2, 0), 10);  // a virtio_net_hdr in front
  EXPECT_EQ(f.on_frame(0, frame(host(2), host(1), 4, 10), 5), 1);
  std::vector<std::uint8_t> got;
  f.release_due(5, [&](int, std::span<const std::uint8_t> b, std::int64_t) {
    got.assign(b.begin(), b.end());
  });
  EXPECT_EQ(got, frame(host(2), host(1), 4, 10));
}

TEST(DelayForwarder, FramesBackToTheirOwnPortAndRuntsAreDropped) {
  DelayForwarder f(DelayMatrix::uniform(3, 1), 0);
  f.on_frame(0, frame(kBroadcast, host(1), 0), 0);
  f.on_frame(0, frame(kBroadcast, host(2), 0), 0);  // hosts 1 and 2 both on port 0
  drain(f, kMs);
  EXPECT_EQ(f.on_frame(0, frame(host(2), host(1), 1), 2 * kMs), 0);
  EXPECT_EQ(f.stats().dropped_same_port, 1u);
  EXPECT_EQ(f.on_frame(1, std::vector<std::uint8_t>(13, 0), 2 * kMs), 0);
  EXPECT_EQ(f.stats().dropped_malformed, 1u);
  EXPECT_EQ(f.queued(), 0u);
}

TEST(DelayForwarder, BuffersAreReusedAndExhaustionDrops) {
  ForwarderOptions o;
  o.small_slots = 2;
  o.large_slots = 1;
  o.small_slot_bytes = 128;
  o.large_slot_bytes = 1024;
  DelayForwarder f(DelayMatrix::uniform(3, 1), 0, o);
  EXPECT_EQ(f.free_buffers(), 3u);
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 1), 0), 2);  // one buffer, two copies
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 2), 0), 2);
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 3), 0), 0);           // small buffers used up
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 4, 0, 500), 0), 2);   // a large one
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 5, 0, 2000), 0), 0);  // larger than a slot
  EXPECT_EQ(f.stats().dropped_no_buffer, 1u);
  EXPECT_EQ(f.stats().dropped_malformed, 1u);
  EXPECT_EQ(f.free_buffers(), 0u);
  EXPECT_EQ(drain(f, kMs).size(), 6u);
  EXPECT_EQ(f.free_buffers(), 3u);  // every copy released: every buffer back
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 6), 2 * kMs), 2);
  EXPECT_EQ(f.stats().max_queued, 6u);
}

TEST(DelayForwarder, SinglePortForwardsNothing) {
  DelayForwarder f(DelayMatrix::uniform(1, 1), 0);
  EXPECT_EQ(f.on_frame(0, frame(kBroadcast, host(1), 1), 0), 0);
  EXPECT_EQ(f.next_release_ns(), kNever);
}

}  // namespace
}  // namespace meridian::netdelay
