// Phantom ring rounds timed whole (SimTransport::run_phantom_rings, phantom_ring_rounds) against
// the same rounds message by message (ring_all_reduce per round), on a platform where the
// argument for their equality holds: a constant network (no WAN processes) whose ring flows share
// no link. Three sites (1 ms within, 60 and 180 ms between), every node its own access bandwidth
// (0.5 to 4 Gb/s), ranks entering the first round at different times, six rounds of different
// sizes run back to back: every rank's start and end of every round must agree, eager and with
// a rendezvous of one or two trips. Then the error
// paths: a node that dies in the middle, a rank that never comes, ranks that disagree on sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "netsim/platform.h"
#include "netsim/scenario.h"
#include "netsim/sim_runtime.h"
#include "netsim/sim_transport.h"
#include "netsim/wait_list.h"
#include "tests/netsim/sim_test_util.h"

namespace meridian::netsim {
namespace {

namespace sg4 = simgrid::s4u;

constexpr int kNodes = 12;
const std::vector<std::size_t> kCounts = {3'000'000, 48'000, 12'000'000, 700'000, 5'000'000, 2'000};

Scenario three_sites() {
  std::string nodes;
  const char* sites[] = {"a", "b", "c"};
  for (int i = 0; i < kNodes; ++i)
    nodes += std::string(i ? ", " : "") + "{site: " + sites[i / 4] +
             ", count: 1, bandwidth_gbps: " + std::to_string(0.5 + 0.3 * ((i * 7) % kNodes)) + "}";
  const std::string yaml =
      "network:\n  model: CM02\n  crosstraffic: false\n  tcp_gamma_bytes: 1.0e12\n"
      "  intra_site_rtt_ms: 1.0\n  sites: [{name: a}, {name: b}, {name: c}]\n"
      "  rtt: [{a: a, b: b, ms: 60, source: test}, {a: b, b: c, ms: 180, source: test},"
      " {a: a, b: c, ms: 120, source: test}]\n"
      "  nodes: [" +
      nodes + "]\n";
  return parse_scenario(yaml, "three_sites.yaml");
}

// What each rank saw, per round: start and end (simulated s), and how it ended.
struct Outcome {
  std::vector<double> start, end;
  std::string error;   // empty: completed
  double error_s = 0;  // when it was raised
};

enum class Mode { kMessages, kWhole };

// Runs the rounds on every rank (rank r enters at 0.37 r s); `disturb` runs in its own actor.
std::vector<Outcome> run(Mode mode, const std::vector<std::vector<std::size_t>>& counts,
                         const std::function<void(Platform&, SimNetwork&)>& disturb = {},
                         int absent = -1, int segments = 1, int rendezvous_trips = 0) {
  const std::string out = testing::temp_path(mode == Mode::kWhole ? "whole" : "messages");
  const int rc = testing::run_in_child([&] {
    int argc = 2;
    char a0[] = "test", a1[] = "--log=root.thresh:critical";
    char* argv[] = {a0, a1, nullptr};
    sg4::Engine e(&argc, argv);
    const Scenario sc = three_sites();
    configure_network(e, sc, 1.0);
    Platform pf = build_platform(e, sc);
    // As in a simulation: wake-ups go through a notifier on a host that never fails (host 0
    // here), so that an actor killed with its host cannot lose them (netsim/wait_list.h).
    start_notifier(pf.hosts[0]);
    SimNetwork net;
    net.set_merge_phantom_rings(mode == Mode::kWhole, segments);
    net.set_rendezvous_trips(rendezvous_trips);
    std::vector<std::int64_t> members;
    for (int i = 0; i < kNodes; ++i) {
      net.add_node(i, pf.hosts[i]);
      members.push_back(i);
    }
    std::vector<Outcome> outcomes(kNodes);
    const auto codec = make_codec(CodecId::kInt8Prime);
    for (int r = 0; r < kNodes; ++r) {
      if (r == absent) continue;
      sg4::Actor::create("rank" + std::to_string(r), pf.hosts[r], [&, r] {
        SimRuntime rt(pf.hosts[r]);
        auto t = net.connect(testing::ring_epoch(r, members, 60.0));
        sg4::this_actor::sleep_for(0.37 * r);
        std::vector<RingOptions> options;
        for (std::size_t b = 0; b < counts[r].size(); ++b) {
          RingOptions o;
          o.bucket = static_cast<std::uint32_t>(b);
          o.max_chunk_bytes = std::size_t{1} << 30;  // one piece per share
          o.timeout_s = 30;
          options.push_back(o);
        }
        Outcome& mine = outcomes[r];
        try {
          if (mode == Mode::kWhole) {
            const auto whole = phantom_ring_rounds(*t, rt, *codec, counts[r], options);
            if (!whole || whole->size() != counts[r].size())
              throw std::runtime_error("not timed whole");
            for (const auto& w : *whole) {
              mine.start.push_back(w.start_s);
              mine.end.push_back(w.start_s + w.stats.elapsed_s);
            }
          } else {
            for (std::size_t b = 0; b < counts[r].size(); ++b) {
              mine.start.push_back(rt.now_s());
              ring_all_reduce(*t, rt, *codec, ReduceBuffer::phantom(counts[r][b]), options[b]);
              mine.end.push_back(rt.now_s());
            }
          }
        } catch (const PeerLostError& x) {
          mine.error = std::string("PeerLostError: ") + x.what();
        } catch (const TimeoutError& x) {
          mine.error = std::string("TimeoutError: ") + x.what();
        } catch (const ProtocolError& x) {
          mine.error = std::string("ProtocolError: ") + x.what();
        }
        mine.error_s = rt.now_s();
      });
    }
    if (disturb) sg4::Actor::create("disturb", pf.hosts[0], [&] { disturb(pf, net); })->daemonize();
    e.run();
    std::ofstream f(out);
    f.precision(17);
    for (const Outcome& o : outcomes) {
      f << o.start.size();
      for (std::size_t b = 0; b < o.start.size(); ++b) f << ' ' << o.start[b] << ' ' << o.end[b];
      f << ' ' << o.error_s << '\n' << (o.error.empty() ? "-" : o.error) << '\n';
    }
  });
  EXPECT_EQ(rc, 0);
  std::ifstream in(out);
  std::vector<Outcome> outcomes(kNodes);
  for (Outcome& o : outcomes) {
    std::size_t n = 0;
    in >> n;
    o.start.resize(n);
    o.end.resize(n);
    for (std::size_t b = 0; b < n; ++b) in >> o.start[b] >> o.end[b];
    in >> o.error_s;
    in.ignore();
    std::getline(in, o.error);
    if (o.error == "-") o.error.clear();
  }
  return outcomes;
}

std::vector<std::vector<std::size_t>> same_counts() {
  return std::vector<std::vector<std::size_t>>(kNodes, kCounts);
}

// Every rank's start and end of every round, timed whole with 1 and 4 flows per round, against
// message level; `trips`: the rendezvous's control trips (0: eager).
void expect_whole_matches_messages(int trips) {
  const auto messages = run(Mode::kMessages, same_counts(), {}, -1, 1, trips);
  double last = 0, worst = 0, first_end = 1e300;
  for (int segments : {1, 4}) {
    const auto whole = run(Mode::kWhole, same_counts(), {}, -1, segments, trips);
    for (int r = 0; r < kNodes; ++r) {
      ASSERT_EQ(messages[r].error, "") << "rank " << r;
      ASSERT_EQ(whole[r].error, "") << "rank " << r;
      ASSERT_EQ(whole[r].end.size(), kCounts.size());
      for (std::size_t b = 0; b < kCounts.size(); ++b) {
        const double length = messages[r].end[b] - messages[r].start[b];
        EXPECT_NEAR(whole[r].start[b], messages[r].start[b], 1e-3 * length)
            << "rank " << r << " round " << b << ", " << segments << " flows per round";
        EXPECT_NEAR(whole[r].end[b], messages[r].end[b], 1e-3 * length)
            << "rank " << r << " round " << b << ", " << segments << " flows per round";
        worst = std::max(worst, std::abs(whole[r].end[b] - messages[r].end[b]));
      }
      last = std::max(last, messages[r].end.back());
      first_end = std::min(first_end, messages[r].end.back());
    }
  }
  // Not a trivial agreement: the rounds took seconds, and the ranks did not end together.
  EXPECT_GT(last - messages[0].start[0], 10.0);
  EXPECT_GT(last - first_end, 1e-2);
  std::printf("%d rendezvous trips: last end %.4f s; largest difference %.2e s\n", trips, last,
              worst);
}

TEST(PhantomRings, TimedWholeTheyStartAndEndWhereMessageByMessageTheyDo) {
  expect_whole_matches_messages(0);
}

// With a rendezvous (Gloo's receive-ready notice: one trip; two as Meridian's former credit
// transport) each send waits for its successor's receive and the trips: the same recurrence
// with that wait, and every start and end again as message by message.
TEST(PhantomRings, WithARendezvousTheyStillStartAndEndWhereMessageByMessageTheyDo) {
  for (int trips : {1, 2}) expect_whole_matches_messages(trips);
}

TEST(PhantomRings, ANodeDyingInTheMiddleFailsEveryRankWithPeerLostAsPromptly) {
  const auto kill = [](Platform& pf, SimNetwork& net) {
    sg4::this_actor::sleep_for(8);  // the rounds run from 0 to about 16 s
    pf.hosts[5]->turn_off();
    net.node_failed(5);
  };
  const auto whole = run(Mode::kWhole, same_counts(), kill);
  const auto messages = run(Mode::kMessages, same_counts(), kill);
  double whole_last = 0, messages_last = 0;
  for (int r = 0; r < kNodes; ++r) {
    if (r == 5) continue;
    EXPECT_EQ(whole[r].error.rfind("PeerLostError", 0), 0u)
        << "rank " << r << ": " << whole[r].error;
    EXPECT_EQ(messages[r].error.rfind("PeerLostError", 0), 0u)
        << "rank " << r << ": " << messages[r].error;
    whole_last = std::max(whole_last, whole[r].error_s);
    messages_last = std::max(messages_last, messages[r].error_s);
  }
  // Every survivor knows by the time it would message by message (there: at the end of the
  // message it is sending), not at the end of its round's flow.
  EXPECT_GE(whole_last, 8.0);
  EXPECT_LE(whole_last, messages_last + 1e-6);
  std::printf("last survivor fails at %.4f s timed whole, %.4f s message by message\n", whole_last,
              messages_last);
}

TEST(PhantomRings, ARankThatNeverComesTimesTheOthersOut) {
  // The first rank to wait a timeout for it gives up and aborts; the others then fail at once
  // with PeerLostError naming that rank, as message by message.
  const auto outcomes = run(Mode::kWhole, same_counts(), {}, /*absent=*/7);
  int timed_out = 0;
  for (int r = 0; r < kNodes; ++r) {
    if (r == 7) continue;
    const std::string& e = outcomes[r].error;
    if (e.rfind("TimeoutError", 0) == 0) {
      ++timed_out;
      EXPECT_NE(e.find("1 of 12 ranks did not join within 30"), std::string::npos) << e;
    } else {
      EXPECT_EQ(e.rfind("PeerLostError", 0), 0u) << "rank " << r << ": " << e;
    }
  }
  EXPECT_GE(timed_out, 1);
}

TEST(PhantomRings, ARankWithOtherSizesIsNamedByItsSuccessor) {
  auto counts = same_counts();
  counts[3][2] += 10 * kNodes;  // rank 3's third round is larger than everyone else's
  const auto outcomes = run(Mode::kWhole, counts);
  EXPECT_EQ(outcomes[4].error.rfind("ProtocolError", 0), 0u) << outcomes[4].error;
  EXPECT_NE(outcomes[4].error.find("rank 3 sent"), std::string::npos) << outcomes[4].error;
}

}  // namespace
}  // namespace meridian::netsim
