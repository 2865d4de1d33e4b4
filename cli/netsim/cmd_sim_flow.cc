// `meridian sim-flow`: the simulator's prediction for one bulk transfer between two sites — the
// number the WAN validation tables (results/fidelity/) set against measured TCP goodput.
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "netsim/flow_probe.h"

namespace meridian::cli {
namespace {

bool boolean(const std::string& option, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw ConfigError(option + ": expected true or false, got '" + v + "'");
}

std::unique_ptr<Options> options(netsim::FlowProbe& p) {
  auto o = std::make_unique<Options>(
      "meridian sim-flow", std::vector<std::string>{"[options]"},
      "Simulates M messages of S bytes, each split over K parallel TCP connections, from a host "
      "on one site to a host on another, with netsim's WAN model (netsim/README.md, \"The WAN "
      "model\"). Prints one JSON line: seconds (first byte sent to last byte received, gaps "
      "excluded), bytes (delivered), goodput_mbit_per_s, rate_bound_mbit_per_s (the loss/cap "
      "bound of all K connections; null when none).");
  const auto boolean_into = [](bool& into) {
    return [&into](const std::string& n, const std::string& v) { into = boolean(n, v); };
  };
  o->number("--rtt-ms", "R", "round trip in ms (default 50)", p.rtt_ms)
      .value("--bandwidth-mbit", "B", "access links of B Mbit/s (default 1000)",
             [&p](const std::string& n, const std::string& v) {
               p.bandwidth_gbps = opt::number(n, v) / 1000;
             })
      .number("--loss", "P", "packet loss on the path (default 0)", p.loss)
      .integer("--bytes", "S", "bytes per message (default 64 MiB)", p.bytes, 0, ~std::uint64_t{0})
      .integer("--flows", "K", "parallel TCP connections per message (default 1)", p.flows, 0,
               1u << 30)
      .integer("--messages", "M", "messages (default 1)", p.messages, 0, 1u << 30)
      .value(
          "--gap-ms", "G", "ms idle between messages (default 0)",
          [&p](const std::string& n, const std::string& v) { p.gap_s = opt::number(n, v) / 1000; })
      .value("--cc", "cubic|reno|bbr", "congestion control (default cubic)",
             [&p](const std::string& n, const std::string& v) {
               netsim::parse_congestion_control(v, n);
               p.tcp.cc = v;
             })
      .number("--window-bytes", "W",
              "socket buffer per connection, bytes (default 4194304, Linux's tcp_wmem maximum)",
              p.window_bytes)
      .number("--mss-bytes", "B", "segment size (default 1448)", p.tcp.mss_bytes)
      .integer("--initial-window", "N", "initial window, segments (default 10)",
               p.tcp.initial_window_segments, 0, 1u << 30)
      .value("--slow-start-after-idle", "true|false",
             "restart the window after an idle gap (default true)",
             boolean_into(p.tcp.slow_start_after_idle))
      .number("--rto-min-ms", "T", "minimum retransmission timeout (default 200)", p.tcp.rto_min_ms)
      .number("--per-flow-cap-gbps", "C", "a bound on each connection's rate (default: none)",
              p.tcp.per_flow_cap_gbps)
      .value("--crosstraffic", "true|false", "SimGrid's reverse-path charge (default false)",
             boolean_into(p.crosstraffic))
      .number("--seconds", "T",
              "send for T seconds instead of M messages, as iperf -t does, and report what "
              "arrived in that time",
              p.duration_s);
  return o;
}

int run(const std::vector<std::string>& args) {
  netsim::FlowProbe p;
  options(p)->parse(args);
  std::cout << netsim::simulate_transfer(p).to_json().str() << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("sim-flow", "the simulator's prediction for one bulk TCP transfer",
                 help_of<netsim::FlowProbe>(options), run);

}  // namespace
}  // namespace meridian::cli
