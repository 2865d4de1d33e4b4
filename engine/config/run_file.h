// RunFile: the resolved run file, one schema for all modes (ARCHITECTURE.md "Files"): `meridian sim
// FILE` simulates it (run, model, hardware, network, diloco, recovery, churn, output; with
// `worker: torch` also train and data) and `meridian train FILE --node-id N` runs it for real
// (run, model, train, data, diloco, recovery, store, transport, checkpoint, output). Parsed
// strictly by engine/config/reader.h: an unknown key or a bad value is a ConfigError naming the
// file, the line, the key and what was expected; a key of the older scenario or RUN.yaml forms
// is an error that says what replaced it. Every field below has the documented default; the
// reference is cli/train/README.md ("The run file"), the simulator's defaults and their sources
// netsim/README.md. Data only: the modes map it to their backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/diloco/diloco.h"
#include "engine/core/events/json.h"

namespace meridian::config {

// Per-connection TCP of the simulated WAN (netsim/tcp_model.h uses it).
struct TcpSpec {
  std::string cc = "cubic";           // net.ipv4.tcp_congestion_control default (ip-sysctl.rst)
  double mss_bytes = 1448;            // 1500 MTU − 20 IP − 20 TCP − 12 timestamp option
  int initial_window_segments = 10;   // RFC 6928; Linux TCP_INIT_CWND since 3.0
  bool slow_start_after_idle = true;  // net.ipv4.tcp_slow_start_after_idle default 1 (RFC 2861)
  double rto_min_ms = 200;            // TCP_RTO_MIN (include/net/tcp.h); RTO = SRTT + 4·RTTVAR
  double per_flow_cap_gbps = 0;       // a provider's per-connection limit; 0: none
};

// `model:` a Llama-style decoder. `config: NAME` (a file in trainer/configs/, or a .yaml path)
// supplies a base for the keys below and for `train:`; `model: NAME` is short for it.
// PRIME's training FLOPs per token: 6·N_non-embedding + 12·L·H·d_head·T (forward and backward
// of the weights, and attention over a sequence of T). One formula for the simulator's model
// (ModelSpec) and the trainer's (trainer/model_config.h).
double prime_flops_per_token(std::uint64_t non_embedding_params, int layers, int heads,
                             double head_dim, int seq_len);

struct ModelSpec {
  std::string config;     // "" = none: the keys below over INTELLECT-1's defaults
  std::string name;       // for logs and checkpoints ("" = the config's, or "unnamed")
  int layers = 42;  // INTELLECT-1 (intellect1.md §2.1)
  int hidden = 4096;
  int heads = 32;
  int kv_heads = 8;
  int ffn = 14336;
  int vocab = 128256;
  int seq_len = 8192;
  bool tied_embeddings = false;
  double rope_theta = 500000.0;  // Llama-3
  double norm_eps = 1e-5;        // RMSNorm epsilon
  double init_std = 0.02;        // N(0, init_std) initialisation

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
};

// `train:` the inner optimizer (AdamW, warmup-stable-decay) and the batch; in simulation only the
// batch counts (tokens per inner step = batch × model.seq_len).
struct TrainSpec {
  int batch = 128;                    // sequences per node per inner step (INTELLECT-1: H100.toml)
  std::string bf16_autocast = "false";  // true | false | auto (auto: where the CPU has bf16)
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0 disables clipping
  std::int64_t warmup_steps = 0;
  std::int64_t decay_start_step = -1;  // -1: no decay
  std::int64_t total_steps = 0;
  double z_loss_weight = 0.0;
  // The validation loss (nats/token) whose first crossing the run's summary times
  // (summary.json `target`: modelled seconds and tokens to reach it); 0 = none. Emulation.
  double target_loss = 0.0;
};

// `data:` what real and emulated nodes train on (trainer/data.h).
struct DataSpec {
  int shards = 0;  // 0: one per node of the run (run.nodes)
  // "fortunes" (the tests' corpus: corpus_dir and files) or "debian-docs" (trainer/docs_corpus.h:
  // 20 M+ tokens of Debian's documentation packages).
  std::string corpus = "fortunes";
  std::string cache_dir = ".cache/meridian-trainer";  // relative to the working directory
  std::string corpus_dir;                             // "" = Debian's fortunes
  std::vector<std::string> files;                     // corpus files ("" = all)
  int validation_sequences = 16;
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

// Variation in time of the inter-site paths and of the nodes' access links (network.variation);
// 0 turns a process off.
struct VariationSpec {
  double bandwidth_cv = 0.0;             // coefficient of variation of a shared path's capacity
  double bandwidth_correlation_s = 0.0;  // its correlation time (AR(1) in log space)
  double path_change_interval_s = 0.0;   // mean time between path (route) changes
  double path_change_rtt_fraction = 0.0;  // mean extra RTT of a changed path, × base RTT
  double loss_episode_interval_s = 0.0;  // mean time between loss episodes
  double loss_episode_s = 0.0;           // mean length of one
  double loss_episode_loss = 0.0;        // packet loss during one
  double access_cv = 0.0;                // coefficient of variation of each node's access bandwidth
  double access_correlation_s = 0.0;     // its correlation time (AR(1) in log space)
  std::string source;

  bool bandwidth_varies() const { return bandwidth_cv > 0 && bandwidth_correlation_s > 0; }
  bool access_varies() const { return access_cv > 0 && access_correlation_s > 0; }
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
  // (engine/backends/gloo/README.md; results/fidelity/README.md).
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
  // none (blocking, INTELLECT-1), delayed or eager (engine/core/diloco/README.md, "Overlapped outer
  // steps"); serialised only when not none, so a blocking run's configuration is unchanged.
  std::string overlap = "none";
  // Streaming DiLoCo (engine/core/diloco/README.md, "Streaming outer steps"): P fragments, each
  // synced once per outer step at its own point, its all-reduce beside `fragment_delay` inner
  // steps and merged as local = alpha * local + (1 - alpha) * outer. Serialised only when not
  // 1 / 0 / 0 (blocking), so a blocking run's configuration is unchanged.
  int fragments = 1;
  int fragment_delay = 0;
  double fragment_alpha = 0.0;
  // codec topk (engine/core/diloco/README.md, "Sparse outer steps"): values kept per value, value
  // bits, and the error feedback's beta (NaN = unset: 0.95 with topk; an error with another
  // codec). Serialised only with topk.
  double topk_density = 0.02;
  int topk_bits = 2;
  double error_feedback = std::numeric_limits<double>::quiet_NaN();
  double error_feedback_or_default() const {
    return std::isnan(error_feedback) ? (codec == "topk" ? double{kDefaultErrorFeedback} : 0.0)
                                      : error_feedback;
  }
  // codec topk: how the terms are summed, auto | gather | ring (engine/core/collective/README.md,
  // "Sparse pieces"). Serialised only when not auto.
  std::string sparse_collective = "auto";
  std::string buckets = "layers";  // "layers" (embedding, each layer, head) or an integer count
  int local_ranks = 8;             // L parallel rings per node (one flow each)
  bool aggregate = true;           // model the L rings as one flow of L× bytes and L× window
  std::uint64_t max_chunk_bytes = 4u << 20;
  double timeout_s = 60.0;
  int retries = 3;
  // A member whose pseudo-gradient was non-finite (it sat out) this many outer steps in a row is
  // evicted (MeshOptions::nonfinite_evict_after); 0 = never.
  int nonfinite_evict_after = 3;
  double outer_opt_s = 0.0;    // CPU time of the outer step (not given by the sources)
  double checkpoint_s = 60.0;  // blocking save per outer step (intellect1.md §2.4)
  double dead_after_s = 6.0;   // heartbeat eviction delay (paper)
  double heartbeat_s = 2.0;
  double outer_lr = 0.7;        // Nesterov outer SGD (intellect1.md §2.2)
  double outer_momentum = 0.9;
  // A joiner's bound on waiting to be admitted, and a member's on waiting for the next round
  // record; 0 = the mode's default: 600 s for real runs, unbounded in simulation (one
  // INTELLECT-1 outer step is ~2,900 s of simulated time).
  double admission_timeout_s = 0.0;
  double round_timeout_s = 0.0;
};

// `recovery:` live recovery of joiners (engine/core/recovery/live_recovery.h).
struct RecoverySpec {
  double timeout_s = 60.0;
  std::uint64_t chunk_bytes = 64u << 20;
  int max_sources = 2;
  bool blocking = false;
  int state_copies = 4;  // simulation: payload = params, momentum, AdamW m and v (fp32)
};

// `transport:` between the nodes of a real run.
struct TransportSpec {
  std::string kind = "gloo";  // gloo | nccl
  // TCP connections per ring neighbour (Gloo): an exchange's message is striped over them
  // (engine/backends/gloo/README.md, "Connections per peer"). The simulator models K connections
  // per flow (their windows and loss bounds), so `meridian sim` reads it too.
  int connections_per_peer = 1;
};

// `store:` the real run's rendezvous store.
struct StoreSpec {
  // "" = the embedded TCP store (--store / --serve-store on the command line);
  // etcd://HOST:PORT[,...][/PREFIX][?...] = an etcd cluster
  // (engine/backends/store_etcd/etcd_store.h).
  std::string address;
  std::string bind = "127.0.0.1";  // where a --serve-store node's store listens
};

// `checkpoint:` real runs (trainer/run_checkpoint.h). Absent: no checkpoints.
struct CheckpointSpec {
  std::string dir;               // relative to the run file; "" = off
  std::int64_t every_steps = 0;  // after every K-th outer step (0 = not by steps)
  double every_s = 0.0;          // once T seconds passed since the last write (0 = not)
  int keep = 3;                  // each node keeps its newest N
  bool enabled() const { return !dir.empty(); }
};

struct RunSpec {
  std::string name;
  std::uint64_t seed = 1;
  std::string mode = "simulate";
  int outer_steps = 20;  // or inner_steps / H when inner_steps is given
  std::int64_t inner_steps = 0;
  // Real runs: round 0 forms once this many nodes are queued (0 = the starting nodes of
  // network.nodes, else 1).
  int nodes = 0;
  // Who runs the nodes: "engine" only (the engine's DilocoNode: its ElasticMesh with real
  // heartbeats through the simulated store, its live recovery and ring all-reduce); the former
  // "model" driver was removed and is a ConfigError.
  std::string driver = "engine";
};

enum class Mode { kSimulate, kReal };

struct RunFile {
  std::string file;      // the YAML file it came from (for messages)
  std::string base_dir;  // its directory
  RunSpec run;
  ModelSpec model;
  TrainSpec train;
  DataSpec data;
  HardwareSpec hardware;
  NetworkSpec network;
  DilocoSpec diloco;
  RecoverySpec recovery;
  StoreSpec store;
  TransportSpec transport;
  CheckpointSpec checkpoint;
  std::string churn_trace;  // path (resolved), "" = no churn
  std::string output_dir;   // default runs/<run.name> (under the working directory)
  // Who computes inner steps in simulation: "modeled" (ModeledWorker, phantom buffers) or
  // "torch" (real LibTorch training of `model` with `train` and `data`, cli/emulation).
  std::string worker = "modeled";
  std::vector<std::string> sections;  // the top-level sections the file gave
  // Every key the file (or a --set) gave, by key path ("diloco.H", "network.nodes[0].count"):
  // where it came from, "FILE:LINE" or "--set TEXT". A key not here has its default.
  std::map<std::string, std::string> given;

  std::int64_t tokens_per_inner_step() const {
    return static_cast<std::int64_t>(train.batch) * model.seq_len;
  }
  double inner_step_s() const;
  int outer_steps() const;
  int total_nodes() const;
  int starting_nodes() const;  // of network.nodes (start: true)
  // Real runs: run.nodes, else the starting nodes of network.nodes, else 1.
  int initial_nodes() const;
  JsonObject to_json() const;
  // One line per section the file gave that `mode` does not use ("network: not used by a real
  // run"), and per value that looks wrong for the run (a blocking checkpoint longer than the
  // compute it follows, INTELLECT-1's per-node defaults on a small model), for the command to
  // print; never an error, never silently misread.
  std::vector<std::string> notes_for(Mode mode) const;
};

// Parses `path`, after applying `overrides` ("a.b.c=value", "a.list[N].key=value"; YAML values)
// to the tree. Relative paths are relative to the file that names them.
RunFile load_run_file(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from text (tests); `name` stands in for the file name in messages, paths resolve against
// `base_dir`.
RunFile parse_run_file(const std::string& yaml_text, const std::string& name,
                       const std::vector<std::string>& overrides = {},
                       const std::string& base_dir = "");

// The engine's options for one node, from the file: the one mapping of diloco:, recovery: and the
// heartbeat keys to DilocoOptions. `mode` picks the defaults that depend on it (the admission and
// round bounds); the caller adds what only it knows (on_outer_step, the host name, a resume).
DilocoOptions diloco_options(const RunFile& f, Mode mode);
// A model config (trainer/configs/NAME.yaml, or a path: one ending in .yaml or holding a '/'): the `model:` and
// `train:` sections of a run file, on their own.
struct ModelConfigFile {
  ModelSpec model;
  TrainSpec train;
  std::string path;
};
ModelConfigFile load_model_config(const std::string& name_or_path);
ModelConfigFile load_model_config_file(const std::string& path);  // that file, by its path
// The file a model config name or path stands for (relative paths against `base_dir`); a
// ConfigError listing the shipped configs when there is none.
std::string model_config_path(const std::string& name_or_path, const std::string& base_dir);
std::string model_config_dir();  // trainer/configs

// What a mode cannot do without: a simulation needs `network:` (sites and nodes).
void check_for(const RunFile& f, Mode mode);

}  // namespace meridian::config
