// What one TCP connection achieves on a path, from published response functions: the bounds that
// SimGrid's flow model (CM02: max-min sharing, window/RTT cap) lacks. Pure functions of the path
// and the sender's settings; netsim/wan.h applies them to SimGrid's flows. Formulas and sources:
// netsim/README.md, "The WAN model".
#pragma once

#include <string>

#include "engine/config/run_file.h"

namespace meridian::netsim {

enum class CongestionControl { kCubic, kReno, kBbr };

// "cubic", "reno", "bbr"; anything else is a ConfigError naming `what`.
CongestionControl parse_congestion_control(const std::string& name, const std::string& what);
const char* to_string(CongestionControl cc);

// The sender's TCP settings: the run file's network.tcp (engine/config/run_file.h), Linux's
// defaults with their sources.
using config::TcpSpec;

// Steady-state rate of one connection with random loss `loss` (per packet), in bytes/s;
// +infinity when nothing loss-related bounds it (loss 0, or BBR).
//  - Reno: Mathis, Semke, Mahdavi, Ott (1997): MSS/RTT · sqrt(3/(2p)).
//  - CUBIC: RFC 9438 §5.1/§4.3: the larger of CUBIC's average window
//    (C(3+β)/(4(1−β)))^(1/4) · RTT^(3/4) / p^(3/4) (C = 0.4, β = 0.7) and its Reno-friendly
//    window sqrt(3/(2p)), in segments per RTT.
//  - BBR (v1, Linux's tcp_bbr): paces at its measured delivery rate and does not react to random
//    loss below about 20 % (Cardwell et al., ACM Queue 2016): no loss bound.
double loss_limited_rate(CongestionControl cc, double mss_bytes, double rtt_s, double loss);

// Linux's congestion window after `idle_s` without data in flight (tcp_cwnd_restart, RFC 2861):
// once idle_s > rto_s the window is halved once per RTO elapsed beyond the first, down to the
// restart window min(initial window, cwnd).
double window_after_idle(double cwnd_bytes, double idle_s, double rto_s, double initial_bytes);

// The retransmission timeout Linux settles on for a stable RTT: SRTT + max(4·RTTVAR, RTO_min),
// with RTTVAR → 0 (tcp_set_rto; RFC 6298 §2).
double stable_rto(double rtt_s, double rto_min_s);

// Extra time slow start costs a transfer of `bytes`, compared with sending it at `rate_Bps`
// from the first byte (what the flow model charges): the window starts at `cwnd0_bytes` and
// doubles every RTT until it carries `rate_Bps` (window = rate × RTT), after which the transfer
// goes at that rate (Cardwell, Savage, Anderson, "Modeling TCP latency", INFOCOM 2000, without
// delayed ACKs or loss in slow start). 0 when the window is already open.
double slow_start_penalty(double bytes, double rate_Bps, double rtt_s, double cwnd0_bytes);

}  // namespace meridian::netsim
