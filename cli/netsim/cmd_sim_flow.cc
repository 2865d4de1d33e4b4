// `meridian sim-flow`: the simulator's prediction for one bulk transfer between two sites — the
// number the WAN validation tables (results/fidelity/) set against measured TCP goodput.
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "netsim/flow_probe.h"

namespace meridian::cli {
namespace {

constexpr char kUsage[] =
    "usage: meridian sim-flow [--rtt-ms R] [--bandwidth-mbit B] [--loss P] [--bytes S]\n"
    "                         [--flows K] [--messages M] [--gap-ms G] [--cc cubic|reno|bbr]\n"
    "                         [--window-bytes W] [--mss-bytes 1448] [--initial-window 10]\n"
    "                         [--slow-start-after-idle true|false] [--rto-min-ms 200]\n"
    "                         [--per-flow-cap-gbps C] [--crosstraffic true|false] [--seconds T]\n"
    "\n"
    "Simulates M messages of S bytes (default 1, 64 MiB), each split over K parallel TCP\n"
    "connections (default 1), from a host on one site to a host on another: R ms round trip\n"
    "(default 50), access links of B Mbit/s (default 1000), packet loss P on the path (default 0),\n"
    "G ms idle between messages (default 0), W bytes of socket buffer per connection (default\n"
    "4194304, Linux's tcp_wmem maximum), with netsim's WAN model (netsim/README.md, \"The WAN\n"
    "model\"). Prints one JSON line: seconds (first byte sent to last byte received, gaps\n"
    "excluded), bytes (delivered), goodput_mbit_per_s, rate_bound_mbit_per_s (the loss/cap\n"
    "bound of all K connections; null when none). --seconds T: send for T seconds instead, as\n"
    "iperf -t does, and report what arrived in that time.\n";

bool boolean(const std::string& option, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw ConfigError(option + ": expected true or false, got '" + v + "'");
}

int run(const std::vector<std::string>& args) {
  netsim::FlowProbe p;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto num = [&] { return opt::number(a, opt::value(args, i, kUsage)); };
    auto count = [&] { return opt::unsigned_integer(a, opt::value(args, i, kUsage)); };
    if (a == "--rtt-ms") p.rtt_ms = num();
    else if (a == "--bandwidth-mbit") p.bandwidth_gbps = num() / 1000;
    else if (a == "--loss") p.loss = num();
    else if (a == "--bytes") p.bytes = count();
    else if (a == "--flows") p.flows = static_cast<int>(count());
    else if (a == "--messages") p.messages = static_cast<int>(count());
    else if (a == "--gap-ms") p.gap_s = num() / 1000;
    else if (a == "--seconds") p.duration_s = num();
    else if (a == "--cc") {
      p.tcp.cc = opt::value(args, i, kUsage);
      netsim::parse_congestion_control(p.tcp.cc, "--cc");
    } else if (a == "--window-bytes") p.window_bytes = num();
    else if (a == "--mss-bytes") p.tcp.mss_bytes = num();
    else if (a == "--initial-window") p.tcp.initial_window_segments = static_cast<int>(count());
    else if (a == "--slow-start-after-idle")
      p.tcp.slow_start_after_idle = boolean(a, opt::value(args, i, kUsage));
    else if (a == "--rto-min-ms") p.tcp.rto_min_ms = num();
    else if (a == "--per-flow-cap-gbps") p.tcp.per_flow_cap_gbps = num();
    else if (a == "--crosstraffic") p.crosstraffic = boolean(a, opt::value(args, i, kUsage));
    else throw ConfigError("unknown option '" + a + "'\n" + kUsage);
  }
  std::cout << netsim::simulate_transfer(p).to_json().str() << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("sim-flow", "the simulator's prediction for one bulk TCP transfer", kUsage, run);

}  // namespace
}  // namespace meridian::cli
