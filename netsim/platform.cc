// Platform construction from a scenario (see platform.h).
#include "netsim/platform.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <simgrid/kernel/ProfileBuilder.hpp>
#include <simgrid/s4u.hpp>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/util/splitmix64.h"
#include "netsim/wan.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {
constexpr double kHostFlops = 1e9;       // nominal host speed; compute is charged in seconds
constexpr double kBackboneBps = 1e12;    // site-to-site pipes are not the bottleneck
constexpr int kVariabilityPeriods = 64;  // length of the looped bandwidth profile
}  // namespace

double unit_draw(std::uint64_t& state) { return double(splitmix64(state) >> 11) * 0x1.0p-53; }

std::uint64_t host_draw_state(std::uint64_t seed, const std::string& host, std::uint64_t stream) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name, then mixed with seed and stream
  for (const unsigned char c : host) h = (h ^ c) * 0x100000001b3ull;
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ h ^ (stream * 0xD1B54A32D192ED03ull);
  splitmix64(state);  // one round so that nearby seeds and names start far apart
  return state;
}

double drawn_access_gbps(std::uint64_t seed, const std::string& host, double lo, double hi) {
  std::uint64_t state = host_draw_state(seed, host, 0);
  return lo + (hi - lo) * unit_draw(state);
}

std::vector<std::string> host_slot_names(const Scenario& sc) {
  std::map<std::string, int> per_site;
  std::vector<std::string> names;
  for (auto& g : sc.network.nodes)
    for (int i = 0; i < g.count; ++i)
      names.push_back(g.site + "-" + std::to_string(per_site[g.site]++));
  return names;
}

int Platform::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

JsonObject Platform::to_json() const {
  std::string hosts_j = "[";
  for (std::size_t i = 0; i < names.size(); ++i) {
    JsonObject o;
    o.add("host", names[i])
        .add("site", sites[i])
        .add("access_gbps", access_gbps[i])
        .add("speed_factor", speed_factor[i])
        .add("start", bool(start[i]));
    hosts_j += (i ? "," : "") + o.str();
  }
  JsonObject j;
  j.add_raw("hosts", hosts_j + "]");
  return j;
}

void configure_network(sg4::Engine& e, const Scenario& sc, double gamma_scale) {
  e.set_config("network/model:" + sc.network.model);
  std::ostringstream g;
  g.precision(17);
  g << sc.network.tcp_gamma_bytes * gamma_scale;
  e.set_config("network/TCP-gamma:" + g.str());
  e.set_config(std::string("network/crosstraffic:") + (sc.network.crosstraffic ? "1" : "0"));
  // Full updates where a bandwidth profile may change a link (network.variability, a shared
  // path's variation, the WAN model's loss bound on a path that changes): with lazy updates
  // SimGrid 3.32 stalls a transfer for ever when a profile changes a link it crosses ("Deadlock
  // detected"; a two-host, one-link test reproduces it). Lazy otherwise: it is faster here.
  const NetworkSpec& n = sc.network;
  bool any_loss = false, any_capacity = false;
  for (const PathSpec& p : n.paths) {
    any_loss |= p.loss > 0;
    any_capacity |= p.capacity_gbps > 0;
  }
  const bool profiles = (n.variability_period_s > 0 && n.variability_min_fraction < 1) ||
                        (any_capacity && n.variation.bandwidth_varies()) ||
                        n.variation.loss_episodes() || n.variation.access_varies() ||
                        (any_loss && n.variation.paths_change());
  if (profiles) e.set_config("network/optim:Full");
}

namespace {

// A platform from SimGrid XML (network.platform_xml): its hosts by the scenario's names, and a
// host named "coordinator" for the store.
void load_xml_platform(sg4::Engine& e, const Scenario& sc, Platform& p) {
  std::filesystem::path xml = sc.network.platform_xml;
  if (!std::filesystem::exists(xml))
    throw ConfigError(sc.file + ": key 'network.platform_xml': file '" + xml.string() +
                      "' does not exist");
  e.load_platform(xml.string());
  for (auto& n : p.names) {
    auto* h = sg4::Host::by_name_or_null(n);
    if (!h) throw ConfigError(xml.string() + ": no host named '" + n + "' (the scenario's nodes)");
    p.hosts.push_back(h);
  }
  p.coordinator = sg4::Host::by_name_or_null("coordinator");
  if (!p.coordinator)
    throw ConfigError(xml.string() + ": no host named 'coordinator' (runs the store)");
  for (auto& bw : p.access_gbps) bw = 0;  // set by the XML, not by the scenario
}

// A site pair's links (netsim/wan.h): its backbone, shared at the capacity network.paths
// gives (full duplex, its available bandwidth varying as network.variation says) or else a fat
// pipe that is never the bottleneck, with the path's latency in time; and, where a connection's
// rate is bounded (loss, a per-flow cap), a fat pipe at that bound, which SimGrid applies to each
// flow on it separately.
struct SiteLink {
  sg4::Link* fat = nullptr;
  sg4::SplitDuplexLink* shared = nullptr;
  sg4::Link* bound = nullptr;
  std::string first;  // the pair's first site: its flows go UP the shared link
};

std::pair<std::string, std::string> pair_key(const std::string& a, const std::string& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}

// The links of site pair (a, b) with round-trip time `rtt_ms`, and its path's timeline in `p`.
SiteLink make_site_link(sg4::NetZone* world, const Scenario& sc, CongestionControl cc,
                        int connections_per_flow, Platform& p, const std::string& a,
                        const std::string& b, double rtt_ms) {
  using simgrid::kernel::profile::ProfileBuilder;
  const std::pair<std::string, std::string> key = pair_key(a, b);
  const PathSpec* spec = sc.network.path(a, b);
  const double capacity_Bps = spec && spec->capacity_gbps > 0 ? spec->capacity_gbps * 1e9 / 8 : 0;
  const std::string name = key.first + ":" + key.second;
  const double latency_s = rtt_ms * 1e-3 / 2;
  const VariationSpec variation = a != b ? sc.network.variation : VariationSpec{};
  auto path = std::make_shared<PathTimeline>(latency_s, spec ? spec->loss : 0.0, variation,
                                             host_draw_state(sc.run.seed, "path:" + name, 12));
  p.paths[key] = path;
  // A profile that reads the path's timeline from its own position. Dates are the delay since
  // the previous value (the first: since t = 0).
  auto from_path = [path](std::function<double(const PathTimeline::Segment&)> value) {
    auto next = std::make_shared<std::size_t>(0);
    return [path, next, value](std::vector<simgrid::kernel::profile::DatedValue>& out) {
      for (int k = 0; k < 256; ++k, ++*next) {
        const PathTimeline::Segment seg = path->segment(*next);
        const double since = *next == 0 ? 0.0 : seg.start_s - path->segment(*next - 1).start_s;
        out.emplace_back(since, value(seg));
      }
    };
  };
  SiteLink sl;
  sl.first = key.first;
  if (capacity_Bps > 0) {
    auto* l = world->create_split_duplex_link("backbone:" + name, capacity_Bps);
    l->set_latency(latency_s);
    for (auto* dir : {l->get_link_up(), l->get_link_down()})
      attach_bandwidth_variation(dir, capacity_Bps, variation.bandwidth_cv,
                                 variation.bandwidth_correlation_s, sc.run.seed);
    sl.shared = l;
  } else {
    auto* l = world->create_link("backbone:" + name, kBackboneBps);
    l->set_latency(latency_s);
    l->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
    sl.fat = l;
  }
  // The path's latency in time is not a latency profile on these links: in SimGrid 3.32 a
  // flow crossing a link whose latency changes either sticks for ever (lazy updates: "Deadlock
  // detected") or, with full updates, has its time moved by far more than the change (a
  // two-host test: 0.1 % latency steps every second took a 100 MB transfer from 3.108 s to
  // 2.46-3.00 s). WanModel gives each transfer the path's latency at its start instead.
  auto bound_Bps = [&sc, cc, connections_per_flow](const PathTimeline::Segment& seg) {
    const double b = connection_bound(cc, sc.network.tcp, 2 * seg.latency_s, seg.loss);
    return std::isfinite(b) ? b * connections_per_flow : kBackboneBps;
  };
  const bool lossy = (spec && spec->loss > 0) || variation.loss_episodes();
  if (lossy || sc.network.tcp.per_flow_cap_gbps > 0) {
    auto* l = world->create_link("tcp:" + name, bound_Bps(path->segment(0)));
    l->set_latency(0);
    l->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
    if (lossy && path->varies())  // without loss the bound is the cap, whatever the RTT
      l->set_bandwidth_profile(
          ProfileBuilder::from_callback(l->get_name() + ":bw", from_path(bound_Bps), -1));
    sl.bound = l->seal();
  }
  if (sl.shared) sl.shared->seal();
  if (sl.fat) sl.fat->seal();
  return sl;
}

// Node `name`'s access link at `bps` bytes/s, with the scenario's variation in time.
sg4::SplitDuplexLink* make_access_link(sg4::NetZone* world, const Scenario& sc,
                                       const std::string& name, double bps, std::uint64_t var_rng) {
  auto* l = world->create_split_duplex_link(name + ":access", bps);
  l->set_latency(0);
  if (sc.network.variability_period_s > 0 && sc.network.variability_min_fraction < 1) {
    // A looped piecewise-constant profile: each period the bandwidth is bps × U[min, 1].
    for (auto* dir : {l->get_link_up(), l->get_link_down()}) {
      std::ostringstream prof;
      prof.precision(17);
      for (int k = 0; k < kVariabilityPeriods; ++k) {
        double f = sc.network.variability_min_fraction +
                   (1 - sc.network.variability_min_fraction) * unit_draw(var_rng);
        prof << k * sc.network.variability_period_s << " " << bps * f << "\n";
      }
      dir->set_bandwidth_profile(simgrid::kernel::profile::ProfileBuilder::from_string(
          dir->get_name() + ":bw", prof.str(),
          kVariabilityPeriods * sc.network.variability_period_s));
    }
  }
  // Cross traffic at the node's provider (network.variation.access_*): each direction's
  // available bandwidth varies around the drawn access bandwidth, mean-preserving.
  for (auto* dir : {l->get_link_up(), l->get_link_down()})
    attach_bandwidth_variation(dir, bps, sc.network.variation.access_cv,
                               sc.network.variation.access_correlation_s, sc.run.seed);
  l->seal();
  return l;
}

}  // namespace

Platform build_platform(sg4::Engine& e, const Scenario& sc, int connections_per_flow) {
  Platform p;
  p.names = host_slot_names(sc);
  std::size_t slot = 0;
  for (auto& g : sc.network.nodes)
    for (int i = 0; i < g.count; ++i, ++slot) {
      p.sites.push_back(g.site);
      const auto [lo, hi] = sc.network.access_bandwidth_gbps;
      p.access_gbps.push_back(g.bandwidth_gbps > 0
                                  ? g.bandwidth_gbps
                                  : drawn_access_gbps(sc.run.seed, p.names[slot], lo, hi));
      p.speed_factor.push_back(g.speed_factor);
      p.start.push_back(g.start);
    }

  if (!sc.network.platform_xml.empty()) {
    load_xml_platform(e, sc, p);
    return p;
  }

  auto* world = sg4::create_full_zone("world");
  std::map<std::pair<std::string, std::string>, SiteLink> backbone;
  const CongestionControl cc =
      parse_congestion_control(sc.network.tcp.cc, sc.file + ": key 'network.tcp.cc'");
  auto site_link = [&](const std::string& a, const std::string& b, double rtt_ms) {
    backbone[pair_key(a, b)] = make_site_link(world, sc, cc, connections_per_flow, p, a, b, rtt_ms);
  };
  for (auto& s : sc.network.sites) site_link(s.name, s.name, sc.network.intra_site_rtt_ms);
  for (auto& r : sc.network.rtt) {
    if (r.a == r.b || backbone.count(pair_key(r.a, r.b))) continue;  // first entry wins
    site_link(r.a, r.b, r.rtt_ms);
  }

  std::vector<sg4::SplitDuplexLink*> access;
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    std::uint64_t var_rng = host_draw_state(sc.run.seed, p.names[i], 1);
    auto* h = world->create_host(p.names[i], kHostFlops)->seal();
    p.hosts.push_back(h);
    const double bps = p.access_gbps[i] * 1e9 / 8;
    sg4::SplitDuplexLink* l = make_access_link(world, sc, p.names[i], bps, var_rng);
    access.push_back(l);
  }
  p.coordinator = world->create_host("coordinator", kHostFlops)->seal();
  auto* coord_link = world->create_split_duplex_link(
      "coordinator:access", sc.network.coordinator_bandwidth_gbps * 1e9 / 8);
  coord_link->set_latency(0);
  coord_link->seal();

  using D = sg4::LinkInRoute::Direction;
  auto route = [&](sg4::Host* a, sg4::SplitDuplexLink* la, const std::string& sa, sg4::Host* b,
                   sg4::SplitDuplexLink* lb, const std::string& sb) {
    const SiteLink& bb = backbone.at(pair_key(sa, sb));
    std::vector<sg4::LinkInRoute> links{sg4::LinkInRoute(la, D::UP)};
    links.push_back(bb.shared ? sg4::LinkInRoute(bb.shared, sa == bb.first ? D::UP : D::DOWN)
                              : sg4::LinkInRoute(bb.fat));
    if (bb.bound) links.emplace_back(bb.bound);
    links.emplace_back(lb, D::DOWN);
    world->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, links, true);
  };
  for (std::size_t i = 0; i < p.hosts.size(); ++i) {
    for (std::size_t j = i + 1; j < p.hosts.size(); ++j)
      route(p.hosts[i], access[i], p.sites[i], p.hosts[j], access[j], p.sites[j]);
    route(p.hosts[i], access[i], p.sites[i], p.coordinator, coord_link,
          sc.network.coordinator_site);
  }
  world->seal();
  for (std::size_t i = 0; i < p.hosts.size(); ++i) p.site_of[p.hosts[i]] = p.sites[i];
  p.site_of[p.coordinator] = sc.network.coordinator_site.empty() ? sc.network.sites.front().name
                                                                 : sc.network.coordinator_site;
  return p;
}

PathTimeline* Platform::path_between(const sg4::Host* a, const sg4::Host* b) const {
  const auto sa = site_of.find(a), sb = site_of.find(b);
  if (sa == site_of.end() || sb == site_of.end()) return nullptr;
  const auto key = sa->second < sb->second ? std::make_pair(sa->second, sb->second)
                                           : std::make_pair(sb->second, sa->second);
  const auto it = paths.find(key);
  return it == paths.end() ? nullptr : it->second.get();
}

}  // namespace meridian::netsim
