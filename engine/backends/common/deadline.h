// Deadlines on the steady clock for the transports' bounded waits (backends only: the engine
// proper takes its time from the Runtime).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>

namespace meridian {

// The steady-clock time `timeout_s` seconds from now. A negative timeout is now; NaN, infinity
// and anything beyond 10^7 s (about four months) are 10^7 s, so the arithmetic cannot overflow.
inline std::chrono::steady_clock::time_point deadline_after(double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const double s = std::isfinite(timeout_s) ? std::clamp(timeout_s, 0.0, 1e7) : 1e7;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace meridian
