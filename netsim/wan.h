// The WAN model: what a TCP connection gets on an inter-site path, applied to SimGrid's flows.
// SimGrid's CM02 shares link capacity max-min and caps a flow at window/RTT (network/TCP-gamma);
// this adds, per connection:
//  - the loss-limited rate of its congestion control and a provider's per-flow cap, as a
//    fat-pipe link on every route between two sites (a fat pipe bounds each flow on it
//    separately, so it is a per-flow rate bound applied by SimGrid's own sharing);
//  - slow start on a new connection and after idle (Linux's restart), as latency, through the
//    network model's latency-factor callback;
//  - the paths' variation in time: path changes (latency steps) and loss episodes, one seeded
//    timeline per site pair, read by the latency callback (a transfer gets the path's latency at
//    its start) and by the per-flow bound's bandwidth profile; and the available bandwidth of
//    shared site-pair links (a log-normal AR(1) profile). SimGrid profiles built from
//    callbacks, so a run never repeats.
// Formulas, parameters and sources: netsim/README.md, "The WAN model"; tcp_model.h.
#pragma once

#include <simgrid/forward.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/core/events/json.h"
#include "netsim/scenario.h"
#include "netsim/tcp_model.h"

namespace meridian::netsim {

struct Platform;

// One site pair's path in time: piecewise-constant one-way latency (path changes: a Poisson
// process, each new path adding an exponential fraction of the base RTT) and packet loss (its
// base loss, and episodes: a two-state Gilbert–Elliott process with exponential durations).
// Generated lazily, in time order, from a seeded state: the same seed gives the same path.
class PathTimeline {
 public:
  struct Segment {
    double start_s;
    double latency_s;  // one way
    double loss;
  };
  PathTimeline(double base_latency_s, double base_loss, const VariationSpec& v,
               std::uint64_t state);
  const Segment& segment(std::size_t i);  // i-th segment (generated on demand)
  const Segment& at(double t_s);          // the segment in force at t_s
  bool varies() const { return changes_ || episodes_; }

 private:
  void generate_next();
  double base_latency_s_, base_loss_;
  VariationSpec v_;
  bool changes_, episodes_;
  std::uint64_t state_;
  std::vector<Segment> segments_;
  double next_change_s_ = 0, episode_start_s_ = 0, episode_end_s_ = 0;
  bool in_episode_ = false;
  double latency_now_s_;
};

// A connection's rate bound on a path, bytes/s: its loss-limited rate and the per-flow cap;
// +inf when neither binds.
double connection_bound(CongestionControl cc, const TcpSpec& tcp, double rtt_s, double loss);

// Attaches an available-bandwidth process to a link before it is sealed: log-normal AR(1) of mean
// `capacity_Bps`, coefficient of variation `cv` and correlation time `correlation_s` (a shared
// site-pair link: network.variation.bandwidth_*; a node's access link: access_*). Seeded from
// `seed` and the link's name; nothing when cv or correlation_s is 0.
void attach_bandwidth_variation(simgrid::s4u::Link* link, double capacity_Bps, double cv,
                                double correlation_s, std::uint64_t seed);

class WanModel {
 public:
  // `connections_per_flow`: TCP connections one simulated flow stands for (aggregated ranks).
  // `lanes`: the parallel rings (local ranks) of a node, whose connections to one peer share its
  // links: a connection's steady rate, which its slow start climbs to, is its 1/`lanes` share of
  // a shared link (a fat pipe bounds each flow alone). Aggregated: lanes = connections_per_flow
  // (one flow per host pair); message level: connections_per_flow = 1 and a flow per lane.
  WanModel(const Scenario& sc, const Platform& pf, int connections_per_flow, int lanes);
  WanModel(const WanModel&) = delete;
  WanModel& operator=(const WanModel&) = delete;

  // Registers the slow-start latency callback on `e`'s network model.
  void install(simgrid::s4u::Engine& e);

  // Starts a transfer of `bytes` on lane `lane`'s connection from `src` to `dst` (each lane is
  // its own TCP connection, with its own window and idle time); call ended() with the same hosts
  // and lane when it completes, fails or is cancelled (the connection's idle time counts from
  // then). A flow SimGrid starts otherwise (the store's) is lane 0's.
  // A flow may stand for `messages` messages sent back to back on the connection: each pays the
  // path's one-way latency, and a slow start ramps during the first, of `first_message_bytes`
  // (0: all of `bytes`); from the second on the window is open, as it is message by message.
  simgrid::s4u::CommPtr start(simgrid::s4u::Host* src, simgrid::s4u::Host* dst, std::uint64_t bytes,
                              int lane = 0, std::uint64_t messages = 1,
                              std::uint64_t first_message_bytes = 0);
  void ended(simgrid::s4u::Host* src, simgrid::s4u::Host* dst, int lane = 0);

  double rtt_s(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst);
  // The rate bound of one simulated flow (all its connections) at `t_s`, bytes/s; +inf: none.
  double rate_bound(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst, double t_s);

  JsonObject to_json() const;  // the resolved model, for the run's config event
  // TCP connections one simulated flow stands for (their windows and loss bounds add up).
  int connections_per_flow() const { return connections_; }

 private:
  struct Connection {  // one ordered host pair and lane
    std::vector<simgrid::s4u::Link*> route;
    PathTimeline* path = nullptr;  // null within a site
    int in_flight = 0;
    double last_end_s = -1;  // < 0: never used
  };
  Connection& connection(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst,
                         int lane = 0);
  double loss(Connection& c, double t_s) const;
  double route_latency_s(Connection& c) const;  // one way, as built
  double path_change_s(Connection& c, double t_s) const;  // one way, added by a path change
  double latency_factor(double bytes, const simgrid::s4u::Host* src,
                        const simgrid::s4u::Host* dst);

  const Platform& pf_;
  TcpSpec tcp_;
  CongestionControl cc_;
  double gamma_bytes_;  // window per connection
  int connections_;
  int lanes_;
  std::map<std::tuple<const simgrid::s4u::Host*, const simgrid::s4u::Host*, int>, Connection>
      conns_;
  Connection* starting_ = nullptr;  // the connection of the transfer start() is starting
  double starting_messages_ = 1;        // the messages it stands for
  double starting_first_bytes_ = 0;     // its first message's bytes (0: the flow's size)
};

}  // namespace meridian::netsim
