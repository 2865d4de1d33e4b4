// Platform: the SimGrid hosts and links of a scenario. One full zone; every node has a
// split-duplex access link (its bandwidth is the node's "max available inter-node bandwidth"),
// and every pair of sites a fat-pipe backbone link whose latency is half the measured RTT.
// Not a topology discovery tool: the numbers come from the scenario and are echoed back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/events/json.h"
#include "netsim/scenario.h"

namespace simgrid::s4u {
class Engine;
class Host;
}  // namespace simgrid::s4u

namespace meridian::netsim {

class PathTimeline;

// Host slot names in scenario order: <site>-<index within the site>.
std::vector<std::string> host_slot_names(const Scenario& sc);

struct Platform {
  std::vector<std::string> names;  // one per host slot
  std::vector<std::string> sites;
  std::vector<simgrid::s4u::Host*> hosts;
  std::vector<double> access_gbps;  // resolved (drawn) access bandwidth
  std::vector<double> speed_factor;
  std::vector<bool> start;
  simgrid::s4u::Host* coordinator = nullptr;
  // Each host's site (the coordinator's too) and each site pair's path in time (netsim/wan.h),
  // keyed by the pair in name order (a site with itself: within the site).
  std::map<const simgrid::s4u::Host*, std::string> site_of;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<PathTimeline>> paths;

  int index_of(const std::string& name) const;
  PathTimeline* path_between(const simgrid::s4u::Host* a, const simgrid::s4u::Host* b) const;
  JsonObject to_json() const;
};

// Sets the network model, TCP window (× `gamma_scale`, for aggregated parallel flows) and
// crosstraffic on `e`. Must precede build_platform().
void configure_network(simgrid::s4u::Engine& e, const Scenario& sc, double gamma_scale);
// `connections_per_flow`: TCP connections one simulated flow stands for (aggregated local
// ranks): the per-flow bounds of the WAN model are that many connections' (netsim/wan.h).
Platform build_platform(simgrid::s4u::Engine& e, const Scenario& sc, int connections_per_flow = 1);

// Deterministic uniform [0, 1) from a 64-bit state (splitmix64): the same seed gives the same
// draws on every platform and standard library.
double unit_draw(std::uint64_t& state);

// The random state of one host's draws: keyed by the run's seed, the host's identity (its name,
// `<site>-<index>`) and what is drawn (`stream`), not by its slot in the scenario. The same
// host draws the same access bandwidth in every scenario that has it; hosts that another
// scenario lacks do not shift the others' draws (issue 18: slot-order draws gave three
// geographies the same first eight bandwidths, and so the same slowest node).
std::uint64_t host_draw_state(std::uint64_t seed, const std::string& host, std::uint64_t stream);

// A host's access bandwidth when its node group gives none: U[lo, hi] Gb/s, one draw from
// host_draw_state(seed, host, 0).
double drawn_access_gbps(std::uint64_t seed, const std::string& host, double lo, double hi);

}  // namespace meridian::netsim
