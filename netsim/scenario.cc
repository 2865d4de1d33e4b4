// Scenario YAML parsing: strict (unknown keys are errors), every value typed and range-checked,
// errors name the file, the key path and the expectation.
#include "netsim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "engine/error.h"

namespace meridian::netsim {

std::uint64_t ModelSpec::non_embedding_params() const {
  const std::uint64_t h = hidden, d_head = hidden / heads, kv = kv_heads * d_head;
  const std::uint64_t per_layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h;
  const std::uint64_t head = tied_embeddings ? 0 : std::uint64_t(vocab) * h;
  return per_layer * layers + h + head;
}

std::uint64_t ModelSpec::param_count() const {
  return non_embedding_params() + std::uint64_t(vocab) * hidden;
}

double ModelSpec::flops_per_token() const {
  const double d_head = double(hidden) / heads;
  return 6.0 * double(non_embedding_params()) + 12.0 * layers * heads * d_head * seq_len;
}

std::vector<std::uint64_t> ModelSpec::bucket_boundaries() const {
  const std::uint64_t h = hidden, emb = std::uint64_t(vocab) * h;
  const std::uint64_t per_layer =
      (non_embedding_params() - h - (tied_embeddings ? 0 : emb)) / layers;
  std::vector<std::uint64_t> b{0, emb};
  for (int l = 0; l < layers; ++l) b.push_back(b.back() + per_layer);
  b.push_back(param_count());  // output head + final norm
  return b;
}

double Scenario::inner_step_s() const {
  if (hardware.step_time_s > 0) return hardware.step_time_s;
  return model.flops_per_token() * double(tokens_per_inner_step()) /
         (hardware.gpus_per_node * hardware.peak_flops_per_gpu * hardware.mfu);
}

int Scenario::outer_steps() const {
  if (run.inner_steps > 0) return static_cast<int>((run.inner_steps + diloco.H - 1) / diloco.H);
  return run.outer_steps;
}

const PathSpec* NetworkSpec::path(const std::string& a, const std::string& b) const {
  for (const PathSpec& p : paths)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

double NetworkSpec::store_quorum_rtt_s() const {
  if (store_kind != "etcd" || store_members.size() < 2) return 0.0;
  const std::string& leader = coordinator_site.empty() ? sites.front().name : coordinator_site;
  std::vector<double> rtts_ms;  // to the followers
  bool leader_seen = false;
  for (const std::string& m : store_members) {
    if (m == leader && !leader_seen) {
      leader_seen = true;  // the leader's own member
      continue;
    }
    double ms = intra_site_rtt_ms;
    for (const RttSpec& e : rtt)
      if ((e.a == leader && e.b == m) || (e.b == leader && e.a == m)) ms = e.rtt_ms;
    rtts_ms.push_back(ms);
  }
  std::sort(rtts_ms.begin(), rtts_ms.end());
  const std::size_t acks = store_members.size() / 2;  // quorum - 1: the leader counts itself
  return rtts_ms[acks - 1] / 1000.0;
}

int Scenario::total_nodes() const {
  int n = 0;
  for (auto& g : network.nodes) n += g.count;
  return n;
}

namespace {

// Where the values being read came from: the file, and the --set overrides applied on top of it
// (key path, and the override as the user wrote it), so that an error blames the one that gave
// the bad key or value.
struct Origin {
  std::string file;
  std::vector<std::pair<std::string, std::string>> overrides;
  // Key paths whose values came from another file (network.sites_from): key path, file.
  std::vector<std::pair<std::string, std::string>> other_files;

  // The file that gave `key_path`.
  const std::string& file_of(const std::string& key_path) const {
    for (const auto& [prefix, other] : other_files)
      if (key_path == prefix || key_path.rfind(prefix + "[", 0) == 0 ||
          key_path.rfind(prefix + ".", 0) == 0)
        return other;
    return file;
  }

  // The override that set `key_path`, a key below it or the section it is in; nullptr when the
  // file did.
  const std::string* override_of(const std::string& key_path) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {  // the last one wins
      const std::string& set = it->first;
      if (set == key_path || set.rfind(key_path + ".", 0) == 0 ||
          key_path.rfind(set + ".", 0) == 0 || key_path.rfind(set + "[", 0) == 0)
        return &it->second;
    }
    return nullptr;
  }
};

// "file:LINE" where the node has a position in the file, else "file".
std::string where(const std::string& file, const YAML::Node* node) {
  if (node && node->IsDefined() && node->Mark().line >= 0)
    return file + ":" + std::to_string(node->Mark().line + 1);
  return file;
}

// A mapping being read: remembers which keys were consumed so the rest can be reported.
class Reader {
 public:
  Reader(const YAML::Node& node, const Origin& origin, std::string path)
      : node_(node), origin_(&origin), path_(std::move(path)) {
    if (node_ && !node_.IsNull() && !node_.IsMap()) fail(path_, "a mapping", &node_);
  }

  // Errors read "FILE:LINE: key 'a.b': expected X, got 'v'", or "--set a.b=v: key 'a.b': ..."
  // when an override gave the value.
  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const YAML::Node* got = nullptr) const {
    const std::string* ov = origin_->override_of(key);
    std::string msg = (ov ? "--set " + *ov : where(origin_->file_of(key), got)) + ": key '" + key +
                      "': expected " + expected;
    if (got && got->IsDefined() && got->IsScalar()) msg += ", got '" + got->Scalar() + "'";
    throw ConfigError(msg);
  }

  std::string key_path(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  YAML::Node get(const std::string& k) {
    seen_.insert(k);
    if (!node_ || !node_.IsMap()) return YAML::Node();
    return node_[k];
  }

  template <typename T>
  void scalar(const std::string& k, T& out, const std::string& expected,
              std::function<bool(const T&)> ok = nullptr) {
    YAML::Node n = get(k);
    if (!n || n.IsNull()) return;  // default stays
    if (!n.IsScalar()) fail(key_path(k), expected, &n);
    T v;
    try {
      v = n.as<T>();
    } catch (const YAML::Exception&) {
      fail(key_path(k), expected, &n);
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) fail(key_path(k), expected, &n);
    }
    if (ok && !ok(v)) fail(key_path(k), expected, &n);
    out = v;
  }

  Reader child(const std::string& k) { return Reader(get(k), *origin_, key_path(k)); }
  // The mapping `node`, an element of a list under this one, read as `path`.
  Reader element(const YAML::Node& node, const std::string& path) const {
    return Reader(node, *origin_, path);
  }

  // An unknown key: "--set diloco.HH=5: unknown key 'diloco.HH'; keys of diloco: H, codec, ..."
  // or "FILE:LINE: unknown key 'diloco.HH'; keys of diloco: ...".
  void finish() const {
    if (!node_ || !node_.IsMap()) return;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (!it->first.IsScalar()) {  // yaml-cpp accepts a list or a map as a key
        const YAML::Node key_node = it->first;
        throw ConfigError(where(origin_->file, &key_node) + ": a key of " +
                          (path_.empty() ? std::string("the scenario") : path_) +
                          " is not a name (a list or a map)");
      }
      const std::string k = it->first.Scalar();
      if (seen_.count(k)) continue;
      std::string known;
      for (auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
      const std::string* ov = origin_->override_of(key_path(k));
      const YAML::Node key_node = it->first;
      throw ConfigError((ov ? "--set " + *ov : where(origin_->file_of(key_path(k)), &key_node)) +
                        ": unknown key '" + key_path(k) + "'; keys of " +
                        (path_.empty() ? std::string("a scenario") : path_) + ": " + known);
    }
  }

  const std::string& file() const { return origin_->file; }

 private:
  YAML::Node node_;
  const Origin* origin_;
  std::string path_;
  std::set<std::string> seen_;
};

template <typename T>
std::function<bool(const T&)> positive() {
  return [](const T& v) { return v > 0; };
}
template <typename T>
std::function<bool(const T&)> non_negative() {
  return [](const T& v) { return v >= 0; };
}

// Applies "a.b.c=value" to the tree; returns the key path it set.
std::string apply_override(YAML::Node& root, const std::string& ov, const std::string& file) {
  auto eq = ov.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + ov + "': expected key.path=value");
  const std::string path = ov.substr(0, eq), value = ov.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ConfigError("--set '" + ov + "': empty component in key path");
    parts.push_back(p);
  }
  // yaml-cpp's operator[] returns proxies; walk with explicit copies of the handles.
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap())
      throw ConfigError("--set " + ov + ": '" + parts[i] + "' is not a mapping in " + file);
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    }
    chain.push_back(next);
  }
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set '" + ov + "': value is not valid YAML: " + e.what());
  }
  chain.back()[parts.back()] = parsed;
  return path;
}

void parse_model(Reader r, ModelSpec& m) {
  r.scalar<int>("layers", m.layers, "a positive integer", positive<int>());
  r.scalar<int>("hidden", m.hidden, "a positive integer", positive<int>());
  r.scalar<int>("heads", m.heads, "a positive integer", positive<int>());
  r.scalar<int>("kv_heads", m.kv_heads, "a positive integer", positive<int>());
  r.scalar<int>("ffn", m.ffn, "a positive integer", positive<int>());
  r.scalar<int>("vocab", m.vocab, "a positive integer", positive<int>());
  r.scalar<int>("seq_len", m.seq_len, "a positive integer", positive<int>());
  r.scalar<bool>("tied_embeddings", m.tied_embeddings, "true or false");
  r.finish();
  if (m.hidden % m.heads != 0) r.fail(r.key_path("heads"), "a divisor of model.hidden");
  if (m.heads % m.kv_heads != 0) r.fail(r.key_path("kv_heads"), "a divisor of model.heads");
}

void parse_hardware(Reader r, HardwareSpec& h) {
  r.scalar<int>("gpus_per_node", h.gpus_per_node, "a positive integer", positive<int>());
  r.scalar<double>("peak_flops_per_gpu", h.peak_flops_per_gpu, "FLOP/s > 0", positive<double>());
  r.scalar<double>("mfu", h.mfu, "a fraction in (0, 1]",
                   [](const double& v) { return v > 0 && v <= 1; });
  r.scalar<double>("step_time_s", h.step_time_s, "seconds >= 0 (0: from FLOPs)",
                   non_negative<double>());
  r.scalar<int>("batch_sequences", h.batch_sequences, "a positive integer", positive<int>());
  r.finish();
}

void parse_network(Reader r, NetworkSpec& n) {
  r.scalar<std::string>("model", n.model, "one of CM02, LV08, SMPI, IB", [](const std::string& v) {
    return v == "CM02" || v == "LV08" || v == "SMPI" || v == "IB";
  });
  r.scalar<double>("tcp_gamma_bytes", n.tcp_gamma_bytes, "bytes > 0", positive<double>());
  r.scalar<bool>("crosstraffic", n.crosstraffic, "true or false");
  r.scalar<int>("rendezvous_trips", n.rendezvous_trips, "an integer from 0 to 8",
                [](int v) { return v >= 0 && v <= 8; });
  r.scalar<std::string>("platform_xml", n.platform_xml, "a file path");
  r.scalar<std::string>("sites_from", n.sites_from, "a file path");
  r.scalar<std::string>("coordinator_site", n.coordinator_site, "a site name");
  r.scalar<double>("coordinator_bandwidth_gbps", n.coordinator_bandwidth_gbps, "Gb/s > 0",
                   positive<double>());
  r.scalar<double>("intra_site_rtt_ms", n.intra_site_rtt_ms, "milliseconds >= 0",
                   non_negative<double>());
  {
    Reader st = r.child("store");
    st.scalar<std::string>("kind", n.store_kind, "single or etcd",
                           [](const std::string& v) { return v == "single" || v == "etcd"; });
    st.get("members");  // read below, once the sites are known
    st.finish();
  }
  {
    YAML::Node bw = r.get("access_bandwidth_gbps");
    if (bw && !bw.IsNull()) {
      const std::string key = r.key_path("access_bandwidth_gbps");
      const char* want = "a bandwidth in Gb/s or a range [min, max] with 0 < min <= max";
      try {
        if (bw.IsScalar()) {
          double v = bw.as<double>();
          n.access_bandwidth_gbps = {v, v};
        } else if (bw.IsSequence() && bw.size() == 2) {
          n.access_bandwidth_gbps = {bw[0].as<double>(), bw[1].as<double>()};
        } else {
          r.fail(key, want, &bw);
        }
      } catch (const YAML::Exception&) {
        r.fail(key, want, &bw);
      }
      auto [lo, hi] = n.access_bandwidth_gbps;
      if (!(lo > 0 && lo <= hi && std::isfinite(hi))) r.fail(key, want, &bw);
    }
  }
  {
    Reader v = r.child("variability");
    v.scalar<double>("period_s", n.variability_period_s, "seconds >= 0 (0: off)",
                     non_negative<double>());
    v.scalar<double>("min_fraction", n.variability_min_fraction, "a fraction in (0, 1]",
                     [](const double& x) { return x > 0 && x <= 1; });
    v.finish();
  }
  auto sequence = [&](const std::string& k) {
    YAML::Node s = r.get(k);
    if (s && !s.IsNull() && !s.IsSequence()) r.fail(r.key_path(k), "a list", &s);
    return s;
  };
  std::set<std::string> site_names;
  YAML::Node sites = sequence("sites");
  for (std::size_t i = 0; sites && i < sites.size(); ++i) {
    Reader s = r.element(sites[i], r.key_path("sites[" + std::to_string(i) + "]"));
    SiteSpec site;
    s.scalar<std::string>("name", site.name, "a non-empty site name",
                          [](const std::string& v) { return !v.empty(); });
    s.scalar<std::string>("region", site.region, "a description");
    s.finish();
    if (site.name.empty()) s.fail(s.key_path("name"), "a non-empty site name");
    if (!site_names.insert(site.name).second) s.fail(s.key_path("name"), "a unique site name");
    n.sites.push_back(site);
  }
  // A site that network.sites does not list: the error gives the value, where it stands and the
  // names it could have been.
  auto known_site = [&](Reader& s, const std::string& k, const std::string& v) {
    if (site_names.count(v)) return;
    const YAML::Node given = s.get(k);
    std::string names;
    for (const SiteSpec& site : n.sites) names += (names.empty() ? "" : ", ") + site.name;
    s.fail(s.key_path(k),
           names.empty() ? std::string("a site, but network.sites lists none")
                         : "one of the sites listed in network.sites (" + names + ")",
           &given);
  };
  YAML::Node rtt = sequence("rtt");
  for (std::size_t i = 0; rtt && i < rtt.size(); ++i) {
    Reader s = r.element(rtt[i], r.key_path("rtt[" + std::to_string(i) + "]"));
    RttSpec e;
    s.scalar<std::string>("a", e.a, "a site name");
    s.scalar<std::string>("b", e.b, "a site name");
    s.scalar<double>("ms", e.rtt_ms, "a round-trip time in ms > 0", positive<double>());
    s.scalar<std::string>("source", e.source, "where the number comes from");
    s.finish();
    known_site(s, "a", e.a);
    known_site(s, "b", e.b);
    if (e.rtt_ms <= 0) s.fail(s.key_path("ms"), "a round-trip time in ms > 0");
    if (e.source.empty()) s.fail(s.key_path("source"), "the source of the measurement");
    n.rtt.push_back(e);
  }
  YAML::Node paths = sequence("paths");
  for (std::size_t i = 0; paths && i < paths.size(); ++i) {
    Reader s = r.element(paths[i], r.key_path("paths[" + std::to_string(i) + "]"));
    PathSpec e;
    s.scalar<std::string>("a", e.a, "a site name");
    s.scalar<std::string>("b", e.b, "a site name");
    s.scalar<double>("loss", e.loss, "a packet loss fraction in [0, 0.5)",
                     [](const double& v) { return v >= 0 && v < 0.5; });
    s.scalar<double>("capacity_gbps", e.capacity_gbps, "Gb/s >= 0 (0: not shared)",
                     non_negative<double>());
    s.scalar<std::string>("source", e.source, "where the numbers come from");
    s.finish();
    known_site(s, "a", e.a);
    known_site(s, "b", e.b);
    if (e.source.empty()) s.fail(s.key_path("source"), "the source of the numbers");
    for (const PathSpec& other : n.paths)
      if ((other.a == e.a && other.b == e.b) || (other.a == e.b && other.b == e.a))
        s.fail(s.key_path("b"), "one entry per site pair (" + e.a + " / " + e.b + " is listed twice)");
    n.paths.push_back(e);
  }
  {
    Reader v = r.child("variation");
    VariationSpec& x = n.variation;
    v.scalar<double>("bandwidth_cv", x.bandwidth_cv, "a coefficient of variation >= 0",
                     non_negative<double>());
    v.scalar<double>("bandwidth_correlation_s", x.bandwidth_correlation_s, "seconds >= 0",
                     non_negative<double>());
    v.scalar<double>("path_change_interval_s", x.path_change_interval_s, "seconds >= 0",
                     non_negative<double>());
    v.scalar<double>("path_change_rtt_fraction", x.path_change_rtt_fraction,
                     "a fraction of the base RTT >= 0", non_negative<double>());
    v.scalar<double>("loss_episode_interval_s", x.loss_episode_interval_s, "seconds >= 0",
                     non_negative<double>());
    v.scalar<double>("loss_episode_s", x.loss_episode_s, "seconds >= 0", non_negative<double>());
    v.scalar<double>("loss_episode_loss", x.loss_episode_loss,
                     "a packet loss fraction in [0, 0.5)",
                     [](const double& f) { return f >= 0 && f < 0.5; });
    v.scalar<std::string>("source", x.source, "where the numbers come from");
    v.finish();
    const bool any = x.bandwidth_cv > 0 || x.path_change_interval_s > 0 ||
                     x.loss_episode_interval_s > 0;
    if (any && x.source.empty()) v.fail(v.key_path("source"), "the source of the numbers");
  }
  {
    Reader t = r.child("tcp");
    TcpSpec& x = n.tcp;
    t.scalar<std::string>("cc", x.cc, "one of cubic, reno, bbr", [](const std::string& v) {
      return v == "cubic" || v == "reno" || v == "bbr";
    });
    t.scalar<double>("mss_bytes", x.mss_bytes, "bytes in [536, 9000]",
                     [](const double& v) { return v >= 536 && v <= 9000; });
    t.scalar<int>("initial_window_segments", x.initial_window_segments,
                  "a positive number of segments", positive<int>());
    t.scalar<bool>("slow_start_after_idle", x.slow_start_after_idle, "true or false");
    t.scalar<double>("rto_min_ms", x.rto_min_ms, "milliseconds >= 0", non_negative<double>());
    t.scalar<double>("per_flow_cap_gbps", x.per_flow_cap_gbps, "Gb/s >= 0 (0: none)",
                     non_negative<double>());
    t.finish();
  }
  YAML::Node nodes = sequence("nodes");
  for (std::size_t i = 0; nodes && i < nodes.size(); ++i) {
    Reader s = r.element(nodes[i], r.key_path("nodes[" + std::to_string(i) + "]"));
    NodeGroup g;
    s.scalar<std::string>("site", g.site, "a site name");
    s.scalar<int>("count", g.count, "a positive integer", positive<int>());
    s.scalar<bool>("start", g.start, "true or false");
    s.scalar<double>("bandwidth_gbps", g.bandwidth_gbps, "Gb/s > 0 (or absent: drawn)",
                     positive<double>());
    s.scalar<double>("speed_factor", g.speed_factor, "a factor in (0, 1]",
                     [](const double& x) { return x > 0 && x <= 1; });
    s.finish();
    known_site(s, "site", g.site);
    n.nodes.push_back(g);
  }
  r.finish();
  if (n.platform_xml.empty()) {
    if (n.sites.empty()) r.fail(r.key_path("sites"), "at least one site");
    for (std::size_t i = 0; i < n.sites.size(); ++i)
      for (std::size_t j = i + 1; j < n.sites.size(); ++j) {
        bool found = false;
        for (auto& e : n.rtt)
          found |= (e.a == n.sites[i].name && e.b == n.sites[j].name) ||
                   (e.b == n.sites[i].name && e.a == n.sites[j].name);
        if (!found)
          r.fail(r.key_path("rtt"),
                 "an entry for the site pair " + n.sites[i].name + " / " + n.sites[j].name);
      }
  }
  if (n.nodes.empty()) r.fail(r.key_path("nodes"), "at least one node group");
  if (!n.coordinator_site.empty()) known_site(r, "coordinator_site", n.coordinator_site);
  {
    Reader st = r.child("store");
    const YAML::Node members = st.get("members");
    const std::string key = st.key_path("members");
    if (members && !members.IsNull()) {
      if (n.store_kind != "etcd") r.fail(key, "no members unless store.kind is etcd", &members);
      if (!members.IsSequence() || members.size() == 0)
        r.fail(key, "a non-empty list of sites", &members);
      for (std::size_t i = 0; i < members.size(); ++i) {
        const std::string site = members[i].IsScalar() ? members[i].as<std::string>() : "";
        if (!site_names.count(site))
          r.fail(key + "[" + std::to_string(i) + "]", "one of the sites listed in network.sites",
                 &members);
        n.store_members.push_back(site);
      }
    } else if (n.store_kind == "etcd") {
      r.fail(key, "the sites of the etcd members (e.g. [us, eu, as])");
    }
    if (n.store_kind == "etcd" && !n.platform_xml.empty())
      r.fail(st.key_path("kind"), "single with platform_xml (etcd's quorum needs the rtt table)");
    const std::string leader =
        n.coordinator_site.empty() && !n.sites.empty() ? n.sites.front().name : n.coordinator_site;
    if (n.store_kind == "etcd" &&
        std::find(n.store_members.begin(), n.store_members.end(), leader) == n.store_members.end())
      r.fail(key, "a list that holds the coordinator's site '" + leader + "' (the leader's)",
             &members);
  }
  bool any_start = false;
  for (const NodeGroup& g : n.nodes) any_start |= g.start;
  // The engine's mesh needs an initial world of at least one node.
  if (!any_start) r.fail(r.key_path("nodes"), "at least one node group with start: true");
}

void parse_diloco(Reader r, DilocoSpec& d) {
  r.scalar<int>("H", d.H, "a positive integer", positive<int>());
  r.scalar<std::string>("codec", d.codec, "one of fp32, bf16, int8, int8-minmax",
                        [](const std::string& v) {
                          return v == "fp32" || v == "bf16" || v == "int8" || v == "int8-minmax";
                        });
  r.scalar<std::string>("buckets", d.buckets, "'layers' or a positive integer",
                        [](const std::string& v) {
                          if (v == "layers") return true;
                          char* end = nullptr;
                          long n = std::strtol(v.c_str(), &end, 10);
                          return *end == 0 && n > 0;
                        });
  r.scalar<int>("local_ranks", d.local_ranks, "a positive integer", positive<int>());
  r.scalar<bool>("aggregate", d.aggregate, "true or false");
  r.scalar<std::uint64_t>("max_chunk_bytes", d.max_chunk_bytes, "bytes > 0",
                          positive<std::uint64_t>());
  r.scalar<double>("timeout_s", d.timeout_s, "seconds > 0", positive<double>());
  r.scalar<int>("retries", d.retries, "an integer >= 0", non_negative<int>());
  r.scalar<double>("outer_opt_s", d.outer_opt_s, "seconds >= 0", non_negative<double>());
  r.scalar<double>("checkpoint_s", d.checkpoint_s, "seconds >= 0", non_negative<double>());
  r.scalar<double>("dead_after_s", d.dead_after_s, "seconds > 0", positive<double>());
  r.scalar<double>("heartbeat_s", d.heartbeat_s, "seconds > 0", positive<double>());
  r.scalar<int>("state_copies", d.state_copies, "a positive integer", positive<int>());
  r.scalar<std::uint64_t>("recovery_chunk_bytes", d.recovery_chunk_bytes, "bytes > 0",
                          positive<std::uint64_t>());
  r.finish();
  // The engine's mesh evicts a member that missed heartbeats for dead_after_s: it needs at least
  // one heartbeat in that window (engine/mesh/elastic_mesh.cc), so refuse it here, by key.
  if (d.dead_after_s <= d.heartbeat_s) {
    // Blame the one that was given: dead_after_s when it was, else heartbeat_s.
    const YAML::Node dead = r.get("dead_after_s"), beat = r.get("heartbeat_s");
    const bool dead_given = dead.IsDefined() && !dead.IsNull();
    std::ostringstream want;
    if (dead_given)
      want << "seconds > diloco.heartbeat_s (" << d.heartbeat_s << ")";
    else
      want << "seconds < diloco.dead_after_s (" << d.dead_after_s << ")";
    want << ": a member is evicted once it missed heartbeats for dead_after_s";
    r.fail(r.key_path(dead_given ? "dead_after_s" : "heartbeat_s"), want.str(),
           dead_given ? &dead : &beat);
  }
}

// worker: modeled|torch and the `trainer:` section, kept as YAML text: netsim does not know the
// trainer's keys; the torch worker kind (trainer/emulation) parses them with the trainer's own
// readers. With worker: torch the model and the batch come from the trainer section.
void parse_worker(Reader& r, const YAML::Node& root, Scenario& sc) {
  r.scalar<std::string>("worker", sc.worker, "modeled or torch",
                        [](const std::string& v) { return v == "modeled" || v == "torch"; });
  YAML::Node t = r.get("trainer");
  if (t && !t.IsNull()) {
    if (sc.worker != "torch") r.fail("trainer", "no trainer section unless worker: torch");
    if (!t.IsMap()) r.fail("trainer", "a mapping of trainer settings", &t);
    YAML::Emitter out;
    out << t;
    sc.trainer_yaml = out.c_str();
  }
  if (sc.worker != "torch") return;
  const YAML::Node& c = root;
  if (c["model"])
    r.fail("model", "no model section with worker: torch (the real model is trainer.model)");
  if (c["hardware"] && c["hardware"].IsMap() && c["hardware"]["batch_sequences"])
    r.fail("hardware.batch_sequences",
           "no value with worker: torch (the batch is trainer.data.batch)");
}

// network.sites_from: FILE (relative to the scenario) supplies network.sites, rtt, paths and
// variation, so that several scenarios share one table of measured paths. Keys given inline win; those taken
// from FILE are recorded in `origin`, so that errors in them name FILE.
void merge_sites_from(YAML::Node& root, Origin& origin, const std::string& base_dir) {
  const std::string& file = origin.file;
  if (!root.IsMap() || !root["network"] || !root["network"].IsMap()) return;
  YAML::Node net = root["network"];
  YAML::Node from = net["sites_from"];
  if (!from) return;
  const std::string key = "network.sites_from";
  if (!from.IsScalar()) throw ConfigError(file + ": key '" + key + "': expected a file path");
  std::filesystem::path p = from.as<std::string>();
  if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
  YAML::Node other;
  try {
    other = YAML::LoadFile(p.string());
  } catch (const YAML::Exception& e) {
    throw ConfigError(file + ": key '" + key + "': cannot read '" + p.string() + "': " + e.what());
  }
  if (!other.IsMap()) throw ConfigError(p.string() + ": expected a mapping with sites and rtt");
  for (auto it = other.begin(); it != other.end(); ++it) {
    if (!it->first.IsScalar()) throw ConfigError(p.string() + ": a key is not a name");
    const std::string k = it->first.Scalar();
    if (k != "sites" && k != "rtt" && k != "paths" && k != "variation")
      throw ConfigError(p.string() + ": unknown key '" + k +
                        "' (a sites file holds sites, rtt, paths and variation)");
    YAML::Node mine = net[k];
    if (mine && mine.IsMap() && it->second.IsMap()) {
      // A mapping given in both (network.variation): the scenario's keys win one by one, so
      // that `--set network.variation.bandwidth_cv=0` turns off one process, not all of them.
      for (auto kv = it->second.begin(); kv != it->second.end(); ++kv) {
        if (!kv->first.IsScalar()) throw ConfigError(p.string() + ": a key is not a name");
        const std::string sub = kv->first.Scalar();
        if (mine[sub]) continue;
        mine[sub] = kv->second;
        origin.other_files.emplace_back("network." + k + "." + sub, p.string());
      }
      continue;
    }
    if (mine) continue;
    net[k] = it->second;
    origin.other_files.emplace_back("network." + k, p.string());
  }
}

Scenario parse_root(YAML::Node root, Origin origin, const std::string& base_dir) {
  const std::string file = origin.file;
  merge_sites_from(root, origin, base_dir);
  Scenario sc;
  sc.file = file;
  Reader r(root, origin, "");
  {
    Reader run = r.child("run");
    run.scalar<std::string>("name", sc.run.name, "a run name");
    run.scalar<std::uint64_t>("seed", sc.run.seed, "a non-negative integer");
    run.scalar<std::string>("mode", sc.run.mode, "simulate",
                            [](const std::string& v) { return v == "simulate"; });
    run.scalar<int>("outer_steps", sc.run.outer_steps, "a positive integer", positive<int>());
    run.scalar<std::int64_t>("inner_steps", sc.run.inner_steps,
                             "an integer >= 0 (0: use outer_steps)", non_negative<std::int64_t>());
    run.scalar<std::string>(
        "driver", sc.run.driver,
        "engine (the model driver, formerly netsim, was removed: the engine driver is the only "
        "one; delete the key or write engine)",
        [](const std::string& v) { return v == "engine"; });
    run.finish();
  }
  parse_model(r.child("model"), sc.model);
  parse_hardware(r.child("hardware"), sc.hardware);
  parse_network(r.child("network"), sc.network);
  parse_diloco(r.child("diloco"), sc.diloco);
  {
    Reader churn = r.child("churn");
    churn.scalar<std::string>("trace", sc.churn_trace, "a CSV file path");
    churn.finish();
  }
  {
    Reader out = r.child("output");
    out.scalar<std::string>("dir", sc.output_dir, "a directory path");
    out.finish();
  }
  parse_worker(r, root, sc);
  r.finish();
  if (sc.run.name.empty()) {
    sc.run.name = std::filesystem::path(file).stem().string();
  }
  // runs/ (git-ignored), never results/: a run must not land on the committed, curated outputs.
  if (sc.output_dir.empty()) sc.output_dir = "runs/" + sc.run.name;
  if (sc.network.coordinator_site.empty() && !sc.network.sites.empty())
    sc.network.coordinator_site = sc.network.sites.front().name;
  return sc;
}

// What `text` is when it is not a scenario but a file a user might mistake for one; "" when
// nothing is recognised. Asked only once the text failed as a scenario, so never a false alarm.
std::string not_a_scenario_hint(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b);
    if (line[0] == '<')
      return "this looks like a SimGrid platform XML, not a scenario. A scenario is YAML (run, "
             "model, network, diloco, ...) that names such a file under network.platform_xml, "
             "e.g. `network: {platform_xml: two-sites.xml}` (scenarios/two-sites.xml; "
             "netsim/README.md)";
    const std::size_t eq = line.find('='), colon = line.find(':');
    const bool table = line[0] == '[' && line.find(']') != std::string::npos &&
                       line.find(',') == std::string::npos;
    if (table || (eq != std::string::npos && eq < colon))
      return "this looks like TOML, not a scenario. A scenario is YAML: `key: value`, sections "
             "as indented mappings (run:, model:, network:, diloco:, ...); netsim/README.md "
             "opens with one to copy";
    return "";
  }
  return "";
}

Scenario parse_text(const std::string& text, const std::string& file, const std::string& base_dir,
                    const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string hint = not_a_scenario_hint(text);
    throw ConfigError(file + ": " +
                      (hint.empty() ? "not valid YAML: " + std::string(e.what()) : hint));
  }
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    const std::string hint = not_a_scenario_hint(text);
    throw ConfigError(file + ": " +
                      (hint.empty() ? "expected a scenario: a YAML mapping with run, model, "
                                      "network, diloco, ..."
                                    : hint));
  }
  Origin origin;
  origin.file = file;
  for (auto& ov : overrides) origin.overrides.emplace_back(apply_override(root, ov, file), ov);
  return parse_root(root, origin, base_dir);
}

}  // namespace

Scenario parse_scenario(const std::string& yaml_text, const std::string& name,
                        const std::vector<std::string>& overrides) {
  return parse_text(yaml_text, name, "", overrides);
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a folder; expected a scenario file (YAML)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the scenario file");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  Scenario sc = parse_text(text.str(), path, base_dir, overrides);
  sc.base_dir = base_dir;
  return sc;
}

JsonObject Scenario::to_json() const {
  JsonObject run_j;
  run_j.add("name", run.name)
      .add("seed", run.seed)
      .add("mode", run.mode)
      .add("outer_steps", outer_steps())
      .add("inner_steps", run.inner_steps)
      .add("driver", run.driver);
  JsonObject model_j;
  model_j.add("layers", model.layers)
      .add("hidden", model.hidden)
      .add("heads", model.heads)
      .add("kv_heads", model.kv_heads)
      .add("ffn", model.ffn)
      .add("vocab", model.vocab)
      .add("seq_len", model.seq_len)
      .add("tied_embeddings", model.tied_embeddings);
  JsonObject hw;
  hw.add("gpus_per_node", hardware.gpus_per_node)
      .add("peak_flops_per_gpu", hardware.peak_flops_per_gpu)
      .add("mfu", hardware.mfu)
      .add("step_time_s", hardware.step_time_s)
      .add("batch_sequences", hardware.batch_sequences)
      .add("inner_step_s", inner_step_s());
  JsonObject net;
  net.add("model", network.model)
      .add("tcp_gamma_bytes", network.tcp_gamma_bytes)
      .add("crosstraffic", network.crosstraffic)
      .add("platform_xml", network.platform_xml)
      .add("sites_from", network.sites_from)
      .add("coordinator_site", network.coordinator_site)
      .add("coordinator_bandwidth_gbps", network.coordinator_bandwidth_gbps)
      .add("intra_site_rtt_ms", network.intra_site_rtt_ms)
      .add("access_bandwidth_gbps", std::vector<double>{network.access_bandwidth_gbps.first,
                                                        network.access_bandwidth_gbps.second});
  // Echoed only when set, so that runs of scenarios without it keep their earlier config record.
  if (network.rendezvous_trips > 0) net.add("rendezvous_trips", network.rendezvous_trips);
  if (network.store_kind != "single") {
    JsonObject store;
    std::string members;
    for (const std::string& m : network.store_members) members += (members.empty() ? "" : ",") + m;
    store.add("kind", network.store_kind)
        .add("members", members)
        .add("quorum_rtt_s", network.store_quorum_rtt_s());
    net.add("store", store);
  }
  JsonObject var;
  var.add("period_s", network.variability_period_s)
      .add("min_fraction", network.variability_min_fraction);
  net.add("variability", var);
  JsonObject tcp;
  tcp.add("cc", network.tcp.cc)
      .add("mss_bytes", network.tcp.mss_bytes)
      .add("initial_window_segments", network.tcp.initial_window_segments)
      .add("slow_start_after_idle", network.tcp.slow_start_after_idle)
      .add("rto_min_ms", network.tcp.rto_min_ms)
      .add("per_flow_cap_gbps", network.tcp.per_flow_cap_gbps);
  net.add("tcp", tcp);
  const VariationSpec& v = network.variation;
  JsonObject variation;
  variation.add("bandwidth_cv", v.bandwidth_cv)
      .add("bandwidth_correlation_s", v.bandwidth_correlation_s)
      .add("path_change_interval_s", v.path_change_interval_s)
      .add("path_change_rtt_fraction", v.path_change_rtt_fraction)
      .add("loss_episode_interval_s", v.loss_episode_interval_s)
      .add("loss_episode_s", v.loss_episode_s)
      .add("loss_episode_loss", v.loss_episode_loss)
      .add("source", v.source);
  net.add("variation", variation);
  std::string paths = "[";
  for (auto& e : network.paths) {
    JsonObject o;
    o.add("a", e.a).add("b", e.b).add("loss", e.loss).add("capacity_gbps", e.capacity_gbps);
    o.add("source", e.source);
    paths += (paths.size() > 1 ? "," : "") + o.str();
  }
  net.add_raw("paths", paths + "]");
  std::string sites = "[", rtts = "[", nodes = "[";
  for (auto& s : network.sites) {
    JsonObject o;
    o.add("name", s.name).add("region", s.region);
    sites += (sites.size() > 1 ? "," : "") + o.str();
  }
  for (auto& e : network.rtt) {
    JsonObject o;
    o.add("a", e.a).add("b", e.b).add("ms", e.rtt_ms).add("source", e.source);
    rtts += (rtts.size() > 1 ? "," : "") + o.str();
  }
  for (auto& g : network.nodes) {
    JsonObject o;
    o.add("site", g.site)
        .add("count", g.count)
        .add("start", g.start)
        .add("bandwidth_gbps", g.bandwidth_gbps)
        .add("speed_factor", g.speed_factor);
    nodes += (nodes.size() > 1 ? "," : "") + o.str();
  }
  net.add_raw("sites", sites + "]").add_raw("rtt", rtts + "]").add_raw("nodes", nodes + "]");
  JsonObject dl;
  dl.add("H", diloco.H)
      .add("codec", diloco.codec)
      .add("buckets", diloco.buckets)
      .add("local_ranks", diloco.local_ranks)
      .add("aggregate", diloco.aggregate)
      .add("max_chunk_bytes", diloco.max_chunk_bytes)
      .add("timeout_s", diloco.timeout_s)
      .add("retries", diloco.retries)
      .add("outer_opt_s", diloco.outer_opt_s)
      .add("checkpoint_s", diloco.checkpoint_s)
      .add("dead_after_s", diloco.dead_after_s)
      .add("heartbeat_s", diloco.heartbeat_s)
      .add("state_copies", diloco.state_copies)
      .add("recovery_chunk_bytes", diloco.recovery_chunk_bytes);
  JsonObject churn;
  churn.add("trace", churn_trace);
  JsonObject out;
  out.add("dir", output_dir);
  JsonObject all;
  all.add("file", file)
      .add("worker", worker)
      .add("run", run_j)
      .add("model", model_j)
      .add("hardware", hw)
      .add("network", net)
      .add("diloco", dl)
      .add("churn", churn)
      .add("output", out);
  return all;
}

}  // namespace meridian::netsim
