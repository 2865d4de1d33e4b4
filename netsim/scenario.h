// Scenario: the resolved description of one simulated run, parsed from YAML (strictly: an
// unknown key or a bad value is a ConfigError naming the file, the key and what was expected).
// Every field below has the documented default; netsim/README.md lists them with their sources.
// Not the engine's configuration: only what the simulator needs to build platform, nodes, churn.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/events/json.h"
#include "netsim/tcp_model.h"

namespace meridian::netsim {

struct ModelSpec {
  int layers = 42;  // INTELLECT-1 (intellect1.md §2.1)
  int hidden = 4096;
  int heads = 32;
  int kv_heads = 8;
  int ffn = 14336;
  int vocab = 128256;
  int seq_len = 8192;
  bool tied_embeddings = false;

  std::uint64_t param_count() const;  // all parameters
  std::uint64_t non_embedding_params() const;
  // PRIME's formula: 6·N_non-embedding + 12·L·H·d_head·T.
  double flops_per_token() const;
  // Layer-group boundaries: embedding, one per layer, output head + final norm.
  std::vector<std::uint64_t> bucket_boundaries() const;
};

struct HardwareSpec {
  int gpus_per_node = 8;
  double peak_flops_per_gpu = 989e12;  // H100 SXM bf16 dense, PRIME get_peak_flops
  double mfu = 0.433;                  // INTELLECT-1 baseline MFU (report)
  double step_time_s = 0.0;            // > 0 overrides the FLOPs model
  int batch_sequences = 128;           // per node per inner step (H100.toml)
};

struct SiteSpec {
  std::string name;
  std::string region;  // free text: where the site stands for
};

struct RttSpec {
  std::string a, b;
  double rtt_ms = 0.0;
  std::string source;
};

// One site pair's path (a == b: within a site): its packet loss and, if shared, its capacity.
// Unlisted pairs lose nothing and have no shared capacity (a fat pipe).
struct PathSpec {
  std::string a, b;
  double loss = 0.0;           // per packet, random (steady state)
  double capacity_gbps = 0.0;  // > 0: flows on this path share it; 0: not a bottleneck
  std::string source;
};

// Variation in time of the inter-site paths (network.variation); 0 turns a process off.
struct VariationSpec {
  double bandwidth_cv = 0.0;             // coefficient of variation of a shared path's capacity
  double bandwidth_correlation_s = 0.0;  // its correlation time (AR(1) in log space)
  double path_change_interval_s = 0.0;   // mean time between path (route) changes
  double path_change_rtt_fraction = 0.0;  // mean extra RTT of a changed path, × base RTT
  double loss_episode_interval_s = 0.0;  // mean time between loss episodes
  double loss_episode_s = 0.0;           // mean length of one
  double loss_episode_loss = 0.0;        // packet loss during one
  std::string source;

  bool bandwidth_varies() const { return bandwidth_cv > 0 && bandwidth_correlation_s > 0; }
  bool paths_change() const { return path_change_interval_s > 0 && path_change_rtt_fraction > 0; }
  bool loss_episodes() const {
    return loss_episode_interval_s > 0 && loss_episode_s > 0 && loss_episode_loss > 0;
  }
};

struct NodeGroup {
  std::string site;
  int count = 1;
  bool start = true;            // running at t = 0 (else waits for a churn `join`)
  double bandwidth_gbps = 0.0;  // 0: drawn (seeded) from network.access_bandwidth_gbps
  double speed_factor = 1.0;    // < 1: straggler
};

struct NetworkSpec {
  std::string model = "CM02";          // SimGrid network/model
  double tcp_gamma_bytes = 4194304.0;  // per-flow window cap: Linux tcp_wmem max default
  // SimGrid network/crosstraffic (its 5 % reverse-path charge, shares weighted by latency):
  // off, as it starves WAN flows in rings that mix LAN and WAN hops (netsim/README.md).
  bool crosstraffic = false;
  TcpSpec tcp;                         // per-connection TCP (netsim/tcp_model.h)
  // One-way control trips that must cross before a message's data may start, once both its
  // sender and its receiver have posted it (a rendezvous protocol). 0: the data goes at once
  // (eager, buffered: NCCL-like pre-posted receives, the INTELLECT-1 scenarios). Meridian's Gloo
  // transport needs 2: Gloo's receive-ready notice for the credit, then the receiver's credit
  // (engine/transport/gloo/README.md; results/fidelity/README.md).
  int rendezvous_trips = 0;
  std::string platform_xml;            // if set, the platform comes from this file
  std::string sites_from;              // YAML file supplying sites and rtt (shared tables)
  std::string coordinator_site;        // default: first site
  double coordinator_bandwidth_gbps = 10.0;
  // `network.store` (netsim/README.md, "A replicated store"): "single" (the table on the
  // coordinator host) or "etcd": a Raft group with a member on each of `store_members` (sites,
  // the coordinator's among them; a site may repeat), led by the coordinator host.
  std::string store_kind = "single";
  std::vector<std::string> store_members;
  double intra_site_rtt_ms = 1.0;
  std::pair<double, double> access_bandwidth_gbps = {0.5, 4.0};  // intellect1.md §1.4
  double variability_period_s = 0.0;                             // 0: constant bandwidth
  double variability_min_fraction = 1.0;  // each period, bandwidth × U[min_fraction, 1]
  std::vector<SiteSpec> sites;
  std::vector<RttSpec> rtt;
  std::vector<PathSpec> paths;
  VariationSpec variation;
  std::vector<NodeGroup> nodes;

  const PathSpec* path(const std::string& a, const std::string& b) const;  // nullptr: unlisted
  // An etcd-like store's commit wait in seconds: the leader (on coordinator_site) needs the
  // acknowledgements of a quorum, floor(n / 2) + 1 members itself included, so it waits for the
  // (quorum - 1)-th fastest round trip to the other members. 0 for "single" (or one member).
  double store_quorum_rtt_s() const;
};

struct DilocoSpec {
  int H = 100;
  std::string codec = "int8";
  std::string buckets = "layers";  // "layers" (embedding, each layer, head) or an integer count
  int local_ranks = 8;             // L parallel rings per node (one flow each)
  bool aggregate = true;           // model the L rings as one flow of L× bytes and L× window
  std::uint64_t max_chunk_bytes = 4u << 20;
  double timeout_s = 60.0;
  int retries = 3;
  double outer_opt_s = 0.0;    // CPU time of the outer step (not given by the sources)
  double checkpoint_s = 60.0;  // blocking save per outer step (intellect1.md §2.4)
  double dead_after_s = 6.0;   // heartbeat eviction delay (paper)
  double heartbeat_s = 2.0;
  int state_copies = 4;  // recovery payload: params, momentum, AdamW m and v (fp32)
  std::uint64_t recovery_chunk_bytes = 64u << 20;
};

struct RunSpec {
  std::string name;
  std::uint64_t seed = 1;
  std::string mode = "simulate";
  int outer_steps = 20;  // or inner_steps / H when inner_steps is given
  std::int64_t inner_steps = 0;
  // Who runs the nodes: "engine" only (the engine's DilocoNode: its ElasticMesh with real
  // heartbeats through the simulated store, its live recovery and ring all-reduce); the former
  // "model" driver was removed and is a ConfigError.
  std::string driver = "engine";
};

struct Scenario {
  std::string file;      // the YAML file it came from (for messages)
  std::string base_dir;  // relative paths (trace, XML) resolve against this
  RunSpec run;
  ModelSpec model;
  HardwareSpec hardware;
  NetworkSpec network;
  DilocoSpec diloco;
  std::string churn_trace;  // path, "" = no churn
  std::string output_dir;   // default runs/<run.name> (under the working directory)
  // Who computes inner steps: "modeled" (ModeledWorker, phantom buffers) or "torch" (real
  // LibTorch training, trainer/emulation; the model then comes from the trainer section).
  std::string worker = "modeled";
  std::string trainer_yaml;  // the `trainer:` section as YAML text (only with worker: torch)

  std::int64_t tokens_per_inner_step() const {
    return static_cast<std::int64_t>(hardware.batch_sequences) * model.seq_len;
  }
  double inner_step_s() const;
  int outer_steps() const;
  int total_nodes() const;
  JsonObject to_json() const;
};

// Parses `path`, after applying `overrides` ("a.b.c=value", YAML scalar values) to the tree.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from text (tests); `name` stands in for the file name in messages.
Scenario parse_scenario(const std::string& yaml_text, const std::string& name,
                        const std::vector<std::string>& overrides = {});

}  // namespace meridian::netsim
