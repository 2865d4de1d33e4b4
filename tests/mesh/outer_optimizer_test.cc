// Outer Nesterov SGD against hand-computed values, and bucketing of uneven layer groups.
#include "engine/core/diloco/outer_optimizer.h"

#include <gtest/gtest.h>

#include "engine/core/diloco/buckets.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

TEST(OuterOptimizer, NesterovMatchesHandComputedValuesExactly) {
  // lr 0.5 and momentum 0.5 are exact in binary, so every value below is exact.
  OuterOptimizer opt(2, {0.5f, 0.5f});
  std::vector<float> theta = {10.0f, -4.0f};
  // Step 1, g = (2, 4): buf = g = (2, 4); update = g + 0.5 buf = (3, 6); theta -= 0.5 update.
  opt.step(theta, std::vector<float>{2.0f, 4.0f});
  EXPECT_EQ(theta, (std::vector<float>{8.5f, -7.0f}));
  EXPECT_EQ(std::vector<float>(opt.momentum().begin(), opt.momentum().end()),
            (std::vector<float>{2.0f, 4.0f}));
  // Step 2, g = (4, -8): buf = 0.5*(2,4) + (4,-8) = (5, -6); update = (4,-8) + (2.5,-3)
  // = (6.5, -11); theta = (8.5 - 3.25, -7 + 5.5) = (5.25, -1.5).
  opt.step(theta, std::vector<float>{4.0f, -8.0f});
  EXPECT_EQ(theta, (std::vector<float>{5.25f, -1.5f}));
  EXPECT_EQ(std::vector<float>(opt.momentum().begin(), opt.momentum().end()),
            (std::vector<float>{5.0f, -6.0f}));
}

TEST(OuterOptimizer, DefaultsAreLr07Momentum09) {
  OuterOptimizer opt(1, {});
  EXPECT_EQ(opt.options().lr, 0.7f);
  EXPECT_EQ(opt.options().momentum, 0.9f);
  std::vector<float> theta = {1.0f};
  // Step 1, g = 1: buf = 1, update = 1 + 0.9 = 1.9, theta = 1 - 1.33 = -0.33.
  opt.step(theta, std::vector<float>{1.0f});
  EXPECT_NEAR(theta[0], -0.33f, 1e-6);
  // Step 2, g = 1: buf = 1.9, update = 1 + 1.71 = 2.71, theta = -0.33 - 1.897 = -2.227.
  opt.step(theta, std::vector<float>{1.0f});
  EXPECT_NEAR(opt.momentum()[0], 1.9f, 1e-6);
  EXPECT_NEAR(theta[0], -2.227f, 1e-6);
}

TEST(OuterOptimizer, EmptyIsANoOpAndSizesAreChecked) {
  OuterOptimizer opt(3, {});
  opt.step({}, {});
  std::vector<float> theta(2);
  EXPECT_THROW(opt.step(theta, std::vector<float>(2)), CheckError);
}

TEST(Buckets, UnevenLayerGroupsAndEmptyGroups) {
  const auto b = make_buckets({0, 3, 3, 10, 11}, 11);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].index, 0u);
  EXPECT_EQ(b[0].offset, 0u);
  EXPECT_EQ(b[0].count, 3u);
  EXPECT_EQ(b[1].index, 2u);  // group 1 is empty and skipped; indices are not reused
  EXPECT_EQ(b[1].offset, 3u);
  EXPECT_EQ(b[1].count, 7u);
  EXPECT_EQ(b[2].index, 3u);
  EXPECT_EQ(b[2].offset, 10u);
  EXPECT_EQ(b[2].count, 1u);
}

TEST(Buckets, RejectsBadBoundaries) {
  EXPECT_THROW(make_buckets({1, 5}, 5), ConfigError);
  EXPECT_THROW(make_buckets({0, 4}, 5), ConfigError);
  EXPECT_THROW(make_buckets({0, 4, 2, 5}, 5), ConfigError);
  EXPECT_THROW(make_buckets({0}, 0), ConfigError);
  EXPECT_THROW(shard_buckets({}, 0), ConfigError);
}

TEST(Buckets, ShardsCoverEveryBucketExactly) {
  const auto b = make_buckets({0, 7, 8, 20}, 20);
  const auto shards = shard_buckets(b, 3);
  ASSERT_EQ(shards.size(), 3u);
  // bucket 0 (7): 0..2, 2..4, 4..7; bucket 1 (1): only shard 2 gets it; bucket 2 (12): 4 each.
  std::vector<int> covered(20, 0);
  for (const auto& s : shards)
    for (const Bucket& piece : s)
      for (std::uint64_t i = piece.offset; i < piece.offset + piece.count; ++i) ++covered[i];
  EXPECT_EQ(covered, std::vector<int>(20, 1));
  EXPECT_EQ(shards[0].size(), 2u);
  EXPECT_EQ(shards[2].size(), 3u);
  EXPECT_EQ(shards[0][0].count, 2u);
  EXPECT_EQ(shards[2][0].count, 3u);
  EXPECT_EQ(shards[2][1].index, 1u);
  EXPECT_EQ(shards[1][1].offset, 12u);
}

}  // namespace
}  // namespace meridian
