// count_non_finite against a per-value std::isfinite over every length around its 64-value
// block, with NaN, +-Inf and the largest finite values placed in blocks and in the tail.
#include "engine/core/util/finite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace meridian {
namespace {

TEST(CountNonFinite, MatchesIsfiniteForEveryLengthAndPlacement) {
  std::mt19937 rng(11);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            -0.0f};
  for (std::size_t n = 0; n <= 200; ++n) {
    std::vector<float> v(n);
    for (float& x : v) x = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng);
    for (std::size_t k = 0; k < n / 7 + 1 && n > 0; ++k)
      v[rng() % n] = specials[rng() % std::size(specials)];
    std::uint64_t expected = 0;
    for (const float x : v) expected += !std::isfinite(x);
    EXPECT_EQ(count_non_finite(v), expected) << "length " << n;
  }
}

TEST(CountNonFinite, CountsEveryValueOfABufferOfNaN) {
  const std::vector<float> v(1000003, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(count_non_finite(v), v.size());
  EXPECT_EQ(count_non_finite(std::span(v).subspan(5, 64)), 64u);
}

}  // namespace
}  // namespace meridian
