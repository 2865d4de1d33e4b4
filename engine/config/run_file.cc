// Run file parsing (run_file.h): strict (unknown keys are errors), every value typed and
// range-checked, errors name the file, the key path and the expectation (engine/config/reader.h).
#include "engine/config/run_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "engine/config/reader.h"
#include "engine/core/codec/codec.h"
#include "engine/core/error.h"

#ifndef MERIDIAN_TRAINER_CONFIG_DIR
#define MERIDIAN_TRAINER_CONFIG_DIR "trainer/configs"
#endif

namespace meridian::config {

std::uint64_t ModelSpec::non_embedding_params() const {
  const std::uint64_t h = hidden, d_head = hidden / heads, kv = kv_heads * d_head;
  const std::uint64_t per_layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h;
  const std::uint64_t head = tied_embeddings ? 0 : std::uint64_t(vocab) * h;
  return per_layer * layers + h + head;
}

std::uint64_t ModelSpec::param_count() const {
  return non_embedding_params() + std::uint64_t(vocab) * hidden;
}

double prime_flops_per_token(std::uint64_t non_embedding_params, int layers, int heads,
                             double head_dim, int seq_len) {
  return 6.0 * double(non_embedding_params) + 12.0 * layers * heads * head_dim * seq_len;
}

double ModelSpec::flops_per_token() const {
  return prime_flops_per_token(non_embedding_params(), layers, heads, double(hidden) / heads,
                               seq_len);
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

double RunFile::inner_step_s() const {
  if (hardware.step_time_s > 0) return hardware.step_time_s;
  return model.flops_per_token() * double(tokens_per_inner_step()) /
         (hardware.gpus_per_node * hardware.peak_flops_per_gpu * hardware.mfu);
}

int RunFile::outer_steps() const {
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

int RunFile::total_nodes() const {
  int n = 0;
  for (auto& g : network.nodes) n += g.count;
  return n;
}

namespace {

void parse_model_keys(Reader& r, ModelSpec& m) {
  r.scalar<std::string>("name", m.name, "a model name");
  r.scalar<int>("layers", m.layers, "a positive integer", positive<int>());
  r.scalar<int>("hidden", m.hidden, "a positive integer", positive<int>());
  r.scalar<int>("heads", m.heads, "a positive integer", positive<int>());
  r.scalar<int>("kv_heads", m.kv_heads, "a positive integer", positive<int>());
  r.scalar<int>("ffn", m.ffn, "a positive integer", positive<int>());
  r.scalar<int>("vocab", m.vocab, "a positive integer", positive<int>());
  r.scalar<int>("seq_len", m.seq_len, "a positive integer", positive<int>());
  r.scalar<bool>("tied_embeddings", m.tied_embeddings, "true or false");
  r.scalar<double>("rope_theta", m.rope_theta, "a positive number", positive<double>());
  r.scalar<double>("norm_eps", m.norm_eps, "a positive number", positive<double>());
  r.scalar<double>("init_std", m.init_std, "a positive number", positive<double>());
}

void parse_train(Reader r, TrainSpec& t) {
  r.scalar<int>("batch", t.batch, "a positive number of sequences", positive<int>());
  r.scalar<std::string>("bf16_autocast", t.bf16_autocast, "true, false or auto",
                        [](const std::string& v) {
                          return v == "true" || v == "false" || v == "auto";
                        });
  r.scalar<double>("lr", t.lr, "a positive learning rate", positive<double>());
  const auto fraction = [](const double& v) { return v >= 0 && v < 1; };
  r.scalar<double>("beta1", t.beta1, "a value in [0, 1)", fraction);
  r.scalar<double>("beta2", t.beta2, "a value in [0, 1)", fraction);
  r.scalar<double>("eps", t.eps, "a positive number", positive<double>());
  r.scalar<double>("weight_decay", t.weight_decay, "a value >= 0", non_negative<double>());
  r.scalar<double>("grad_clip", t.grad_clip, "a number (<= 0: no clipping)");
  r.scalar<std::int64_t>("warmup_steps", t.warmup_steps, "an integer >= 0",
                         non_negative<std::int64_t>());
  r.scalar<std::int64_t>("decay_start_step", t.decay_start_step,
                         "an integer >= 0, or -1 (no decay)",
                         [](const std::int64_t& v) { return v >= -1; });
  r.scalar<std::int64_t>("total_steps", t.total_steps, "an integer >= 0",
                         non_negative<std::int64_t>());
  r.scalar<double>("z_loss_weight", t.z_loss_weight, "a value >= 0", non_negative<double>());
  r.scalar<double>("target_loss", t.target_loss, "a validation loss > 0 (or 0: none)",
                   non_negative<double>());
  r.finish();
  if (t.decay_start_step >= 0 && t.total_steps <= t.decay_start_step)
    r.fail(r.key_path("total_steps"), "a step after train.decay_start_step when decay is on");
}

// A model config (trainer/configs/): a run file holding only `model:` and `train:`, read over
// `m` and `t`; where its keys came from goes to `given` when not null (the run file's own keys,
// read after, replace them).
void read_model_config(const std::string& path, ModelSpec& m, TrainSpec& t,
                       std::map<std::string, std::string>* given = nullptr) {
  Document doc = Document::load(path, {}, "model config");
  doc.origin().given = given;
  Reader r = doc.reader("a model config");
  const bool has_model = r.present("model");
  {
    Reader mr = r.child("model");
    parse_model_keys(mr, m);
    mr.finish();
  }
  parse_train(r.child("train"), t);
  r.finish();
  if (!has_model) throw ConfigError(path + ": missing the 'model' section");
}

// `model:` and `train:`; `model: NAME` is `model: {config: NAME}`. The config's model and train
// sections are the base the run file's keys override.
void parse_model_and_train(Reader& top, ModelSpec& m, TrainSpec& t) {
  YAML::Node model = top.get("model");
  const bool named = model && model.IsScalar();
  Reader r = named ? Reader(YAML::Node(), top.origin(), "model") : top.child("model");
  std::string config;
  if (named) {
    config = model.Scalar();
    if (config.empty() || config.find('\0') != std::string::npos)
      top.fail("model", "a model config name or a mapping of model keys", &model);
  } else {
    r.scalar<std::string>("config", config, "a model config name (trainer/configs/) or a .yaml path",
                          [](const std::string& v) {
                            return !v.empty() && v.find('\0') == std::string::npos;
                          });
  }
  if (!config.empty()) {
    std::string path;
    try {
      path = model_config_path(config, top.origin().base_dir_of("model"));
    } catch (const ConfigError& e) {
      top.fail(named ? "model" : "model.config", e.what(), named ? &model : nullptr);
    }
    m.config = config;
    read_model_config(path, m, t, top.origin().given);
  }
  if (!named) {
    parse_model_keys(r, m);
    r.finish();
  }
  if (m.hidden % m.heads != 0) r.fail(r.key_path("heads"), "a divisor of model.hidden");
  if (m.heads % m.kv_heads != 0) r.fail(r.key_path("kv_heads"), "a divisor of model.heads");
  parse_train(top.child("train"), t);
}

void parse_data(Reader r, DataSpec& d) {
  r.moved("batch", "the batch per node is train.batch");
  r.moved("seq_len", "the sequence length is model.seq_len");
  r.scalar<int>("shards", d.shards, "a positive integer (or 0: one per node)",
                non_negative<int>());
  r.scalar<std::string>("corpus", d.corpus, "fortunes or debian-docs", [](const std::string& v) {
    return v == "fortunes" || v == "debian-docs";
  });
  r.path_value("cache_dir", d.cache_dir, "a directory path");
  r.path_value("corpus_dir", d.corpus_dir, "a directory path");
  r.string_list("files", d.files, "a corpus file name or a list of them");
  r.scalar<int>("validation_sequences", d.validation_sequences, "a positive integer",
                positive<int>());
  r.finish();
}

void parse_recovery(Reader r, RecoverySpec& c) {
  r.scalar<double>("timeout_s", c.timeout_s, "seconds > 0", positive<double>());
  r.scalar<std::uint64_t>("chunk_bytes", c.chunk_bytes, "bytes >= 1024",
                          [](const std::uint64_t& v) { return v >= 1024; });
  r.scalar<int>("max_sources", c.max_sources, "a positive integer", positive<int>());
  r.scalar<bool>("blocking", c.blocking, "true or false");
  r.scalar<int>("state_copies", c.state_copies, "a positive integer", positive<int>());
  r.finish();
}

void parse_store(Reader& top, StoreSpec& s) {
  const YAML::Node given = top.get("store");
  if (given && given.IsScalar())
    top.fail("store", "a mapping: the etcd address moved to store.address, e.g. store: {address: "
                      "etcd://h1:2379,h2:2379}", &given);
  Reader r = top.child("store");
  r.scalar<std::string>("address", s.address, "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                        [](const std::string& v) {
                          return v.rfind("etcd://", 0) == 0 || v.rfind("etcds://", 0) == 0;
                        });
  r.scalar<std::string>("bind", s.bind, "an address (e.g. 127.0.0.1; 0.0.0.0: every interface)",
                        [](const std::string& v) { return !v.empty(); });
  r.finish();
}

void parse_checkpoint(Reader r, CheckpointSpec& k, bool given) {
  r.path_value("dir", k.dir, "a directory path (relative to the run file)");
  r.scalar<std::int64_t>("every_steps", k.every_steps, "an integer >= 0",
                         non_negative<std::int64_t>());
  r.scalar<double>("every_s", k.every_s, "seconds >= 0", non_negative<double>());
  r.scalar<int>("keep", k.keep, "a positive integer", positive<int>());
  r.finish();
  if (!given) return;
  if (k.dir.empty()) r.fail(r.key_path("dir"), "a directory path (relative to the run file)");
  if (k.every_steps == 0 && k.every_s == 0)
    r.fail(r.key_path("every_steps"), "every_steps or every_s (or both) above 0");
}

void parse_hardware(Reader r, HardwareSpec& h) {
  r.scalar<int>("gpus_per_node", h.gpus_per_node, "a positive integer", positive<int>());
  r.scalar<double>("peak_flops_per_gpu", h.peak_flops_per_gpu, "FLOP/s > 0", positive<double>());
  r.scalar<double>("mfu", h.mfu, "a fraction in (0, 1]",
                   [](const double& v) { return v > 0 && v <= 1; });
  r.scalar<double>("step_time_s", h.step_time_s, "seconds >= 0 (0: from FLOPs)",
                   non_negative<double>());
  r.moved("batch_sequences", "the batch per node is train.batch");
  r.finish();
}

// A list under key `k` of `r` (a null node when absent); ConfigError when it is not a list.
YAML::Node sequence(Reader& r, const std::string& k) {
  YAML::Node s = r.get(k);
  if (s && !s.IsNull() && !s.IsSequence()) r.fail(r.key_path(k), "a list", &s);
  return s;
}

// A site that network.sites does not list: the error gives the value, where it stands and the
// names it could have been.
void known_site(Reader& s, const std::string& k, const std::string& v, const NetworkSpec& n) {
  for (const SiteSpec& site : n.sites)
    if (site.name == v) return;
  const YAML::Node given = s.get(k);
  std::string names;
  for (const SiteSpec& site : n.sites) names += (names.empty() ? "" : ", ") + site.name;
  s.fail(s.key_path(k),
         names.empty() ? std::string("a site, but network.sites lists none")
                       : "one of the sites listed in network.sites (" + names + ")",
         &given);
}

// network.access_bandwidth_gbps: one bandwidth, or a range nodes draw from.
void parse_access_bandwidth(Reader& r, NetworkSpec& n) {
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

// network.sites: each a unique name and a description.
void parse_sites(Reader& r, NetworkSpec& n) {
  std::set<std::string> site_names;
  YAML::Node sites = sequence(r, "sites");
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
}

// network.rtt: a measured round-trip time, with its source, per site pair.
void parse_rtt(Reader& r, NetworkSpec& n) {
  YAML::Node rtt = sequence(r, "rtt");
  for (std::size_t i = 0; rtt && i < rtt.size(); ++i) {
    Reader s = r.element(rtt[i], r.key_path("rtt[" + std::to_string(i) + "]"));
    RttSpec e;
    s.scalar<std::string>("a", e.a, "a site name");
    s.scalar<std::string>("b", e.b, "a site name");
    s.scalar<double>("ms", e.rtt_ms, "a round-trip time in ms > 0", positive<double>());
    s.scalar<std::string>("source", e.source, "where the number comes from");
    s.finish();
    known_site(s, "a", e.a, n);
    known_site(s, "b", e.b, n);
    if (e.rtt_ms <= 0) s.fail(s.key_path("ms"), "a round-trip time in ms > 0");
    if (e.source.empty()) s.fail(s.key_path("source"), "the source of the measurement");
    n.rtt.push_back(e);
  }
}

// network.paths: the loss and shared capacity of a site pair, with their source.
void parse_paths(Reader& r, NetworkSpec& n) {
  YAML::Node paths = sequence(r, "paths");
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
    known_site(s, "a", e.a, n);
    known_site(s, "b", e.b, n);
    if (e.source.empty()) s.fail(s.key_path("source"), "the source of the numbers");
    for (const PathSpec& other : n.paths)
      if ((other.a == e.a && other.b == e.b) || (other.a == e.b && other.b == e.a))
        s.fail(s.key_path("b"), "one entry per site pair (" + e.a + " / " + e.b + " is listed twice)");
    n.paths.push_back(e);
  }
}

// network.variation: the network's variation in time, with its source.
void parse_variation(Reader v, VariationSpec& x) {
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
  v.scalar<double>("loss_episode_loss", x.loss_episode_loss, "a packet loss fraction in [0, 0.5)",
                   [](const double& f) { return f >= 0 && f < 0.5; });
  v.scalar<double>("access_cv", x.access_cv, "a coefficient of variation >= 0",
                   non_negative<double>());
  v.scalar<double>("access_correlation_s", x.access_correlation_s, "seconds >= 0",
                   non_negative<double>());
  v.scalar<std::string>("source", x.source, "where the numbers come from");
  v.finish();
  const bool any = x.bandwidth_cv > 0 || x.path_change_interval_s > 0 ||
                   x.loss_episode_interval_s > 0 || x.access_cv > 0;
  if (any && x.source.empty()) v.fail(v.key_path("source"), "the source of the numbers");
}

// network.tcp: the congestion control and the stack's settings.
void parse_tcp(Reader t, TcpSpec& x) {
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

// network.nodes: groups of nodes per site.
void parse_nodes(Reader& r, NetworkSpec& n) {
  YAML::Node nodes = sequence(r, "nodes");
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
    known_site(s, "site", g.site, n);
    n.nodes.push_back(g);
  }
}

// What holds across network's keys: an RTT per site pair, the coordinator's and the etcd
// members' sites, a starting node group.
void check_network(Reader& r, NetworkSpec& n) {
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
  if (!n.coordinator_site.empty()) known_site(r, "coordinator_site", n.coordinator_site, n);
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
        if (std::none_of(n.sites.begin(), n.sites.end(),
                         [&](const SiteSpec& x) { return x.name == site; }))
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
  // Both vary each access link's bandwidth, and a link takes one bandwidth profile (SimGrid
  // aborted the run with "Refusing to define trace ... twice").
  if (n.variability_period_s > 0 && n.variability_min_fraction < 1 && n.variation.access_cv > 0)
    r.fail(r.key_path("variation.access_cv"),
           "0 when network.variability is on (both vary the access links' bandwidth: give one)");
  bool any_start = false;
  for (const NodeGroup& g : n.nodes) any_start |= g.start;
  // The engine's mesh needs an initial world of at least one node.
  if (!any_start) r.fail(r.key_path("nodes"), "at least one node group with start: true");
}

void parse_network(Reader r, NetworkSpec& n) {
  r.scalar<std::string>("model", n.model, "one of CM02, LV08, SMPI, IB", [](const std::string& v) {
    return v == "CM02" || v == "LV08" || v == "SMPI" || v == "IB";
  });
  r.scalar<double>("tcp_gamma_bytes", n.tcp_gamma_bytes, "bytes > 0", positive<double>());
  r.scalar<bool>("crosstraffic", n.crosstraffic, "true or false");
  r.scalar<int>("rendezvous_trips", n.rendezvous_trips, "an integer from 0 to 8",
                [](int v) { return v >= 0 && v <= 8; });
  r.path_value("platform_xml", n.platform_xml, "a file path");
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
  parse_access_bandwidth(r, n);
  {
    Reader v = r.child("variability");
    v.scalar<double>("period_s", n.variability_period_s, "seconds >= 0 (0: off)",
                     non_negative<double>());
    v.scalar<double>("min_fraction", n.variability_min_fraction, "a fraction in (0, 1]",
                     [](const double& x) { return x > 0 && x <= 1; });
    v.finish();
  }
  parse_sites(r, n);
  parse_rtt(r, n);
  parse_paths(r, n);
  parse_variation(r.child("variation"), n.variation);
  parse_tcp(r.child("tcp"), n.tcp);
  parse_nodes(r, n);
  r.finish();
  check_network(r, n);
}

// The diloco keys that constrain one another, each error naming the key to change.
void check_diloco(Reader& r, const DilocoSpec& d) {
  // Streaming's schedule needs a part of the H inner steps per fragment, and each fragment's
  // sync to end within its part; and it is one way of overlapping the sync, overlap another.
  if (d.fragments > d.H)
    r.fail(r.key_path("fragments"),
           "at most diloco.H (" + std::to_string(d.H) + "): one part of the inner steps each");
  if (d.fragment_delay > d.H / d.fragments)
    r.fail(r.key_path("fragment_delay"),
           "at most diloco.H / diloco.fragments (" + std::to_string(d.H / d.fragments) +
               "): a fragment's sync ends within its part of the inner steps");
  if (d.codec != "topk")
    for (const char* key : {"topk_density", "topk_bits", "error_feedback", "sparse_collective"})
      if (const YAML::Node n = r.get(key); n.IsDefined() && !n.IsNull())
        r.fail(r.key_path(key), "absent unless diloco.codec is topk (it is " + d.codec + ")", &n);
  if ((d.fragments > 1 || d.fragment_delay > 0 || d.fragment_alpha != 0) && d.overlap != "none")
    r.fail(r.key_path("overlap"),
           "none when streaming (diloco.fragments, fragment_delay, fragment_alpha are set): "
           "they are two ways of overlapping the sync");
  // The engine's mesh evicts a member that missed heartbeats for dead_after_s: it needs at least
  // one heartbeat in that window (engine/core/mesh/elastic_mesh.cc), so refuse it here, by key.
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

void parse_diloco(Reader r, DilocoSpec& d) {
  r.scalar<int>("H", d.H, "a positive integer", positive<int>());
  r.scalar<std::string>("codec", d.codec, "one of " + codec_choices(), [](const std::string& v) {
    return std::any_of(std::begin(kAllCodecIds), std::end(kAllCodecIds),
                       [&](CodecId id) { return codec_name(id) == v; });
  });
  r.scalar<std::string>("overlap", d.overlap,
                        "one of none (blocking), delayed, eager: whether the next inner steps "
                        "run during the all-reduce (engine/core/diloco/README.md)",
                        [](const std::string& v) {
                          return std::any_of(
                              std::begin(kAllOverlaps), std::end(kAllOverlaps),
                              [&](Overlap o) { return v == overlap_name(o); });
                        });
  r.scalar<int>("fragments", d.fragments,
                "a positive integer (streaming DiLoCo's fragments; 1 = the whole model at once)",
                positive<int>());
  r.scalar<int>("fragment_delay", d.fragment_delay,
                "an integer >= 0 (inner steps a fragment's all-reduce runs beside)",
                non_negative<int>());
  r.scalar<double>("fragment_alpha", d.fragment_alpha,
                   "a value in [0, 1] (the local copy's weight when a fragment is merged)",
                   [](const double& v) { return v >= 0 && v <= 1; });
  r.scalar<double>("topk_density", d.topk_density,
                   "a value in (0, 1] (codec topk: values kept per value, 0.02 = 2 %)",
                   [](const double& v) { return v > 0 && v <= 1; });
  r.scalar<int>("topk_bits", d.topk_bits, "an integer in [1, 8] (codec topk: bits per value)",
                [](const int& v) { return v >= 1 && v <= 8; });
  r.scalar<double>("error_feedback", d.error_feedback,
                   "a value in [0, 1] (codec topk: the error feedback's decay beta)",
                   [](const double& v) { return v >= 0 && v <= 1; });
  r.scalar<std::string>(
      "sparse_collective", d.sparse_collective,
      "auto, gather or ring (codec topk: how the terms are summed)", [](const std::string& v) {
        return std::any_of(std::begin(kAllSparseCollectives), std::end(kAllSparseCollectives),
                           [&](SparseCollective c) { return v == sparse_collective_name(c); });
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
  r.scalar<int>("nonfinite_evict_after", d.nonfinite_evict_after,
                "an integer >= 0 (outer steps in a row a member may sit out with a non-finite "
                "pseudo-gradient before it is evicted; 0 = never)",
                non_negative<int>());
  r.scalar<double>("outer_opt_s", d.outer_opt_s, "seconds >= 0", non_negative<double>());
  r.scalar<double>("checkpoint_s", d.checkpoint_s, "seconds >= 0", non_negative<double>());
  r.scalar<double>("dead_after_s", d.dead_after_s, "seconds > 0", positive<double>());
  r.scalar<double>("heartbeat_s", d.heartbeat_s, "seconds > 0", positive<double>());
  r.scalar<double>("outer_lr", d.outer_lr, "a positive learning rate", positive<double>());
  r.scalar<double>("outer_momentum", d.outer_momentum, "a value in [0, 1)",
                   [](const double& v) { return v >= 0 && v < 1; });
  r.scalar<double>("admission_timeout_s", d.admission_timeout_s,
                   "seconds >= 0 (0: the mode's default)", non_negative<double>());
  r.scalar<double>("round_timeout_s", d.round_timeout_s, "seconds >= 0 (0: the mode's default)",
                   non_negative<double>());
  r.moved("state_copies", "it is recovery.state_copies");
  r.moved("recovery_chunk_bytes", "it is recovery.chunk_bytes");
  r.moved("inner_steps", "H is diloco.H");
  r.moved("allreduce_timeout_s", "it is diloco.timeout_s");
  r.moved("max_retries", "it is diloco.retries");
  r.finish();
  check_diloco(r, d);
}

// worker: modeled|torch (simulation): who computes the inner steps.
void parse_worker(Reader& r, RunFile& f) {
  r.scalar<std::string>("worker", f.worker, "modeled or torch",
                        [](const std::string& v) { return v == "modeled" || v == "torch"; });
  r.moved("trainer", "the trainer section became the top-level model (model.config: NAME), "
                     "train and data sections, and outer_lr / outer_momentum moved to diloco");
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
  const std::string other_dir = p.parent_path().string();
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
        origin.other_files.push_back({"network." + k + "." + sub, p.string(), other_dir});
      }
      continue;
    }
    if (mine) continue;
    net[k] = it->second;
    origin.other_files.push_back({"network." + k, p.string(), other_dir});
  }
}

RunFile parse_root(Document& doc) {
  Origin& origin = doc.origin();
  YAML::Node& root = doc.root();
  merge_sites_from(root, origin, origin.base_dir);
  RunFile f;
  f.file = origin.file;
  f.base_dir = origin.base_dir;
  origin.given = &f.given;  // every key read below says where it came from
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.IsScalar()) f.sections.push_back(it->first.Scalar());
  Reader r = doc.reader();
  // The top-level keys of RUN.yaml, the real runs' former file.
  r.moved("seed", "it is run.seed");
  r.moved("nodes", "it is run.nodes");
  r.moved("outer_steps", "it is run.outer_steps");
  r.moved("output_dir", "it is output.dir");
  r.moved("store_bind", "it is store.bind");
  r.moved("heartbeat", "heartbeat.interval_s is diloco.heartbeat_s and heartbeat.dead_after_s "
                       "is diloco.dead_after_s");
  {
    Reader run = r.child("run");
    run.scalar<std::string>("name", f.run.name, "a run name");
    run.scalar<std::uint64_t>("seed", f.run.seed, "a non-negative integer");
    run.scalar<std::string>("mode", f.run.mode, "simulate",
                            [](const std::string& v) { return v == "simulate"; });
    run.scalar<int>("outer_steps", f.run.outer_steps, "a positive integer", positive<int>());
    run.scalar<std::int64_t>("inner_steps", f.run.inner_steps,
                             "an integer >= 0 (0: use outer_steps)", non_negative<std::int64_t>());
    run.scalar<int>("nodes", f.run.nodes, "a positive integer (or 0: network.nodes' count)",
                    non_negative<int>());
    run.scalar<std::string>(
        "driver", f.run.driver,
        "engine (the model driver, formerly netsim, was removed: the engine driver is the only "
        "one; delete the key or write engine)",
        [](const std::string& v) { return v == "engine"; });
    run.finish();
  }
  parse_model_and_train(r, f.model, f.train);
  parse_hardware(r.child("hardware"), f.hardware);
  // No network section: a file for real runs only (a simulation refuses it, validate_for).
  if (r.present("network"))
    parse_network(r.child("network"), f.network);
  else
    r.get("network");
  parse_diloco(r.child("diloco"), f.diloco);
  parse_recovery(r.child("recovery"), f.recovery);
  parse_data(r.child("data"), f.data);
  parse_store(r, f.store);
  {
    Reader t = r.child("transport");
    t.scalar<std::string>("kind", f.transport.kind, "gloo or nccl",
                          [](const std::string& v) { return v == "gloo" || v == "nccl"; });
    t.scalar<int>("connections_per_peer", f.transport.connections_per_peer,
                  "an integer from 1 to " + std::to_string(kMaxConnectionsPerPeer),
                  [](int k) { return k >= 1 && k <= kMaxConnectionsPerPeer; });
    t.finish();
  }
  parse_checkpoint(r.child("checkpoint"), f.checkpoint, r.present("checkpoint"));
  {
    Reader churn = r.child("churn");
    churn.path_value("trace", f.churn_trace, "a CSV file path");
    churn.finish();
  }
  {
    Reader out = r.child("output");
    out.path_value("dir", f.output_dir, "a directory path (relative to the run file)");
    out.finish();
  }
  parse_worker(r, f);
  r.finish();
  if (f.run.name.empty()) f.run.name = std::filesystem::path(f.file).stem().string();
  if (f.model.name.empty()) f.model.name = f.model.config.empty() ? "unnamed" : f.model.config;
  // runs/ (git-ignored), never results/: a run must not land on the committed, curated outputs.
  if (f.output_dir.empty()) f.output_dir = "runs/" + f.run.name;
  if (f.network.coordinator_site.empty() && !f.network.sites.empty())
    f.network.coordinator_site = f.network.sites.front().name;
  return f;
}

// What `text` is when it is not a run file but a file a user might mistake for one; "" when
// nothing is recognised. Asked only once the text failed as a run file, so never a false alarm.
std::string not_a_run_file_hint(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b);
    if (line[0] == '<')
      return "this looks like a SimGrid platform XML, not a run file. A run file is YAML (run, "
             "model, network, diloco, ...) that names such a file under network.platform_xml, "
             "e.g. `network: {platform_xml: two-sites.xml}` (scenarios/two-sites.xml; "
             "netsim/README.md)";
    const std::size_t eq = line.find('='), colon = line.find(':');
    const bool table = line[0] == '[' && line.find(']') != std::string::npos &&
                       line.find(',') == std::string::npos;
    if (table || (eq != std::string::npos && eq < colon))
      return "this looks like TOML, not a run file. A run file is YAML: `key: value`, sections "
             "as indented mappings (run:, model:, network:, diloco:, ...); netsim/README.md "
             "opens with one to copy";
    return "";
  }
  return "";
}

}  // namespace

std::string model_config_dir() { return MERIDIAN_TRAINER_CONFIG_DIR; }

std::string model_config_path(const std::string& name_or_path, const std::string& base_dir) {
  if (name_or_path.find('\0') != std::string::npos)
    throw ConfigError("a model config name or path with a NUL byte");
  std::filesystem::path path;
  if (name_or_path.ends_with(".yaml") || name_or_path.find('/') != std::string::npos) {
    path = name_or_path;
    if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
  } else {
    path = std::filesystem::path(model_config_dir()) / (name_or_path + ".yaml");
  }
  std::error_code error;  // a name the file system rejects (too long, ...) is not found either
  if (std::filesystem::is_regular_file(path, error)) return path.lexically_normal().string();
  if (std::filesystem::exists(path, error))
    throw ConfigError(path.string() + ": not a regular file (a model config is a .yaml file)");
  std::string names;
  for (const auto& e : std::filesystem::directory_iterator(model_config_dir(), error))
    if (e.path().extension() == ".yaml") names += (names.empty() ? "" : ", ") + e.path().stem().string();
  throw ConfigError("a model config: one of " + (names.empty() ? std::string("(none found)") : names) +
                    " in " + model_config_dir() + ", or a path to a .yaml file ('" +
                    name_or_path + "' is neither)");
}

ModelConfigFile load_model_config(const std::string& name_or_path) {
  return load_model_config_file(model_config_path(name_or_path, ""));
}

ModelConfigFile load_model_config_file(const std::string& path) {
  ModelConfigFile c;
  c.path = path;
  read_model_config(c.path, c.model, c.train);
  if (c.model.name.empty()) c.model.name = std::filesystem::path(c.path).stem().string();
  return c;
}

RunFile parse_run_file(const std::string& yaml_text, const std::string& name,
                       const std::vector<std::string>& overrides, const std::string& base_dir) {
  Document doc(yaml_text, name, base_dir, overrides, not_a_run_file_hint);
  return parse_root(doc);
}

RunFile load_run_file(const std::string& path, const std::vector<std::string>& overrides) {
  Document doc = Document::load(path, overrides, "run file", not_a_run_file_hint);
  return parse_root(doc);
}

int RunFile::starting_nodes() const {
  int n = 0;
  for (const NodeGroup& g : network.nodes) n += g.start ? g.count : 0;
  return n;
}

int RunFile::initial_nodes() const {
  if (run.nodes > 0) return run.nodes;
  return std::max(1, starting_nodes());
}

std::vector<std::string> RunFile::notes_for(Mode mode) const {
  std::vector<std::string> notes;
  const auto has_section = [&](const char* s) {
    return std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  const auto note = [&](const char* s, const std::string& why) {
    if (has_section(s)) notes.push_back(file + ": " + s + ": not used by " + why + " (ignored)");
  };
  if (mode == Mode::kReal) {
    for (const char* s : {"hardware", "network", "churn"})
      note(s, "a real run (it describes the simulated world)");
    if (worker != "modeled") note("worker", "a real run (real nodes always train)");
  } else {
    for (const char* s : {"store", "checkpoint"}) note(s, "a simulation (it configures real runs)");
    // transport.connections_per_peer is simulated (K connections per flow); the kind is not.
    if (given.count("transport.kind"))
      notes.push_back(file + ": transport.kind: not used by a simulation (ignored)");
    if (worker == "modeled") note("data", "a simulation with worker: modeled");
    // INTELLECT-1's blocking checkpoint is the default: say so where it weighs (issue 34: a
    // 4-node toy spent 240 of 252 simulated seconds in checkpoints without a word).
    const double compute_s = diloco.H * inner_step_s();
    const bool checkpoint_given = given.count("diloco.checkpoint_s") > 0;  // else the default
    if (!checkpoint_given && diloco.checkpoint_s > 0.05 * compute_s) {
      char text[320];
      std::snprintf(text, sizeof text,
                    "%s: diloco.checkpoint_s: the default, INTELLECT-1's blocking %.0f s "
                    "checkpoint per outer step, is %.0f %% of this scenario's %.3g s of inner "
                    "steps per outer step; set diloco.checkpoint_s (0: none) to choose",
                    file.c_str(), diloco.checkpoint_s, 100 * diloco.checkpoint_s / compute_s,
                    compute_s);
      notes.push_back(text);
    }
    // A checkpoint the scenario chose that blocks longer than the compute it follows.
    if (checkpoint_given && compute_s > 0 && diloco.checkpoint_s > compute_s) {
      char text[320];
      std::snprintf(text, sizeof text,
                    "%s: diloco.checkpoint_s: a blocking %.3g s checkpoint per outer step is "
                    "longer than the %.3g s of inner steps it follows: compute utilization at "
                    "most %.0f %%",
                    file.c_str(), diloco.checkpoint_s, compute_s,
                    100 * compute_s / (compute_s + diloco.checkpoint_s));
      notes.push_back(text);
    }
    // INTELLECT-1's per-node defaults (8 H100s, 128 sequences of 8,192 tokens a step) on a model
    // far smaller than its 10 B: a planner of a small run rarely means them.
    const double params = static_cast<double>(model.param_count());
    if (params < 1e9) {
      std::string keys;
      const auto inherited = [&](const char* key, const std::string& value) {
        if (!given.count(key)) keys += std::string(keys.empty() ? "" : ", ") + key + " " + value;
      };
      inherited("hardware.gpus_per_node", std::to_string(hardware.gpus_per_node));
      inherited("train.batch", std::to_string(train.batch));
      if (!keys.empty()) {
        char text[400];
        std::snprintf(text, sizeof text,
                      "%s: the model has %.3g M parameters, but these keys keep INTELLECT-1's "
                      "per-node defaults (a 10 B model on 8 H100s): %s; set them for this run's "
                      "nodes",
                      file.c_str(), params / 1e6, keys.c_str());
        notes.push_back(text);
      }
    }
  }
  return notes;
}

void check_for(const RunFile& f, Mode mode) {
  if (mode == Mode::kSimulate && f.network.nodes.empty())
    throw ConfigError(f.file + ": a simulation needs a network section (sites, rtt and nodes, "
                               "or platform_xml and nodes; netsim/README.md)");
}

DilocoOptions diloco_options(const RunFile& f, Mode mode) {
  DilocoOptions o;
  const DilocoSpec& d = f.diloco;
  o.inner_steps = d.H;
  o.outer_steps = f.outer_steps();
  o.codec = parse_codec(d.codec);
  o.codec_params.topk_density = d.topk_density;
  o.codec_params.topk_bits = d.topk_bits;
  o.error_feedback = static_cast<float>(d.error_feedback_or_default());
  o.sparse_collective = parse_sparse_collective(d.sparse_collective);
  o.overlap = parse_overlap(d.overlap);
  o.fragments = d.fragments;
  o.fragment_delay = d.fragment_delay;
  o.fragment_alpha = static_cast<float>(d.fragment_alpha);
  o.outer.lr = static_cast<float>(d.outer_lr);
  o.outer.momentum = static_cast<float>(d.outer_momentum);
  o.local_ranks = d.local_ranks;
  o.allreduce_timeout_s = d.timeout_s;
  o.max_chunk_bytes = d.max_chunk_bytes;
  o.recovery.chunk_bytes = f.recovery.chunk_bytes;
  o.recovery.timeout_s = f.recovery.timeout_s;
  o.recovery.max_sources = f.recovery.max_sources;
  o.recovery.blocking = f.recovery.blocking;
  o.mesh.heartbeat_interval_s = d.heartbeat_s;
  o.mesh.dead_after_s = d.dead_after_s;
  o.mesh.max_retries = d.retries;
  o.mesh.nonfinite_evict_after = d.nonfinite_evict_after;
  o.mesh.initial_world = f.initial_nodes();
  o.mesh.outer_steps = o.outer_steps;
  // 0 = the mode's default: the engine's 600 s for real runs; in simulation a joiner waits for
  // the next boundary however long an outer step is (one INTELLECT-1 outer step is ~2,900 s), and
  // a member for the next record while a joiner recovers (163 GB at 0.5-4 Gb/s: 10-40 minutes).
  const double unbounded = std::numeric_limits<double>::infinity();
  const double fallback = mode == Mode::kSimulate ? unbounded : MeshOptions{}.admission_timeout_s;
  o.mesh.admission_timeout_s = d.admission_timeout_s > 0 ? d.admission_timeout_s : fallback;
  o.mesh.round_timeout_s = d.round_timeout_s > 0 ? d.round_timeout_s : fallback;
  o.phantom_outer_opt_s = d.outer_opt_s;
  return o;
}

namespace {

JsonObject tcp_json(const TcpSpec& t) {
  JsonObject tcp;
  tcp.add("cc", t.cc)
      .add("mss_bytes", t.mss_bytes)
      .add("initial_window_segments", t.initial_window_segments)
      .add("slow_start_after_idle", t.slow_start_after_idle)
      .add("rto_min_ms", t.rto_min_ms)
      .add("per_flow_cap_gbps", t.per_flow_cap_gbps);
  return tcp;
}

JsonObject variation_json(const VariationSpec& v) {
  JsonObject variation;
  variation.add("bandwidth_cv", v.bandwidth_cv)
      .add("bandwidth_correlation_s", v.bandwidth_correlation_s)
      .add("path_change_interval_s", v.path_change_interval_s)
      .add("path_change_rtt_fraction", v.path_change_rtt_fraction)
      .add("loss_episode_interval_s", v.loss_episode_interval_s)
      .add("loss_episode_s", v.loss_episode_s)
      .add("loss_episode_loss", v.loss_episode_loss)
      .add("access_cv", v.access_cv)
      .add("access_correlation_s", v.access_correlation_s)
      .add("source", v.source);
  return variation;
}

// The network's lists (paths, sites, rtt, nodes), each an array of objects.
void add_network_lists(const NetworkSpec& n, JsonObject& net) {
  std::string paths = "[";
  for (auto& e : n.paths) {
    JsonObject o;
    o.add("a", e.a).add("b", e.b).add("loss", e.loss).add("capacity_gbps", e.capacity_gbps);
    o.add("source", e.source);
    paths += (paths.size() > 1 ? "," : "") + o.str();
  }
  net.add_raw("paths", paths + "]");
  std::string sites = "[", rtts = "[", nodes = "[";
  for (auto& s : n.sites) {
    JsonObject o;
    o.add("name", s.name).add("region", s.region);
    sites += (sites.size() > 1 ? "," : "") + o.str();
  }
  for (auto& e : n.rtt) {
    JsonObject o;
    o.add("a", e.a).add("b", e.b).add("ms", e.rtt_ms).add("source", e.source);
    rtts += (rtts.size() > 1 ? "," : "") + o.str();
  }
  for (auto& g : n.nodes) {
    JsonObject o;
    o.add("site", g.site)
        .add("count", g.count)
        .add("start", g.start)
        .add("bandwidth_gbps", g.bandwidth_gbps)
        .add("speed_factor", g.speed_factor);
    nodes += (nodes.size() > 1 ? "," : "") + o.str();
  }
  net.add_raw("sites", sites + "]").add_raw("rtt", rtts + "]").add_raw("nodes", nodes + "]");
}

JsonObject network_json(const NetworkSpec& n) {
  JsonObject net;
  net.add("model", n.model)
      .add("tcp_gamma_bytes", n.tcp_gamma_bytes)
      .add("crosstraffic", n.crosstraffic)
      .add("platform_xml", n.platform_xml)
      .add("sites_from", n.sites_from)
      .add("coordinator_site", n.coordinator_site)
      .add("coordinator_bandwidth_gbps", n.coordinator_bandwidth_gbps)
      .add("intra_site_rtt_ms", n.intra_site_rtt_ms)
      .add("access_bandwidth_gbps",
           std::vector<double>{n.access_bandwidth_gbps.first, n.access_bandwidth_gbps.second});
  // Echoed only when set, so that runs of scenarios without it keep their earlier config record.
  if (n.rendezvous_trips > 0) net.add("rendezvous_trips", n.rendezvous_trips);
  if (n.store_kind != "single") {
    JsonObject store;
    std::string members;
    for (const std::string& m : n.store_members) members += (members.empty() ? "" : ",") + m;
    store.add("kind", n.store_kind)
        .add("members", members)
        .add("quorum_rtt_s", n.store_quorum_rtt_s());
    net.add("store", store);
  }
  JsonObject var;
  var.add("period_s", n.variability_period_s).add("min_fraction", n.variability_min_fraction);
  net.add("variability", var);
  net.add("tcp", tcp_json(n.tcp));
  net.add("variation", variation_json(n.variation));
  add_network_lists(n, net);
  return net;
}

JsonObject diloco_json(const DilocoSpec& d) {
  JsonObject dl;
  dl.add("H", d.H).add("codec", d.codec);
  if (d.codec == "topk")
    dl.add("topk_density", d.topk_density)
        .add("topk_bits", d.topk_bits)
        .add("error_feedback", d.error_feedback_or_default());
  if (d.sparse_collective != "auto") dl.add("sparse_collective", d.sparse_collective);
  if (d.overlap != "none") dl.add("overlap", d.overlap);
  if (d.fragments != 1 || d.fragment_delay != 0 || d.fragment_alpha != 0)
    dl.add("fragments", d.fragments)
        .add("fragment_delay", d.fragment_delay)
        .add("fragment_alpha", d.fragment_alpha);
  dl.add("buckets", d.buckets)
      .add("local_ranks", d.local_ranks)
      .add("aggregate", d.aggregate)
      .add("max_chunk_bytes", d.max_chunk_bytes)
      .add("timeout_s", d.timeout_s)
      .add("retries", d.retries)
      .add("nonfinite_evict_after", d.nonfinite_evict_after)
      .add("outer_opt_s", d.outer_opt_s)
      .add("checkpoint_s", d.checkpoint_s)
      .add("dead_after_s", d.dead_after_s)
      .add("heartbeat_s", d.heartbeat_s)
      .add("outer_lr", d.outer_lr)
      .add("outer_momentum", d.outer_momentum)
      .add("admission_timeout_s", d.admission_timeout_s)
      .add("round_timeout_s", d.round_timeout_s);
  return dl;
}

}  // namespace

JsonObject RunFile::to_json() const {
  JsonObject run_j;
  run_j.add("name", run.name)
      .add("seed", run.seed)
      .add("mode", run.mode)
      .add("outer_steps", outer_steps())
      .add("inner_steps", run.inner_steps)
      .add("nodes", run.nodes)
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
  if (!model.config.empty()) model_j.add("config", model.config).add("name", model.name);
  JsonObject hw;
  hw.add("gpus_per_node", hardware.gpus_per_node)
      .add("peak_flops_per_gpu", hardware.peak_flops_per_gpu)
      .add("mfu", hardware.mfu)
      .add("step_time_s", hardware.step_time_s)
      .add("inner_step_s", inner_step_s());
  const JsonObject net = network_json(network);
  const JsonObject dl = diloco_json(diloco);
  JsonObject rec;
  rec.add("timeout_s", recovery.timeout_s)
      .add("chunk_bytes", recovery.chunk_bytes)
      .add("max_sources", recovery.max_sources)
      .add("blocking", recovery.blocking)
      .add("state_copies", recovery.state_copies);
  JsonObject tr;
  tr.add("batch", train.batch);
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
      .add("train", tr)
      .add("diloco", dl)
      .add("recovery", rec)
      .add("churn", churn)
      .add("output", out);
  // Only when not the default, so that every record written before the key existed reproduces.
  if (transport.connections_per_peer != 1) {
    JsonObject tp;
    tp.add("connections_per_peer", transport.connections_per_peer);
    all.add("transport", tp);
  }
  return all;
}

}  // namespace meridian::config
