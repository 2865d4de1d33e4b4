// deadline_after (engine/backends/common/deadline.h): bounded, and defined for every double.
#include "engine/backends/common/deadline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

namespace meridian {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_from_now(Clock::time_point t) {
  return std::chrono::duration<double>(t - Clock::now()).count();
}

TEST(Deadline, IsTheTimeoutFromNowWithinBounds) {
  EXPECT_NEAR(seconds_from_now(deadline_after(2.0)), 2.0, 0.5);
  EXPECT_LE(seconds_from_now(deadline_after(0.0)), 0.0);
  EXPECT_LE(seconds_from_now(deadline_after(-5.0)), 0.0);  // the past is now
  for (const double huge :
       {1e300, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(huge);
    EXPECT_NEAR(seconds_from_now(deadline_after(huge)), 1e7, 1.0);
  }
}

}  // namespace
}  // namespace meridian
