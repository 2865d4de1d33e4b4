// One transfer on a two-site world (see flow_probe.h).
#include "netsim/flow_probe.h"

#include <cmath>
#include <limits>
#include <simgrid/s4u.hpp>
#include <vector>

#include "engine/core/error.h"
#include "netsim/platform.h"
#include "netsim/scenario.h"
#include "netsim/wan.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

JsonObject FlowProbeResult::to_json() const {
  JsonObject j;
  j.add("seconds", seconds).add("bytes", bytes).add("goodput_mbit_per_s", goodput_bps / 1e6);
  if (std::isfinite(rate_bound_bps))
    j.add("rate_bound_mbit_per_s", rate_bound_bps / 1e6);
  else
    j.add_raw("rate_bound_mbit_per_s", "null");
  return j;
}

FlowProbeResult simulate_transfer(const FlowProbe& probe) {
  if (!(probe.rtt_ms >= 0) || !(probe.bandwidth_gbps > 0) || !(probe.loss >= 0 && probe.loss < 0.5) ||
      probe.bytes == 0 || probe.flows < 1 || probe.messages < 1 || !(probe.gap_s >= 0) ||
      !(probe.window_bytes > 0) || !(probe.duration_s >= 0))
    throw ConfigError("sim-flow: expected rtt >= 0, bandwidth > 0, loss in [0, 0.5), bytes > 0, "
                      "flows >= 1, messages >= 1, gap >= 0, window > 0, duration >= 0");
  Scenario sc;
  sc.file = "sim-flow";
  sc.run.name = "sim-flow";
  NetworkSpec& n = sc.network;
  n.sites = {{"src", "sender"}, {"dst", "receiver"}};
  n.rtt = {{"src", "dst", std::max(probe.rtt_ms, 1e-6), "sim-flow --rtt-ms"}};
  n.paths = {{"src", "dst", probe.loss, 0.0, "sim-flow --loss"}};
  n.nodes = {NodeGroup{"src", 1, true, probe.bandwidth_gbps, 1.0},
             NodeGroup{"dst", 1, true, probe.bandwidth_gbps, 1.0}};
  n.coordinator_site = "src";
  n.tcp_gamma_bytes = probe.window_bytes;
  n.crosstraffic = probe.crosstraffic;
  n.tcp = probe.tcp;

  int argc = 2;
  char arg0[] = "meridian", arg1[] = "--log=root.thresh:critical";
  char* argv[] = {arg0, arg1, nullptr};
  sg4::Engine e(&argc, argv);
  // K parallel connections as one flow of K× window and K× rate bound, as a scenario's
  // aggregated local ranks are (their slow start is the same per connection), or as K flows,
  // each on its own connection (lane).
  const int per_flow = probe.aggregate ? probe.flows : 1;
  const int lanes = probe.aggregate ? 1 : probe.flows;
  configure_network(e, sc, per_flow);
  const Platform pf = build_platform(e, sc, per_flow);
  WanModel wan(sc, pf, per_flow, probe.flows);
  wan.install(e);
  // Starts one message (bytes over all connections) on every lane; `ended` closes them.
  auto start = [&](double bytes) {
    std::vector<sg4::CommPtr> comms;
    for (int lane = 0; lane < lanes; ++lane)
      comms.push_back(
          wan.start(pf.hosts[0], pf.hosts[1], static_cast<std::uint64_t>(bytes / lanes), lane));
    return comms;
  };
  auto ended = [&] {
    for (int lane = 0; lane < lanes; ++lane) wan.ended(pf.hosts[0], pf.hosts[1], lane);
  };

  FlowProbeResult r;
  r.rate_bound_bps = wan.rate_bound(pf.hosts[0], pf.hosts[1], 0) * 8 * lanes;
  if (probe.duration_s > 0) {
    // Time-limited, as iperf's -t: one transfer larger than the path can carry in the time, and
    // what has arrived when the time is up.
    const double most = probe.bandwidth_gbps * 1e9 / 8 * probe.duration_s * 2 + 1e6;
    sg4::Actor::create("sender", pf.hosts[0], [&] {
      auto comms = start(most);
      sg4::this_actor::sleep_for(probe.duration_s);
      r.bytes = 0;
      for (auto& c : comms) {
        r.bytes += most / lanes - c->get_remaining();
        c->cancel();
      }
      ended();
    });
    e.run();
    r.seconds = probe.duration_s;
    r.goodput_bps = r.bytes * 8 / r.seconds;
    return r;
  }
  sg4::Actor::create("sender", pf.hosts[0], [&] {
    for (int m = 0; m < probe.messages; ++m) {
      if (m > 0 && probe.gap_s > 0) sg4::this_actor::sleep_for(probe.gap_s);
      const double t0 = sg4::Engine::get_clock();
      for (auto& c : start(static_cast<double>(probe.bytes))) c->wait();
      ended();
      r.seconds += sg4::Engine::get_clock() - t0;
    }
  });
  e.run();
  r.bytes = double(probe.bytes) * probe.messages;
  r.goodput_bps = r.bytes * 8 / r.seconds;
  return r;
}

}  // namespace meridian::netsim
