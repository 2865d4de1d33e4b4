// Platform construction from a scenario (see platform.h).
#include "netsim/platform.h"

#include <filesystem>
#include <map>
#include <simgrid/kernel/ProfileBuilder.hpp>
#include <simgrid/s4u.hpp>
#include <sstream>

#include "engine/error.h"
#include "engine/util/splitmix64.h"

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
}

Platform build_platform(sg4::Engine& e, const Scenario& sc) {
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
    std::filesystem::path xml = sc.network.platform_xml;
    if (xml.is_relative() && !sc.base_dir.empty()) xml = std::filesystem::path(sc.base_dir) / xml;
    if (!std::filesystem::exists(xml))
      throw ConfigError(sc.file + ": key 'network.platform_xml': file '" + xml.string() +
                        "' does not exist");
    e.load_platform(xml.string());
    for (auto& n : p.names) {
      auto* h = sg4::Host::by_name_or_null(n);
      if (!h)
        throw ConfigError(xml.string() + ": no host named '" + n + "' (the scenario's nodes)");
      p.hosts.push_back(h);
    }
    p.coordinator = sg4::Host::by_name_or_null("coordinator");
    if (!p.coordinator)
      throw ConfigError(xml.string() + ": no host named 'coordinator' (runs the store)");
    for (auto& bw : p.access_gbps) bw = 0;  // set by the XML, not by the scenario
    return p;
  }

  auto* world = sg4::create_full_zone("world");
  std::map<std::pair<std::string, std::string>, sg4::Link*> backbone;
  auto pair_key = [](std::string a, std::string b) {
    return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
  };
  for (auto& s : sc.network.sites) {
    auto* l = world->create_link("backbone:" + s.name + ":" + s.name, kBackboneBps);
    l->set_latency(sc.network.intra_site_rtt_ms * 1e-3 / 2);
    l->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
    backbone[pair_key(s.name, s.name)] = l->seal();
  }
  for (auto& r : sc.network.rtt) {
    if (r.a == r.b) continue;
    auto key = pair_key(r.a, r.b);
    if (backbone.count(key)) continue;  // first entry wins
    auto* l = world->create_link("backbone:" + key.first + ":" + key.second, kBackboneBps);
    l->set_latency(r.rtt_ms * 1e-3 / 2);
    l->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
    backbone[key] = l->seal();
  }

  std::vector<sg4::SplitDuplexLink*> access;
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    std::uint64_t var_rng = host_draw_state(sc.run.seed, p.names[i], 1);
    auto* h = world->create_host(p.names[i], kHostFlops)->seal();
    p.hosts.push_back(h);
    const double bps = p.access_gbps[i] * 1e9 / 8;
    auto* l = world->create_split_duplex_link(p.names[i] + ":access", bps);
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
    l->seal();
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
    sg4::Link* bb = backbone.at(pair_key(sa, sb));
    world->add_route(
        a->get_netpoint(), b->get_netpoint(), nullptr, nullptr,
        {sg4::LinkInRoute(la, D::UP), sg4::LinkInRoute(bb), sg4::LinkInRoute(lb, D::DOWN)}, true);
  };
  for (std::size_t i = 0; i < p.hosts.size(); ++i) {
    for (std::size_t j = i + 1; j < p.hosts.size(); ++j)
      route(p.hosts[i], access[i], p.sites[i], p.hosts[j], access[j], p.sites[j]);
    route(p.hosts[i], access[i], p.sites[i], p.coordinator, coord_link,
          sc.network.coordinator_site);
  }
  world->seal();
  return p;
}

}  // namespace meridian::netsim
