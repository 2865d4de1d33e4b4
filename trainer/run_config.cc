// The real run's view of the run file (run_config.h). No YAML here: engine/config reads it.
#include "trainer/run_config.h"

#include "engine/backends/common/store_identity.h"
#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "trainer/precision.h"

namespace meridian::trainer {

ModelConfig model_config(const config::ModelSpec& m, const std::string& where) {
  if (m.tied_embeddings)
    throw ConfigError(where + ": model.tied_embeddings: expected false (the trainer's decoder has "
                              "an untied output head)");
  ModelConfig c;
  c.name = m.name;
  c.layers = m.layers;
  c.hidden = m.hidden;
  c.heads = m.heads;
  c.kv_heads = m.kv_heads;
  c.ffn = m.ffn;
  c.vocab = m.vocab;
  c.seq_len = m.seq_len;
  c.rope_theta = m.rope_theta;
  c.norm_eps = m.norm_eps;
  c.init_std = m.init_std;
  validate(c, where + ": model");
  return c;
}

TrainConfig train_config(const config::TrainSpec& t) {
  TrainConfig c;
  c.batch = t.batch;
  c.bf16_autocast = t.bf16_autocast == "auto"   ? Bf16Autocast::kAuto
                    : t.bf16_autocast == "true" ? Bf16Autocast::kOn
                                                : Bf16Autocast::kOff;
  c.optim.lr = t.lr;
  c.optim.beta1 = t.beta1;
  c.optim.beta2 = t.beta2;
  c.optim.eps = t.eps;
  c.optim.weight_decay = t.weight_decay;
  c.optim.grad_clip = t.grad_clip;
  c.optim.warmup_steps = t.warmup_steps;
  c.optim.decay_start_step = t.decay_start_step;
  c.optim.total_steps = t.total_steps;
  c.optim.z_loss_weight = t.z_loss_weight;
  return c;
}

TrainerConfig trainer_config(const config::RunFile& f) {
  return TrainerConfig{model_config(f.model, f.file), train_config(f.train)};
}

TrainerConfig trainer_config(const config::ModelConfigFile& f) {
  return TrainerConfig{model_config(f.model, f.path), train_config(f.train)};
}

DataOptions data_options(const config::DataSpec& d, int vocab) {
  DataOptions o;
  o.cache_dir = d.cache_dir;
  o.corpus = d.corpus;
  if (!d.corpus_dir.empty()) o.corpus_dir = d.corpus_dir;
  o.files = d.files;
  o.vocab = vocab;
  return o;
}

RunConfig resolve_run_config(const config::RunFile& f) {
  RunConfig c;
  c.file = f;
  c.trainer = trainer_config(f);
  c.seed = f.run.seed;
  c.initial_nodes = f.initial_nodes();
  c.shards = f.data.shards > 0 ? f.data.shards : c.initial_nodes;
  c.validation_sequences = f.data.validation_sequences;
  c.data = data_options(f.data, c.trainer.model.vocab);
  c.diloco = config::diloco_options(f, config::Mode::kReal);
  c.output_dir = f.output_dir;
  c.checkpoint = f.checkpoint;
  c.store = f.store.address;
  c.store_bind = f.store.bind;
  c.transport = f.transport;
  return c;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  const config::RunFile f = config::load_run_file(path, overrides);
  config::check_for(f, config::Mode::kReal);
  return resolve_run_config(f);
}

JsonObject trainer_config_json(const TrainerConfig& t, const config::DataSpec& d,
                               double target_loss) {
  const ModelConfig& m = t.model;
  const TrainConfig& tr = t.train;
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
  data.add("corpus", d.corpus).add("cache_dir", d.cache_dir).add("corpus_dir", d.corpus_dir);
  data.add("files", d.files).add("validation_sequences", d.validation_sequences);
  JsonObject out;
  out.add("model", model).add("train", train).add("data", data);
  // The summary times the first evaluation at or below it (analysis/summary.cc).
  if (target_loss > 0) out.add("target_loss", target_loss);
  return out;
}

void add_variant_fields(JsonObject& diloco, const DilocoOptions& d) {
  if (d.codec == CodecId::kTopk)
    diloco.add("topk_density", d.codec_params.topk_density)
        .add("topk_bits", d.codec_params.topk_bits)
        .add("error_feedback", static_cast<double>(d.error_feedback));
  if (d.sparse_collective != SparseCollective::kAuto)
    diloco.add("sparse_collective", sparse_collective_name(d.sparse_collective));
  if (d.overlap != Overlap::kNone) diloco.add("overlap", overlap_name(d.overlap));
  if (d.streaming())
    diloco.add("fragments", d.fragments)
        .add("fragment_delay", d.fragment_delay)
        .add("fragment_alpha", static_cast<double>(d.fragment_alpha));
}

JsonObject run_config_json(const RunConfig& c) {
  const DilocoOptions& d = c.diloco;
  const ModelConfig& m = c.trainer.model;
  JsonObject model, data, diloco, recovery, checkpoint;
  model.add("name", m.name).add("layers", m.layers).add("hidden", m.hidden);
  model.add("heads", m.heads).add("kv_heads", m.kv_heads).add("ffn", m.ffn);
  model.add("vocab", m.vocab).add("seq_len", m.seq_len);
  model.add("batch", c.trainer.train.batch).add("lr", c.trainer.train.optim.lr);
  data.add("shards", c.shards).add("corpus", c.data.corpus).add("corpus_dir", c.data.corpus_dir);
  data.add("files", c.data.files);
  data.add("validation_sequences", c.validation_sequences);
  diloco.add("H", d.inner_steps).add("codec", std::string(codec_name(d.codec)));
  add_variant_fields(diloco, d);
  diloco.add("outer_lr", static_cast<double>(d.outer.lr));
  diloco.add("outer_momentum", static_cast<double>(d.outer.momentum));
  diloco.add("local_ranks", d.local_ranks).add("timeout_s", d.allreduce_timeout_s);
  diloco.add("max_chunk_bytes", static_cast<std::uint64_t>(d.max_chunk_bytes));
  diloco.add("retries", d.mesh.max_retries);
  diloco.add("nonfinite_evict_after", d.mesh.nonfinite_evict_after);
  diloco.add("admission_timeout_s", d.mesh.admission_timeout_s);
  diloco.add("round_timeout_s", d.mesh.round_timeout_s);
  diloco.add("heartbeat_s", d.mesh.heartbeat_interval_s).add("dead_after_s", d.mesh.dead_after_s);
  recovery.add("timeout_s", d.recovery.timeout_s)
      .add("chunk_bytes", static_cast<std::uint64_t>(d.recovery.chunk_bytes))
      .add("max_sources", d.recovery.max_sources)
      .add("blocking", d.recovery.blocking);
  JsonObject out;
  out.add("model", model).add("seed", c.seed).add("nodes", c.initial_nodes);
  out.add("outer_steps", d.outer_steps).add("data", data).add("diloco", diloco);
  out.add("recovery", recovery).add("transport", c.transport.kind);
  // Every node must open as many connections per peer (their meshes meet under per-connection
  // store keys, and messages are striped by it); absent at 1, so earlier hashes hold.
  if (c.transport.connections_per_peer != 1)
    out.add("connections_per_peer", c.transport.connections_per_peer);
  // Not the directory (each machine has its own disk): the schedule, which must agree.
  if (c.checkpoint.enabled()) {
    checkpoint.add("every_steps", c.checkpoint.every_steps).add("every_s", c.checkpoint.every_s);
    checkpoint.add("keep", c.checkpoint.keep);
    out.add("checkpoint", checkpoint);
  }
  return out;
}

std::string run_config_hash(const RunConfig& c) { return config_hash_of(run_config_json(c).str()); }

}  // namespace meridian::trainer
