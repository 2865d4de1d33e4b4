// RUN.yaml loading for `meridian train` (see run_config.h). Not the model config loader
// (model_config.cc): this file only names a model and overrides its batch and sequence length.
#include "trainer/run_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "engine/codec/codec.h"
#include "engine/error.h"
#include "trainer/precision.h"

namespace meridian::trainer {
namespace {

// One YAML map section: typed reads, and every key it holds must have been read.
class Section {
 public:
  // `name` is looked up in `root`; messages name it after `prefix` (e.g. "trainer.").
  Section(const YAML::Node& root, const std::string& file, const std::string& name,
          const std::string& prefix = "")
      : file_(file), name_(prefix + name) {
    node_ = name.empty() ? root : root[name];
    if (node_ && !node_.IsMap()) fail("", "expected a map of keys");
  }

  template <typename T>
  void read(const std::string& key, T& out) {
    known_.insert(key);
    if (!node_) return;
    const YAML::Node v = node_[key];
    if (!v) return;
    try {
      out = v.template as<T>();
    } catch (const YAML::Exception&) {
      fail(key, "expected a value of the right type, got '" +
                    (v.IsScalar() ? v.Scalar() : std::string("a non-scalar")) + "'");
    }
  }

  void finish() const {
    if (!node_) return;
    for (const auto& kv : node_) {
      const std::string k = yaml_key(kv.first, file_ + ": " + name_);
      if (!known_.count(k)) {
        std::string list;
        for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
        fail(k, "unknown key (known: " + list + ")");
      }
    }
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    std::string where = name_;
    if (!key.empty()) where += (where.empty() ? "" : ".") + key;
    throw ConfigError(file_ + ": " + where + ": " + what);
  }

 private:
  YAML::Node node_;
  std::string file_, name_;
  std::set<std::string> known_;
};

void positive(const Section& s, const std::string& key, double v) {
  if (!(v > 0)) s.fail(key, "expected a positive value");
}

// The data keys RUN.yaml and a scenario's trainer section share (RUN.yaml adds `shards`).
struct DataKeys {
  int batch = 0, seq_len = 0;  // 0: the model config's
  int validation_sequences = 16;
};

void read_data_keys(Section& data, DataOptions& options, DataKeys& k) {
  options.cache_dir = ".cache/meridian-trainer";
  data.read("cache_dir", options.cache_dir);
  data.read("corpus", options.corpus);
  if (options.corpus != "fortunes" && options.corpus != "debian-docs")
    data.fail("corpus", "expected fortunes or debian-docs, got '" + options.corpus + "'");
  data.read("corpus_dir", options.corpus_dir);
  data.read("files", options.files);
  data.read("batch", k.batch);
  data.read("seq_len", k.seq_len);
  data.read("validation_sequences", k.validation_sequences);
  data.finish();
  if (k.batch < 0) data.fail("batch", "expected a positive integer");
  if (k.seq_len < 0) data.fail("seq_len", "expected a positive integer");
  if (k.validation_sequences < 1) data.fail("validation_sequences", "expected a positive integer");
}

// The data section's batch and sequence length over the model config's.
void apply_data_keys(TrainerConfig& t, const DataKeys& k, const std::string& where) {
  if (k.batch > 0) t.train.batch = k.batch;
  if (k.seq_len > 0) t.model.seq_len = k.seq_len;
  validate(t.model, where);
}

void read_outer(Section& s, OuterOptimizerOptions& outer) {
  double outer_lr = outer.lr, outer_momentum = outer.momentum;
  s.read("outer_lr", outer_lr);
  s.read("outer_momentum", outer_momentum);
  positive(s, "outer_lr", outer_lr);
  if (!(outer_momentum >= 0 && outer_momentum < 1)) s.fail("outer_momentum", "expected [0, 1)");
  outer.lr = static_cast<float>(outer_lr);
  outer.momentum = static_cast<float>(outer_momentum);
}

}  // namespace

RunConfig load_run_config(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot read the run configuration");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) throw ConfigError(path + ": expected a map of keys at the top level");
  RunConfig c;
  DilocoOptions& d = c.diloco;
  DataKeys keys;

  Section top(root, path, "");
  top.read("model", c.model);
  top.read("seed", c.seed);
  top.read("nodes", c.initial_nodes);
  top.read("outer_steps", d.outer_steps);
  top.read("output_dir", c.output_dir);
  top.read("store", c.store);
  top.read("store_bind", c.store_bind);
  for (const char* s : {"data", "diloco", "heartbeat", "recovery", "checkpoint"}) {
    YAML::Node ignored;
    top.read(s, ignored);
  }
  top.finish();
  if (c.initial_nodes < 1) top.fail("nodes", "expected a positive integer");
  if (d.outer_steps < 1) top.fail("outer_steps", "expected a positive integer");
  if (c.output_dir.empty()) top.fail("output_dir", "expected a directory path");
  if (!c.store.empty() && c.store.rfind("etcd://", 0) != 0 && c.store.rfind("etcds://", 0) != 0)
    top.fail("store", "expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX], got '" + c.store +
                          "' (the embedded TCP store is given on the command line instead)");
  if (c.store_bind.empty()) top.fail("store_bind", "expected an address (e.g. 127.0.0.1)");

  Section data(root, path, "data");
  data.read("shards", c.shards);
  read_data_keys(data, c.data, keys);
  c.validation_sequences = keys.validation_sequences;
  if (c.shards < 1) data.fail("shards", "expected a positive integer");

  Section dl(root, path, "diloco");
  std::string codec = "fp32";
  dl.read("inner_steps", d.inner_steps);
  dl.read("codec", codec);
  read_outer(dl, d.outer);
  dl.read("local_ranks", d.local_ranks);
  dl.read("allreduce_timeout_s", d.allreduce_timeout_s);
  dl.read("max_chunk_bytes", d.max_chunk_bytes);
  dl.read("max_retries", d.mesh.max_retries);
  dl.read("admission_timeout_s", d.mesh.admission_timeout_s);
  dl.read("round_timeout_s", d.mesh.round_timeout_s);
  dl.finish();
  if (d.inner_steps < 1) dl.fail("inner_steps", "expected a positive integer");
  try {
    d.codec = parse_codec(codec);
  } catch (const Error& e) {
    dl.fail("codec", e.what());
  }
  if (d.local_ranks < 1) dl.fail("local_ranks", "expected a positive integer");
  positive(dl, "allreduce_timeout_s", d.allreduce_timeout_s);
  if (d.max_chunk_bytes < 1024) dl.fail("max_chunk_bytes", "expected at least 1024");
  if (d.mesh.max_retries < 0) dl.fail("max_retries", "expected >= 0");
  positive(dl, "admission_timeout_s", d.mesh.admission_timeout_s);
  positive(dl, "round_timeout_s", d.mesh.round_timeout_s);

  Section hb(root, path, "heartbeat");
  hb.read("interval_s", d.mesh.heartbeat_interval_s);
  hb.read("dead_after_s", d.mesh.dead_after_s);
  hb.finish();
  positive(hb, "interval_s", d.mesh.heartbeat_interval_s);
  if (!(d.mesh.dead_after_s > d.mesh.heartbeat_interval_s))
    hb.fail("dead_after_s", "expected more than interval_s");

  Section rc(root, path, "recovery");
  rc.read("timeout_s", d.recovery.timeout_s);
  rc.read("chunk_bytes", d.recovery.chunk_bytes);
  rc.read("max_sources", d.recovery.max_sources);
  rc.read("blocking", d.recovery.blocking);
  rc.finish();
  positive(rc, "timeout_s", d.recovery.timeout_s);
  if (d.recovery.chunk_bytes < 1024) rc.fail("chunk_bytes", "expected at least 1024");
  if (d.recovery.max_sources < 1) rc.fail("max_sources", "expected a positive integer");

  Section ck(root, path, "checkpoint");
  CheckpointOptions& k = c.checkpoint;
  ck.read("dir", k.dir);
  ck.read("every_steps", k.every_steps);
  ck.read("every_s", k.every_s);
  ck.read("keep", k.keep);
  ck.finish();
  if (root["checkpoint"]) {
    if (k.dir.empty()) ck.fail("dir", "expected a directory path (relative to the run file)");
    if (k.every_steps < 0) ck.fail("every_steps", "expected >= 0");
    if (!(k.every_s >= 0)) ck.fail("every_s", "expected >= 0");
    if (k.every_steps == 0 && k.every_s == 0) ck.fail("", "give every_steps or every_s (or both)");
    if (k.keep < 1) ck.fail("keep", "expected a positive integer");
    k.dir = (std::filesystem::path(path).parent_path() / k.dir).lexically_normal().string();
  }

  c.trainer = load_named_config(c.model);
  apply_data_keys(c.trainer, keys, path + ": data.seq_len");
  c.data.vocab = c.trainer.model.vocab;
  d.mesh.initial_world = c.initial_nodes;
  d.mesh.outer_steps = d.outer_steps;
  return c;
}

TrainerSection parse_trainer_section(const std::string& yaml_text, const std::string& file) {
  YAML::Node root;
  try {
    root["trainer"] = YAML::Load(yaml_text.empty() ? "{}" : yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file + ": trainer: not valid YAML: " + e.what());
  }
  TrainerSection t;
  DataKeys keys;
  Section top(root, file, "trainer");
  top.read("model", t.model);
  top.read("target_loss", t.target_loss);
  if (!(t.target_loss >= 0) || !std::isfinite(t.target_loss))
    top.fail("target_loss", "expected a positive validation loss in nats/token");
  read_outer(top, t.outer);
  for (const char* s : {"data", "train"}) {
    YAML::Node ignored;
    top.read(s, ignored);
  }
  top.finish();
  Section data(root["trainer"], file, "data", "trainer.");
  read_data_keys(data, t.data, keys);
  t.validation_sequences = keys.validation_sequences;
  try {
    t.trainer = load_named_config(t.model);
  } catch (const ConfigError& e) {
    top.fail("model", e.what());
  }
  apply_data_keys(t.trainer, keys, file + ": trainer.data.seq_len");
  const YAML::Node train = root["trainer"]["train"];
  if (train && !train.IsNull())
    t.trainer.train = read_train_config(train, file + ": trainer.train", t.trainer.train);
  t.data.vocab = t.trainer.model.vocab;
  return t;
}

JsonObject trainer_section_json(const TrainerSection& t) {
  const ModelConfig& m = t.trainer.model;
  const TrainConfig& tr = t.trainer.train;
  JsonObject model, train, data;
  model.add("name", m.name).add("layers", m.layers).add("hidden", m.hidden);
  model.add("heads", m.heads).add("kv_heads", m.kv_heads).add("ffn", m.ffn);
  model.add("vocab", m.vocab).add("seq_len", m.seq_len).add("rope_theta", m.rope_theta);
  // bf16_autocast: what this machine trains in; the setting and the CPU say why.
  const CpuFeatures& cpu = host_cpu_features();
  train.add("batch", tr.batch).add("lr", tr.optim.lr);
  train.add("bf16_autocast", resolve_bf16(tr.bf16_autocast, cpu).bf16);
  train.add("bf16_autocast_setting", bf16_autocast_name(tr.bf16_autocast));
  train.add("cpu", describe(cpu));
  train.add("beta1", tr.optim.beta1).add("beta2", tr.optim.beta2);
  train.add("weight_decay", tr.optim.weight_decay).add("grad_clip", tr.optim.grad_clip);
  train.add("warmup_steps", tr.optim.warmup_steps);
  train.add("decay_start_step", tr.optim.decay_start_step);
  train.add("total_steps", tr.optim.total_steps).add("z_loss_weight", tr.optim.z_loss_weight);
  data.add("cache_dir", t.data.cache_dir).add("corpus", t.data.corpus);
  data.add("corpus_dir", t.data.corpus_dir);
  data.add("files", t.data.files).add("validation_sequences", t.validation_sequences);
  JsonObject out;
  out.add("model", model).add("train", train).add("data", data);
  if (t.target_loss > 0) out.add("target_loss", t.target_loss);
  out.add("outer_lr", static_cast<double>(t.outer.lr));
  out.add("outer_momentum", static_cast<double>(t.outer.momentum));
  return out;
}

JsonObject run_config_json(const RunConfig& c) {
  const DilocoOptions& d = c.diloco;
  const ModelConfig& m = c.trainer.model;
  JsonObject model, data, diloco, heartbeat, recovery, checkpoint;
  model.add("name", m.name).add("layers", m.layers).add("hidden", m.hidden);
  model.add("heads", m.heads).add("kv_heads", m.kv_heads).add("ffn", m.ffn);
  model.add("vocab", m.vocab).add("seq_len", m.seq_len);
  model.add("batch", c.trainer.train.batch).add("lr", c.trainer.train.optim.lr);
  data.add("shards", c.shards).add("corpus", c.data.corpus).add("corpus_dir", c.data.corpus_dir).add("files", c.data.files);
  data.add("validation_sequences", c.validation_sequences);
  diloco.add("inner_steps", d.inner_steps).add("codec", std::string(codec_name(d.codec)));
  diloco.add("outer_lr", static_cast<double>(d.outer.lr));
  diloco.add("outer_momentum", static_cast<double>(d.outer.momentum));
  diloco.add("local_ranks", d.local_ranks).add("allreduce_timeout_s", d.allreduce_timeout_s);
  diloco.add("max_chunk_bytes", static_cast<std::uint64_t>(d.max_chunk_bytes));
  diloco.add("max_retries", d.mesh.max_retries);
  diloco.add("admission_timeout_s", d.mesh.admission_timeout_s);
  diloco.add("round_timeout_s", d.mesh.round_timeout_s);
  heartbeat.add("interval_s", d.mesh.heartbeat_interval_s).add("dead_after_s", d.mesh.dead_after_s);
  recovery.add("timeout_s", d.recovery.timeout_s)
      .add("chunk_bytes", static_cast<std::uint64_t>(d.recovery.chunk_bytes))
      .add("max_sources", d.recovery.max_sources)
      .add("blocking", d.recovery.blocking);
  JsonObject out;
  out.add("model", model).add("seed", c.seed).add("nodes", c.initial_nodes);
  out.add("outer_steps", d.outer_steps).add("data", data).add("diloco", diloco);
  out.add("heartbeat", heartbeat).add("recovery", recovery);
  // Not the directory (each machine has its own disk): the schedule, which must agree.
  if (c.checkpoint.enabled()) {
    checkpoint.add("every_steps", c.checkpoint.every_steps).add("every_s", c.checkpoint.every_s);
    checkpoint.add("keep", c.checkpoint.keep);
    out.add("checkpoint", checkpoint);
  }
  return out;
}

}  // namespace meridian::trainer
