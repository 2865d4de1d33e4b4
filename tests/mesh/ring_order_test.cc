// Bottleneck-TSP ring order: equal to brute force on random matrices, edges, heuristic bounds.
#include "engine/core/mesh/ring_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "engine/core/error.h"

namespace meridian {
namespace {

BandwidthMatrix random_matrix(int n, std::mt19937_64& rng, int distinct) {
  std::uniform_int_distribution<int> value(1, distinct);
  BandwidthMatrix m(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) m[i][j] = 1e8 * value(rng);
  return m;
}

double brute_force(const BandwidthMatrix& m) {
  std::vector<int> order(m.size());
  std::iota(order.begin(), order.end(), 0);
  double best = -1;
  do {
    best = std::max(best, ring_bottleneck_bps(m, order));
  } while (std::next_permutation(order.begin() + 1, order.end()));
  return best;
}

bool is_permutation_from_zero(const std::vector<int>& order, int n) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> expect(n);
  std::iota(expect.begin(), expect.end(), 0);
  return sorted == expect && (n == 0 || order[0] == 0);
}

TEST(RingOrder, EqualsBruteForceOnRandomMatricesUpToNine) {
  std::mt19937_64 rng(20241121);
  for (int n = 2; n <= 9; ++n) {
    const int trials = n <= 7 ? 40 : 8;
    for (int t = 0; t < trials; ++t) {
      // Few distinct values make ties (many optimal rings); many make a unique optimum likely.
      const BandwidthMatrix m = random_matrix(n, rng, t % 2 == 0 ? 4 : 1000);
      const RingOrder r = bottleneck_ring_order(m);
      ASSERT_TRUE(is_permutation_from_zero(r.order, n));
      EXPECT_TRUE(r.exact);
      EXPECT_EQ(r.bottleneck_bps, ring_bottleneck_bps(m, r.order));
      EXPECT_EQ(r.bottleneck_bps, brute_force(m)) << "n=" << n << " trial=" << t;
    }
  }
}

TEST(RingOrder, UniformMatrixKeepsTheGivenOrder) {
  BandwidthMatrix m(5, std::vector<double>(5, 1e9));
  EXPECT_EQ(bottleneck_ring_order(m).order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(RingOrder, AvoidsTheSlowLinkWhenARingWithoutItExists) {
  // 0->1 is slow; the ring 0,2,1,3 avoids every slow link.
  BandwidthMatrix m(4, std::vector<double>(4, 10.0));
  m[0][1] = 1.0;
  m[1][2] = 1.0;
  const RingOrder r = bottleneck_ring_order(m);
  EXPECT_EQ(r.bottleneck_bps, 10.0);
  EXPECT_EQ(r.order, (std::vector<int>{0, 2, 1, 3}));
}

TEST(RingOrder, DirectionMatters) {
  // Only the ring 0->2->1->0 is fast; 0->1->2->0 uses the slow links.
  BandwidthMatrix m = {{0, 1, 9}, {9, 0, 1}, {1, 9, 0}};
  const RingOrder r = bottleneck_ring_order(m);
  EXPECT_EQ(r.order, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(r.bottleneck_bps, 9.0);
}

TEST(RingOrder, EdgeSizes) {
  EXPECT_TRUE(bottleneck_ring_order({}).order.empty());
  EXPECT_EQ(bottleneck_ring_order({{0}}).order, std::vector<int>{0});
  const RingOrder two = bottleneck_ring_order({{0, 3}, {5, 0}});
  EXPECT_EQ(two.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(two.bottleneck_bps, 3.0);
}

TEST(RingOrder, SixteenNodesIsExactAndBeyondIsAHeuristicRing) {
  std::mt19937_64 rng(7);
  const BandwidthMatrix m16 = random_matrix(16, rng, 50);
  const RingOrder r16 = bottleneck_ring_order(m16);
  EXPECT_TRUE(r16.exact);
  EXPECT_TRUE(is_permutation_from_zero(r16.order, 16));
  const BandwidthMatrix m20 = random_matrix(20, rng, 50);
  const RingOrder r20 = bottleneck_ring_order(m20);
  EXPECT_FALSE(r20.exact);
  EXPECT_TRUE(is_permutation_from_zero(r20.order, 20));
  EXPECT_EQ(r20.bottleneck_bps, ring_bottleneck_bps(m20, r20.order));
  // The heuristic never does worse than the identity ring.
  std::vector<int> identity(20);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_GE(r20.bottleneck_bps, ring_bottleneck_bps(m20, identity));
}

TEST(RingOrder, RejectsMalformedMatrices) {
  EXPECT_THROW(bottleneck_ring_order({{0, 1}, {1}}), ConfigError);
  EXPECT_THROW(bottleneck_ring_order({{0, -1}, {1, 0}}), ConfigError);
  EXPECT_THROW(bottleneck_ring_order({{0, std::numeric_limits<double>::quiet_NaN()}, {1, 0}}),
               ConfigError);
}

}  // namespace
}  // namespace meridian
