// The WAN model (netsim/tcp_model.h, netsim/wan.h, issue 18): the response functions and
// Linux's window rules as published, the simulated per-flow rate against them on a two-host
// platform, the path timelines, and per-host draws that do not depend on slot order.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "netsim/flow_probe.h"
#include "netsim/platform.h"
#include "netsim/scenario.h"
#include "netsim/tcp_model.h"
#include "netsim/wan.h"
#include "sim_test_util.h"

namespace meridian::netsim {
namespace {

constexpr double kMss = 1448;

TEST(TcpModel, RenoIsMathisEtAl) {
  for (double rtt : {0.01, 0.1, 0.25})
    for (double p : {1e-5, 1e-4, 1e-3})
      EXPECT_DOUBLE_EQ(loss_limited_rate(CongestionControl::kReno, kMss, rtt, p),
                       kMss / rtt * std::sqrt(1.5 / p));
}

TEST(TcpModel, CubicIsTheLargerOfItsWindowAndTheRenoFriendlyOne) {
  // RFC 9438: (C(3+β)/(4(1−β)))^(1/4) = (0.4 · 3.7 / 1.2)^(1/4) = 1.0538...
  const double k = std::pow(0.4 * 3.7 / 1.2, 0.25);
  // Long RTT, low loss: CUBIC's own window is the larger.
  const double rtt = 0.25, p = 1e-5;
  const double cubic = k * std::pow(rtt, 0.75) / std::pow(p, 0.75) * kMss / rtt;
  ASSERT_GT(cubic, kMss / rtt * std::sqrt(1.5 / p));
  EXPECT_NEAR(loss_limited_rate(CongestionControl::kCubic, kMss, rtt, p), cubic, cubic * 1e-12);
  // Short RTT, high loss: the Reno-friendly region.
  EXPECT_DOUBLE_EQ(loss_limited_rate(CongestionControl::kCubic, kMss, 0.001, 1e-2),
                   loss_limited_rate(CongestionControl::kReno, kMss, 0.001, 1e-2));
}

TEST(TcpModel, NothingBoundsBbrOrALosslessPath) {
  EXPECT_TRUE(std::isinf(loss_limited_rate(CongestionControl::kBbr, kMss, 0.1, 1e-3)));
  EXPECT_TRUE(std::isinf(loss_limited_rate(CongestionControl::kCubic, kMss, 0.1, 0)));
}

TEST(TcpModel, WindowAfterIdleFollowsLinuxTcpCwndRestart) {
  const double iw = 10 * kMss, rto = 0.3;
  EXPECT_EQ(window_after_idle(1e6, 0.29, rto, iw), 1e6);        // not idle for an RTO
  EXPECT_EQ(window_after_idle(1e6, 0.5, rto, iw), 0.5e6);       // one halving
  EXPECT_EQ(window_after_idle(1e6, 0.95, rto, iw), 0.125e6);    // 0.65, 0.35, 0.05 left: three
  EXPECT_EQ(window_after_idle(1e6, 100, rto, iw), iw);          // down to the restart window
  EXPECT_EQ(window_after_idle(5000, 100, rto, iw), 5000);       // never above the old window
  EXPECT_DOUBLE_EQ(stable_rto(0.1, 0.2), 0.3);
}

TEST(TcpModel, SlowStartPenaltyCountsTheRoundsBelowTheOpenWindow) {
  // Rate 1 MB/s, RTT 100 ms: the open window is 100 kB. From 10 kB: rounds of 10, 20, 40, 80 kB
  // (0.4 s for 150 kB), then 850 kB at the rate (0.85 s): 1.25 s against 1.0 s.
  EXPECT_NEAR(slow_start_penalty(1e6, 1e6, 0.1, 1e4), 0.25, 1e-12);
  // Ending within slow start: 25 kB = 10 kB (one RTT) + 15 kB at the rate.
  EXPECT_NEAR(slow_start_penalty(25e3, 1e6, 0.1, 1e4), 0.1 + 0.015 - 0.025, 1e-12);
  EXPECT_EQ(slow_start_penalty(5e3, 1e6, 0.1, 1e4), 0);   // fits the first window
  EXPECT_EQ(slow_start_penalty(1e6, 1e6, 0.1, 2e5), 0);   // the window is already open
}

FlowProbeResult probe_in_child(const FlowProbe& p) {
  const std::string out = testing::temp_path("probe.json");
  const int rc = testing::run_in_child([&] {
    const FlowProbeResult r = simulate_transfer(p);
    std::ofstream f(out);
    f.precision(17);
    f << r.seconds << " " << r.goodput_bps << " " << r.rate_bound_bps;
  });
  EXPECT_EQ(rc, 0);
  FlowProbeResult r;
  std::ifstream(out) >> r.seconds >> r.goodput_bps >> r.rate_bound_bps;
  std::remove(out.c_str());
  return r;
}

// The test: on a two-host platform the simulated flow gets the response function's rate
// within 2 %, over a grid of RTT × loss, for CUBIC and Reno, one and 8 connections.
TEST(WanFlow, RateMatchesTheResponseFunctionOnTwoHosts) {
  for (const char* cc : {"cubic", "reno"})
    for (double rtt_ms : {10.0, 50.0, 100.0, 250.0})
      for (double loss : {1e-5, 1e-4, 1e-3})
        for (int flows : {1, 8}) {
          FlowProbe p;
          p.tcp.cc = cc;
          p.rtt_ms = rtt_ms;
          p.loss = loss;
          p.flows = flows;
          p.bandwidth_gbps = 1000;      // the access links never bind
          p.window_bytes = 1ull << 34;  // nor does the window
          const double expected =
              flows * loss_limited_rate(parse_congestion_control(cc, "cc"), kMss, rtt_ms * 1e-3,
                                        loss);
          p.bytes = static_cast<std::uint64_t>(expected * 300);  // 300 s: latency is noise
          const FlowProbeResult r = probe_in_child(p);
          SCOPED_TRACE(std::string(cc) + " rtt " + std::to_string(rtt_ms) + " ms, loss " +
                       std::to_string(loss) + ", " + std::to_string(flows) + " flows");
          EXPECT_NEAR(r.goodput_bps / 8, expected, 0.02 * expected);
          EXPECT_NEAR(r.rate_bound_bps / 8, expected, 1e-9 * expected);
        }
}

TEST(WanFlow, SlowStartAfterIdleCostsTimeOnlyWhenTheKernelRestarts) {
  FlowProbe p;
  p.rtt_ms = 100;
  p.bandwidth_gbps = 0.1;
  p.bytes = 4u << 20;
  p.messages = 5;
  p.gap_s = 1.0;  // longer than the RTO (0.1 + 0.2 s)
  p.tcp.slow_start_after_idle = true;
  const double restarting = probe_in_child(p).seconds;
  p.tcp.slow_start_after_idle = false;
  const double kept = probe_in_child(p).seconds;
  p.gap_s = 0.05;  // shorter than the RTO: no restart either way
  p.tcp.slow_start_after_idle = true;
  const double short_gaps = probe_in_child(p).seconds;
  // Four restarts: the 1.25 MB window (100 Mbit/s × 100 ms) halved once per RTO (0.3 s) of the
  // 1 s idle beyond the first (three times), then slow start back up (0.2125 s more each).
  const double restart_window = window_after_idle(12.5e6 * 0.1, 1.0, 0.3, 10 * kMss);
  EXPECT_EQ(restart_window, 1.25e6 / 8);
  EXPECT_NEAR(restarting - kept, 4 * slow_start_penalty(4 << 20, 12.5e6, 0.1, restart_window),
              1e-6);
  EXPECT_GT(restarting - kept, 0.8);
  EXPECT_NEAR(short_gaps, kept, 1e-6);
}

// Aggregation (issue 23): K connections simulated as one flow (K× bytes, window and bound, the
// slow start of one connection on 1/K of the bytes up to its 1/K share of the access link) take
// the same time as K flows, each on its own connection with its own window and idle restart:
// 250 ms RTT, 8 MiB per connection, a restart after every 1 s gap, so that slow start climbs to
// the connection's share, bounded by the per-flow cap and then by the access link.
TEST(WanFlow, AggregatedConnectionsSlowStartLikeTheirFlowsOneByOne) {
  FlowProbe p;
  p.rtt_ms = 250;
  p.flows = 8;
  p.bytes = 64u << 20;
  p.messages = 3;
  p.gap_s = 1.0;
  for (const bool cap_binds : {true, false}) {
    SCOPED_TRACE(cap_binds ? "per-flow cap binds" : "access link binds");
    p.bandwidth_gbps = cap_binds ? 2 : 0.4;
    p.tcp.per_flow_cap_gbps = cap_binds ? 0.1 : 0;  // 8 × 0.1 Gb/s < 2 Gb/s
    p.aggregate = true;
    const FlowProbeResult agg = probe_in_child(p);
    p.aggregate = false;
    const FlowProbeResult lanes = probe_in_child(p);
    EXPECT_NEAR(agg.seconds, lanes.seconds, 0.01 * lanes.seconds);
    if (cap_binds) {
      EXPECT_NEAR(agg.rate_bound_bps, lanes.rate_bound_bps, 1e-9 * lanes.rate_bound_bps);
    }
    // Slow start is a good part of it: at the rate from the first byte each message would take
    // its bytes over the bottleneck (0.8 or 0.4 Gb/s) plus the 125 ms latency.
    const double open_s = 3 * (0.125 + 64.0 * (1 << 20) * 8 / (cap_binds ? 0.8e9 : 0.4e9));
    EXPECT_GT(lanes.seconds, open_s + 3 * 0.5);
  }
}

TEST(PathTimeline, SeededEpisodesAndPathChanges) {
  VariationSpec v;
  v.path_change_interval_s = 600;
  v.path_change_rtt_fraction = 0.1;
  v.loss_episode_interval_s = 300;
  v.loss_episode_s = 30;
  v.loss_episode_loss = 0.01;
  v.source = "test";
  PathTimeline a(0.05, 1e-5, v, 42), b(0.05, 1e-5, v, 42), c(0.05, 1e-5, v, 43);
  double in_episode = 0, latency_sum = 0;
  const int samples = 200000;
  bool differs = false;
  for (int i = 0; i < samples; ++i) {
    const double t = i * 5.0;  // 1e6 s
    const auto& sa = a.at(t);
    EXPECT_EQ(sa.loss, b.at(t).loss);
    EXPECT_EQ(sa.latency_s, b.at(t).latency_s);
    differs |= sa.loss != c.at(t).loss;
    in_episode += sa.loss == 0.01;
    latency_sum += sa.latency_s;
    EXPECT_TRUE(sa.loss == 1e-5 || sa.loss == 0.01);
    EXPECT_GE(sa.latency_s, 0.05);
  }
  EXPECT_TRUE(differs);
  // Long-run fractions: 30 / (300 + 30) of the time in an episode, mean extra latency 10 %.
  EXPECT_NEAR(in_episode / samples, 30.0 / 330, 0.01);
  EXPECT_NEAR(latency_sum / samples / 0.05, 1.1, 0.02);
  // Looking back is allowed.
  EXPECT_EQ(a.at(10.0).loss, b.at(10.0).loss);
}

TEST(HostDraws, ScenariosThatShareSitesButNotNodesDrawIndependently) {
  // A host's draw is keyed by its name: adding a group before it does not move it, and two
  // hosts at the same slot of two scenarios draw differently.
  const double us0 = drawn_access_gbps(1, "us-east-0", 0.5, 4.0);
  const double eu0 = drawn_access_gbps(1, "eu-west-0", 0.5, 4.0);
  EXPECT_NE(us0, eu0);
  const char* a = "run: {name: a}\nnetwork:\n  sites: [{name: us-east}, {name: eu-west}]\n"
                  "  rtt: [{a: us-east, b: eu-west, ms: 80, source: t}]\n"
                  "  nodes: [{site: us-east, count: 2}]\n";
  const char* b = "run: {name: b}\nnetwork:\n  sites: [{name: us-east}, {name: eu-west}]\n"
                  "  rtt: [{a: us-east, b: eu-west, ms: 80, source: t}]\n"
                  "  nodes: [{site: eu-west, count: 2}, {site: us-east, count: 2}]\n";
  const auto na = host_slot_names(parse_scenario(a, "a"));
  const auto nb = host_slot_names(parse_scenario(b, "b"));
  ASSERT_EQ(na[0], "us-east-0");
  ASSERT_EQ(nb[0], "eu-west-0");
  ASSERT_EQ(nb[2], "us-east-0");
  EXPECT_NE(drawn_access_gbps(1, na[0], 0.5, 4.0), drawn_access_gbps(1, nb[0], 0.5, 4.0));
  EXPECT_EQ(drawn_access_gbps(1, na[0], 0.5, 4.0), drawn_access_gbps(1, nb[2], 0.5, 4.0));
}

}  // namespace
}  // namespace meridian::netsim
