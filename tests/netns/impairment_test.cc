// Unit tests of netdelay's seeded loss and jitter (cli/netdelay/impairment.h) and of the forwarder
// applying them: measured loss rates and mean burst lengths against the parameters, determinism
// per seed, and in-order delivery under jitter. Fixed seeds, so each bound below is checked on one
// known sample; the bounds are 5 standard deviations of the estimate (stated per test), so a
// correct process with another seed would fail about once in 1.7 million.
#include "cli/netdelay/impairment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cli/netdelay/delay_forwarder.h"
#include "engine/core/error.h"

namespace meridian::netdelay {
namespace {

constexpr std::int64_t kMs = 1'000'000;

struct Runs {  // what a loss sequence looks like
  std::uint64_t packets = 0;
  std::uint64_t lost = 0;
  std::uint64_t bursts = 0;  // maximal runs of consecutive losses
  double rate() const { return static_cast<double>(lost) / static_cast<double>(packets); }
  double mean_burst() const { return static_cast<double>(lost) / static_cast<double>(bursts); }
};

Runs sample(const LossSpec& spec, std::uint64_t seed, std::uint64_t packets) {
  LossProcess p(spec, stream_state(seed, 0, 0));
  Runs r;
  bool previous = false;
  for (std::uint64_t k = 0; k < packets; ++k) {
    const bool lost = p.lose();
    r.lost += lost;
    r.bursts += lost && !previous;
    previous = lost;
  }
  r.packets = packets;
  return r;
}

LossSpec gilbert_elliott(double p_gb, double p_bg, double loss_good, double loss_bad) {
  LossSpec s;
  s.kind = LossSpec::Kind::kGilbertElliott;
  s.ge = GilbertElliott{p_gb, p_bg, loss_good, loss_bad};
  return s;
}

TEST(LossProcess, BernoulliRateMatchesP) {
  // 10^6 packets at p = 0.01: 10,000 losses expected, sd sqrt(N p (1 - p)) = 99.5, bound 5 sd.
  const Runs r = sample(parse_bernoulli_loss("0.01"), 7, 1'000'000);
  EXPECT_NEAR(static_cast<double>(r.lost), 10'000.0, 5 * 99.5);
  // Independent losses: runs of mean 1 / (1 - p) = 1.0101 (sd of the mean ~0.001; bound 0.01).
  EXPECT_NEAR(r.mean_burst(), 1.0 / 0.99, 0.01);
}

TEST(LossProcess, BernoulliEdges) {
  EXPECT_EQ(sample(parse_bernoulli_loss("0"), 1, 100'000).lost, 0u);
  EXPECT_EQ(sample(parse_bernoulli_loss("1"), 1, 100'000).lost, 100'000u);
  EXPECT_EQ(sample(LossSpec{}, 1, 1000).lost, 0u);  // no loss configured
}

TEST(LossProcess, GilbertBurstsHaveMeanLengthOneOverPbg) {
  // Gilbert's model: lose every packet in Bad, none in Good. p_gb = 0.001, p_bg = 0.1: mean loss
  // rate 0.001 / 0.101 = 0.0099, bursts of mean 10 packets. Over 10^7 packets, ~9,900 bursts:
  // the mean burst's sd is sqrt(1 - p_bg) / p_bg / sqrt(9900) = 0.095 (bound 5 sd = 0.48, 4.8 %);
  // the rate's relative sd is ~1.4 % (the count of Good/Bad cycles and their lengths; bound 7 %).
  const LossSpec spec = gilbert_elliott(0.001, 0.1, 0, 1);
  EXPECT_NEAR(spec.ge.mean_loss_rate(), 0.001 / 0.101, 1e-12);
  const Runs r = sample(spec, 11, 10'000'000);
  EXPECT_NEAR(r.mean_burst(), 10.0, 0.48);
  EXPECT_NEAR(r.rate(), 0.001 / 0.101, 0.07 * 0.001 / 0.101);
}

TEST(LossProcess, GilbertElliottRateMixesBothStates) {
  // p_gb = 0.01, p_bg = 0.2 (Bad 4.76 % of packets), loss 0.001 in Good and 0.3 in Bad: mean
  // (0.2 * 0.001 + 0.01 * 0.3) / 0.21 = 0.015238. 10^7 packets, ~47,600 Bad periods: relative sd
  // of the rate ~1 % (bound 5 %). A loss run in Bad has mean 1 / (1 - 0.3 * 0.8) = 1.32 packets,
  // longer than a Bernoulli process of the same rate gives (1.015).
  const LossSpec spec = gilbert_elliott(0.01, 0.2, 0.001, 0.3);
  const double expected = (0.2 * 0.001 + 0.01 * 0.3) / 0.21;
  EXPECT_NEAR(spec.ge.mean_loss_rate(), expected, 1e-12);
  const Runs r = sample(spec, 3, 10'000'000);
  EXPECT_NEAR(r.rate(), expected, 0.05 * expected);
  EXPECT_GT(r.mean_burst(), 1.2);
}

TEST(LossProcess, SameSeedSameDrawsAndStreamsDiffer) {
  const LossSpec spec = parse_gilbert_elliott_loss("0.01,0.3,0.001,0.5");
  LossProcess a(spec, stream_state(5, 2, 0)), b(spec, stream_state(5, 2, 0));
  LossProcess other_seed(spec, stream_state(6, 2, 0)), other_stream(spec, stream_state(5, 3, 0));
  int same = 0, differ_seed = 0, differ_stream = 0;
  for (int k = 0; k < 100'000; ++k) {
    const bool x = a.lose();
    same += x == b.lose();
    differ_seed += x != other_seed.lose();
    differ_stream += x != other_stream.lose();
  }
  EXPECT_EQ(same, 100'000);
  EXPECT_GT(differ_seed, 100);
  EXPECT_GT(differ_stream, 100);
}

TEST(LossProcess, BadParametersNameTheField) {
  const auto message = [](auto parse, const std::string& text) {
    try {
      parse(text);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(parse_bernoulli_loss, "1.5"),
            "--loss: expected a probability in [0, 1], got 1.5");
  EXPECT_EQ(message(parse_bernoulli_loss, "x"), "--loss: expected a probability, got 'x'");
  EXPECT_EQ(message(parse_gilbert_elliott_loss, "0.1,0.2,0"),
            "--loss-ge: expected p_gb,p_bg,loss_good,loss_bad (4 probabilities), got '0.1,0.2,0'");
  EXPECT_EQ(message(parse_gilbert_elliott_loss, "0.1,0,0,1"),
            "--loss-ge p_bg: expected > 0 (Bad would never end)");
  EXPECT_EQ(message(parse_gilbert_elliott_loss, "0.1,0.5,-1,1"),
            "--loss-ge loss_good: expected a probability in [0, 1], got -1");
}

TEST(Jitter, ExponentialWithTheGivenMean) {
  // 10^5 draws of mean 2 ms: the mean's sd is 2 ms / sqrt(10^5) = 6.3 us (bound 5 sd = 32 us);
  // an exponential's sd equals its mean (bound 3 %), and P(X > 2 mean) = e^-2 = 0.1353.
  Jitter j(2.0 * kMs, stream_state(1, 0, 1));
  const int n = 100'000;
  double sum = 0, sum_sq = 0;
  int above_twice = 0;
  for (int k = 0; k < n; ++k) {
    const double x = static_cast<double>(j.draw_ns());
    ASSERT_GE(x, 0);
    sum += x;
    sum_sq += x * x;
    above_twice += x > 4.0 * kMs;
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, 2.0 * kMs, 32'000);
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 2.0 * kMs, 0.03 * 2.0 * kMs);
  EXPECT_NEAR(above_twice / static_cast<double>(n), std::exp(-2.0), 0.006);  // 5 sd = 0.0054
  EXPECT_EQ(Jitter().draw_ns(), 0);
}

// Unicast frames from host 1 (port 0) to host 2 (port 1), each carrying its sequence number.
std::vector<std::uint8_t> numbered_frame(std::uint32_t seq) {
  std::vector<std::uint8_t> f{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00};
  f.resize(f.size() + 46);
  std::memcpy(f.data() + 14, &seq, sizeof seq);
  return f;
}

void learn_both(DelayForwarder& f) {  // one frame from each host, so port 0 -> 1 is unicast
  std::vector<std::uint8_t> from2 = numbered_frame(0);
  std::swap_ranges(from2.begin(), from2.begin() + 6, from2.begin() + 6);
  f.on_frame(1, from2, 0);
  f.on_frame(0, numbered_frame(0), 0);
  f.release_due(kNever - 1, [](int, std::span<const std::uint8_t>, std::int64_t) {});
}

struct Released {
  std::uint32_t seq;
  std::int64_t release_ns;
};

std::vector<Released> drain_numbered(DelayForwarder& f) {
  std::vector<Released> out;
  f.release_due(kNever - 1, [&](int port, std::span<const std::uint8_t> bytes, std::int64_t t) {
    EXPECT_EQ(port, 1);
    std::uint32_t seq = 0;
    std::memcpy(&seq, bytes.data() + 14, sizeof seq);
    out.push_back(Released{seq, t});
  });
  return out;
}

TEST(DelayForwarder, JitterKeepsOnePairsFramesInOrder) {
  // 5,000 frames 100 us apart (a 120 Mbit/s stream of MTU frames) with 10 ms delay and 2 ms mean
  // jitter: draws are far larger than the spacing, so without the FIFO rule most would overtake.
  ForwarderOptions o;
  o.impairments.jitter_mean_ms = 2;
  o.impairments.seed = 4;
  DelayForwarder f(DelayMatrix::uniform(2, 10), 0, o);
  learn_both(f);
  const std::int64_t t0 = 1'000 * kMs, gap = 100'000;
  for (std::uint32_t k = 1; k <= 5000; ++k)
    ASSERT_EQ(f.on_frame(0, numbered_frame(k), t0 + k * gap), 1);
  const std::vector<Released> out = drain_numbered(f);
  ASSERT_EQ(out.size(), 5000u);
  std::int64_t max_extra = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].seq, i + 1);  // arrival order
    const std::int64_t extra = out[i].release_ns - (t0 + (i + 1) * gap + 10 * kMs);
    EXPECT_GE(extra, 0);  // never before the configured delay
    if (i > 0) {
      EXPECT_GE(out[i].release_ns, out[i - 1].release_ns);
    }
    max_extra = std::max(max_extra, extra);
  }
  EXPECT_GT(max_extra, 10 * kMs);  // the draws did vary (P(one draw > 5 means) = e^-5 each)
}

TEST(DelayForwarder, SparseFramesSeeTheJitterDistribution) {
  // Frames 50 ms apart with 1 ms mean jitter: the FIFO rule binds only when a draw exceeds the
  // next one by 50 ms (probability e^-50), so the mean extra delay is the distribution's:
  // 2,000 draws, sd of the mean 1 ms / sqrt(2000) = 22 us, bound 5 sd = 0.11 ms.
  ForwarderOptions o;
  o.impairments.jitter_mean_ms = 1;
  DelayForwarder f(DelayMatrix::uniform(2, 5), 0, o);
  learn_both(f);
  double sum_extra = 0;
  for (std::uint32_t k = 1; k <= 2000; ++k) {
    const std::int64_t now = k * 50 * kMs;
    f.on_frame(0, numbered_frame(k), now);
    const std::vector<Released> out = drain_numbered(f);
    ASSERT_EQ(out.size(), 1u);
    sum_extra += static_cast<double>(out[0].release_ns - now - 5 * kMs);
  }
  EXPECT_NEAR(sum_extra / 2000, 1.0 * kMs, 0.11 * kMs);
}

TEST(DelayForwarder, LossDropsUnicastFramesNotFloods) {
  ForwarderOptions o;
  o.impairments.loss = parse_bernoulli_loss("0.02");
  o.impairments.seed = 9;
  DelayForwarder f(DelayMatrix::uniform(3, 1), 0, o);
  // Broadcasts (ARP) are flooded and never lost: 1,000 of them, two copies each.
  std::vector<std::uint8_t> broadcast = numbered_frame(0);
  std::fill(broadcast.begin(), broadcast.begin() + 6, 0xff);
  for (int k = 0; k < 1000; ++k) ASSERT_EQ(f.on_frame(0, broadcast, k), 2);
  EXPECT_EQ(f.stats().dropped_loss, 0u);
  learn_both(f);
  // 100,000 unicast frames at p = 0.02: 2,000 lost expected, sd 44.3, bound 5 sd.
  std::uint64_t queued = 0;
  for (std::uint32_t k = 0; k < 100'000; ++k) {
    queued += static_cast<std::uint64_t>(f.on_frame(0, numbered_frame(k), 1'000 * kMs + k));
    if (k % 1000 == 999) f.release_due(kNever - 1, [](int, auto, std::int64_t) {});
  }
  EXPECT_EQ(queued + f.stats().dropped_loss, 100'000u);
  EXPECT_NEAR(static_cast<double>(f.stats().dropped_loss), 2000.0, 5 * 44.3);

  // The same seed and frames drop the same frames.
  DelayForwarder g(DelayMatrix::uniform(3, 1), 0, o);
  for (int k = 0; k < 1000; ++k) g.on_frame(0, broadcast, k);
  learn_both(g);
  for (std::uint32_t k = 0; k < 100'000; ++k) {
    g.on_frame(0, numbered_frame(k), 1'000 * kMs + k);
    if (k % 1000 == 999) g.release_due(kNever - 1, [](int, auto, std::int64_t) {});
  }
  EXPECT_EQ(g.stats().dropped_loss, f.stats().dropped_loss);
}

}  // namespace
}  // namespace meridian::netdelay
