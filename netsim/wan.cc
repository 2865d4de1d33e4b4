// The WAN model (see wan.h): per-connection TCP bounds on SimGrid flows, and path processes.
#include "netsim/wan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <simgrid/kernel/ProfileBuilder.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u.hpp>

#include "engine/core/error.h"
#include "netsim/platform.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;
using simgrid::kernel::profile::DatedValue;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kProfileChunk = 256;  // values a profile callback appends at a time

double exponential_draw(std::uint64_t& state, double mean) {
  return -mean * std::log1p(-unit_draw(state));  // unit_draw is in [0, 1)
}

double normal_draw(std::uint64_t& state) {  // Box–Muller, from the portable uniform draws
  const double u1 = 1.0 - unit_draw(state), u2 = unit_draw(state);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

PathTimeline::PathTimeline(double base_latency_s, double base_loss, const VariationSpec& v,
                           std::uint64_t state)
    : base_latency_s_(base_latency_s),
      base_loss_(base_loss),
      v_(v),
      changes_(v.paths_change() && base_latency_s > 0),
      episodes_(v.loss_episodes()),
      state_(state),
      latency_now_s_(base_latency_s) {
  segments_.push_back({0.0, base_latency_s, base_loss});
  next_change_s_ = changes_ ? exponential_draw(state_, v_.path_change_interval_s) : kInf;
  episode_start_s_ = episodes_ ? exponential_draw(state_, v_.loss_episode_interval_s) : kInf;
  episode_end_s_ = episode_start_s_ + (episodes_ ? exponential_draw(state_, v_.loss_episode_s) : 0);
}

void PathTimeline::generate_next() {
  const bool in_episode = in_episode_;
  const double t_episode = in_episode ? episode_end_s_ : episode_start_s_;
  double t = 0;
  bool now_in_episode = in_episode;
  if (next_change_s_ <= t_episode) {
    t = next_change_s_;
    latency_now_s_ = base_latency_s_ * (1 + exponential_draw(state_, v_.path_change_rtt_fraction));
    next_change_s_ += exponential_draw(state_, v_.path_change_interval_s);
  } else {
    t = t_episode;
    now_in_episode = !in_episode;
    if (!now_in_episode) {  // the episode ended: draw the next one
      episode_start_s_ = t + exponential_draw(state_, v_.loss_episode_interval_s);
      episode_end_s_ = episode_start_s_ + exponential_draw(state_, v_.loss_episode_s);
    }
  }
  in_episode_ = now_in_episode;
  const double loss = now_in_episode ? std::max(base_loss_, v_.loss_episode_loss) : base_loss_;
  segments_.push_back({t, latency_now_s_, loss});
}

const PathTimeline::Segment& PathTimeline::segment(std::size_t i) {
  if (!varies()) return segments_.front();
  while (segments_.size() <= i) generate_next();
  return segments_[i];
}

const PathTimeline::Segment& PathTimeline::at(double t_s) {
  if (!varies()) return segments_.front();
  while (segments_.back().start_s <= t_s) generate_next();
  auto it = std::upper_bound(segments_.begin(), segments_.end(), t_s,
                             [](double t, const Segment& s) { return t < s.start_s; });
  return *(it - 1);  // segments_[0] starts at 0 <= t_s
}

double connection_bound(CongestionControl cc, const TcpSpec& tcp, double rtt_s, double loss) {
  double bound = loss_limited_rate(cc, tcp.mss_bytes, rtt_s, loss);
  if (tcp.per_flow_cap_gbps > 0) bound = std::min(bound, tcp.per_flow_cap_gbps * 1e9 / 8);
  return bound;
}

void attach_bandwidth_variation(sg4::Link* link, double capacity_Bps, double cv,
                                double correlation_s, std::uint64_t seed) {
  using simgrid::kernel::profile::ProfileBuilder;
  if (cv <= 0 || correlation_s <= 0 || capacity_Bps <= 0) return;
  // log(bandwidth / capacity) is an AR(1) process sampled every quarter correlation time:
  // stationary N(−σ²/2, σ²) with σ² = ln(1 + cv²), so that its mean is the capacity and its
  // coefficient of variation cv.
  struct Ar1 {
    std::uint64_t rng;
    double x = 0;
    bool started = false;
  };
  auto st = std::make_shared<Ar1>(Ar1{host_draw_state(seed, link->get_name(), 10)});
  const double dt = correlation_s / 4;
  const double phi = std::exp(-dt / correlation_s);
  const double sigma = std::sqrt(std::log1p(cv * cv));
  auto cb = [st, dt, phi, sigma, capacity_Bps](std::vector<DatedValue>& values) {
    for (int k = 0; k < kProfileChunk; ++k) {
      if (!st->started) {
        st->x = sigma * normal_draw(st->rng);
        st->started = true;
      } else {
        st->x = phi * st->x + std::sqrt(1 - phi * phi) * sigma * normal_draw(st->rng);
      }
      // Dates are the delay since the previous value (the first: since t = 0).
      values.emplace_back(values.empty() ? 0.0 : dt,
                          capacity_Bps * std::exp(st->x - sigma * sigma / 2));
    }
  };
  link->set_bandwidth_profile(ProfileBuilder::from_callback(link->get_name() + ":bw", cb, -1));
}

WanModel::WanModel(const Scenario& sc, const Platform& pf, int connections_per_flow, int lanes)
    : pf_(pf),
      tcp_(sc.network.tcp),
      cc_(parse_congestion_control(sc.network.tcp.cc, sc.file + ": key 'network.tcp.cc'")),
      gamma_bytes_(sc.network.tcp_gamma_bytes),
      connections_(std::max(1, connections_per_flow)),
      lanes_(std::max(connections_, lanes)) {}

void WanModel::install(sg4::Engine& e) {
  e.get_netzone_root()->get_network_model()->set_lat_factor_cb(
      [this](double size, const sg4::Host* src, const sg4::Host* dst,
             const std::vector<sg4::Link*>&,
             const std::unordered_set<sg4::NetZone*>&) { return latency_factor(size, src, dst); });
}

WanModel::Connection& WanModel::connection(const sg4::Host* src, const sg4::Host* dst, int lane) {
  auto [it, fresh] = conns_.try_emplace({src, dst, lane});
  Connection& c = it->second;
  if (fresh) {
    double latency = 0;
    const_cast<sg4::Host*>(src)->route_to(const_cast<sg4::Host*>(dst), c.route, &latency);
    c.path = pf_.path_between(src, dst);
  }
  return c;
}

double WanModel::route_latency_s(Connection& c) const {
  double one_way = 0;
  for (const sg4::Link* l : c.route) one_way += l->get_latency();
  return one_way;
}

double WanModel::path_change_s(Connection& c, double t_s) const {
  if (!c.path || !c.path->varies()) return 0;
  return c.path->at(t_s).latency_s - c.path->segment(0).latency_s;
}

double WanModel::rtt_s(const sg4::Host* src, const sg4::Host* dst) {
  Connection& c = connection(src, dst);
  return 2 * (route_latency_s(c) + path_change_s(c, sg4::Engine::get_clock()));
}

double WanModel::loss(Connection& c, double t_s) const { return c.path ? c.path->at(t_s).loss : 0; }

double WanModel::rate_bound(const sg4::Host* src, const sg4::Host* dst, double t_s) {
  Connection& c = connection(src, dst);
  return connection_bound(cc_, tcp_, rtt_s(src, dst), loss(c, t_s)) * connections_;
}

sg4::CommPtr WanModel::start(sg4::Host* src, sg4::Host* dst, std::uint64_t bytes, int lane,
                             std::uint64_t messages, std::uint64_t first_message_bytes) {
  MERIDIAN_CHECK(messages >= 1);
  // The latency callback runs as the transfer starts (within sendto_async) and sees the
  // connection as it was before.
  Connection& c = connection(src, dst, lane);
  starting_ = &c;
  starting_messages_ = static_cast<double>(messages);
  starting_first_bytes_ = static_cast<double>(first_message_bytes);
  auto comm = sg4::Comm::sendto_async(src, dst, bytes);
  starting_ = nullptr;
  starting_messages_ = 1;
  starting_first_bytes_ = 0;
  c.in_flight++;
  return comm;
}

void WanModel::ended(sg4::Host* src, sg4::Host* dst, int lane) {
  Connection& c = connection(src, dst, lane);
  c.in_flight = std::max(0, c.in_flight - 1);
  c.last_end_s = sg4::Engine::get_clock();
}

double WanModel::latency_factor(double bytes, const sg4::Host* src, const sg4::Host* dst) {
  // The latency SimGrid charges is the route's as built; the path's current one adds its change
  // (netsim/platform.cc says why this is not a latency profile), and slow start its rounds.
  Connection& c = starting_ ? *starting_ : connection(src, dst);
  const double built = route_latency_s(c);
  if (built <= 0) return 1.0;
  const double now = sg4::Engine::get_clock();
  const double one_way = built + path_change_s(c, now);
  const double rtt = 2 * one_way;
  // One connection's steady rate: its window over the RTT, and on every link of its route its
  // share: a fat pipe (the per-flow bound) bounds each simulated flow alone, so a connection
  // gets 1/connections_per_flow of it; a shared link (the access links) carries the node's
  // `lanes` parallel connections to this peer. Aggregated and message-level flows thus climb
  // to the same per-connection rate.
  auto steady_rate = [&] {
    double rate = gamma_bytes_ / rtt;
    for (const sg4::Link* l : c.route)
      rate = std::min(
          rate, l->get_bandwidth() / (l->get_sharing_policy() == sg4::Link::SharingPolicy::FATPIPE
                                          ? connections_
                                          : lanes_));
    return rate;
  };
  // A flow standing for several messages sent back to back pays each one's one-way latency at
  // the time it would leave: the path's latency steps as the messages go, so a long stretch on a
  // slow path holds fewer messages than on a fast one, as message by message.
  double latency = one_way;
  if (const double messages = starting_ ? starting_messages_ : 1;
      messages > 1 && (!c.path || !c.path->varies())) {
    latency = messages * one_way;
  } else if (messages > 1) {
    const double gap = bytes / messages / (steady_rate() * connections_);  // one at the rate
    double t = now + one_way + gap;
    for (double m = 1; m < messages; ++m) {
      const double next = built + path_change_s(c, t);
      latency += next;
      t += next + gap;
    }
  }
  auto factor = [&](double slow_start_s) { return (latency + slow_start_s) / built; };
  if (c.in_flight > 0) return factor(0);  // the window is open: data is already flowing
  if (c.last_end_s >= 0 && !tcp_.slow_start_after_idle) return factor(0);
  const double rate = steady_rate();
  const double initial = tcp_.initial_window_segments * tcp_.mss_bytes;
  const double cwnd0 = c.last_end_s < 0
                           ? initial
                           : window_after_idle(rate * rtt, now - c.last_end_s,
                                               stable_rto(rtt, tcp_.rto_min_ms * 1e-3), initial);
  const double ramped = starting_ && starting_first_bytes_ > 0 ? starting_first_bytes_ : bytes;
  return factor(slow_start_penalty(ramped / connections_, rate, rtt, cwnd0));
}

JsonObject WanModel::to_json() const {
  JsonObject j;
  j.add("cc", to_string(cc_))
      .add("connections_per_flow", connections_)
      .add("lanes", lanes_)
      .add("window_bytes_per_connection", gamma_bytes_)
      .add("rate_bound",
           "per connection: min(loss-limited rate of cc, per_flow_cap), a fat pipe "
           "per site pair")
      .add("slow_start", tcp_.slow_start_after_idle ? "on a new connection and after idle > RTO"
                                                    : "on a new connection only");
  return j;
}

}  // namespace meridian::netsim
