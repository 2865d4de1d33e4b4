// TCP response functions and slow-start cost (see tcp_model.h).
#include "netsim/tcp_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace meridian::netsim {

CongestionControl parse_congestion_control(const std::string& name, const std::string& what) {
  if (name == "cubic") return CongestionControl::kCubic;
  if (name == "reno") return CongestionControl::kReno;
  if (name == "bbr") return CongestionControl::kBbr;
  throw ConfigError(what + ": expected one of cubic, reno, bbr, got '" + name + "'");
}

const char* to_string(CongestionControl cc) {
  switch (cc) {
    case CongestionControl::kCubic: return "cubic";
    case CongestionControl::kReno: return "reno";
    case CongestionControl::kBbr: return "bbr";
  }
  return "?";
}

double loss_limited_rate(CongestionControl cc, double mss_bytes, double rtt_s, double loss) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (loss <= 0 || rtt_s <= 0 || cc == CongestionControl::kBbr) return kInf;
  const double reno_segments = std::sqrt(1.5 / loss);  // per RTT (Mathis et al. 1997)
  double segments = reno_segments;
  if (cc == CongestionControl::kCubic) {
    constexpr double C = 0.4, beta = 0.7;  // RFC 9438 §4.1 and §4.6
    const double cubic_segments = std::pow(C * (3 + beta) / (4 * (1 - beta)), 0.25) *
                                  std::pow(rtt_s, 0.75) / std::pow(loss, 0.75);
    segments = std::max(cubic_segments, reno_segments);  // the Reno-friendly region (§4.3)
  }
  return segments * mss_bytes / rtt_s;
}

double window_after_idle(double cwnd_bytes, double idle_s, double rto_s, double initial_bytes) {
  if (rto_s <= 0 || idle_s <= rto_s) return cwnd_bytes;
  const double restart = std::min(initial_bytes, cwnd_bytes);
  // tcp_cwnd_restart: `while ((delta -= rto) > 0 && cwnd > restart) cwnd >>= 1;`
  double cwnd = cwnd_bytes;
  for (double delta = idle_s - rto_s; delta > 0 && cwnd > restart; delta -= rto_s) cwnd /= 2;
  return std::max(cwnd, restart);
}

double stable_rto(double rtt_s, double rto_min_s) { return rtt_s + rto_min_s; }

double slow_start_penalty(double bytes, double rate_Bps, double rtt_s, double cwnd0_bytes) {
  if (bytes <= 0 || rtt_s <= 0 || !(rate_Bps > 0) || !std::isfinite(rate_Bps) ||
      cwnd0_bytes <= 0)
    return 0;
  const double open_window = rate_Bps * rtt_s;  // the window that carries the rate
  // Rounds whose window is below the open window each take a full RTT; the bytes they carry
  // would have taken window/rate at the rate.
  double sent = 0, window = cwnd0_bytes, elapsed = 0;
  while (window < open_window) {
    if (sent + window >= bytes) {
      // The transfer ends in this round: its last bytes go out at the rate, after the RTTs of the
      // earlier rounds.
      elapsed += (bytes - sent) / rate_Bps;
      return std::max(0.0, elapsed - bytes / rate_Bps);
    }
    sent += window;
    elapsed += rtt_s;
    window *= 2;
  }
  elapsed += (bytes - sent) / rate_Bps;
  return std::max(0.0, elapsed - bytes / rate_Bps);
}

}  // namespace meridian::netsim
