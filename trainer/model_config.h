// Model and training configuration for the Llama-style decoder: the YAML files in
// trainer/configs/, the parameter layout (names, shapes, flat offsets, layer groups) and the
// parameter / FLOPs counts. Pure C++ (no LibTorch): the CLI and the simulator may include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/precision.h"

namespace meridian::trainer {

// A Llama-3-style decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied embeddings).
struct ModelConfig {
  std::string name = "unnamed";
  int layers = 2;
  int hidden = 64;          // model width d
  int heads = 4;            // query heads; head_dim = hidden / heads
  int kv_heads = 2;         // key/value heads (grouped-query attention); divides heads
  int ffn = 128;            // SwiGLU hidden width
  int vocab = 512;          // vocabulary size (input embedding rows, output head rows)
  int seq_len = 64;         // training sequence length T
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;   // RMSNorm epsilon
  double init_std = 0.02;   // N(0, init_std) init; wo and w2 use init_std / sqrt(2 * layers)

  int head_dim() const { return hidden / heads; }
};

// Inner optimizer (AdamW) and the warmup-stable-(1 - sqrt) decay schedule.
struct OptimConfig {
  double lr = 3e-4;              // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;     // decoupled, applied to every parameter (as PRIME/torchtitan)
  double grad_clip = 1.0;        // global L2 norm; <= 0 disables clipping
  std::int64_t warmup_steps = 0;       // linear warmup from lr / warmup_steps to lr
  std::int64_t decay_start_step = -1;  // -1: no decay (constant after warmup)
  std::int64_t total_steps = 0;        // lr reaches 0 here when decay_start_step >= 0
  double z_loss_weight = 0.0;    // max-z-loss: weight * mean(max_logit^2); 0 disables
};

struct TrainConfig {
  int batch = 4;                 // sequences per inner step (micro-batch = batch)
  // bf16 autocast of the forward pass on the CPU: true, false, or auto (bf16 only where the CPU
  // computes it natively; resolve_bf16 in precision.h). Resolved when a worker is built.
  Bf16Autocast bf16_autocast = Bf16Autocast::kOff;
  OptimConfig optim;
};

// A YAML file with a `model:` section and an optional `train:` section.
struct TrainerConfig {
  ModelConfig model;
  TrainConfig train;
};

// Loads a config file (the `model:` and `train:` sections of a run file, read by engine/config);
// unknown keys and bad values raise ConfigError naming file, line and key.
TrainerConfig load_trainer_config(const std::string& path);
// Loads trainer/configs/<name>.yaml (the directory compiled in) or a path ending in .yaml.
TrainerConfig load_named_config(const std::string& name_or_path);
// Directory holding the shipped configs.
std::string config_dir();
// Raises ConfigError when the shapes are inconsistent (heads % kv_heads, hidden % heads, ...).
void validate(const ModelConfig& m, const std::string& where);

// One parameter tensor in the flat fp32 buffer. Names follow torchtitan's Llama
// ("layers.3.attention.wq.weight") so checkpoints read naturally in the Python ecosystem.
struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // first element in the flat buffer
  std::uint64_t numel = 0;
  int group = 0;             // bucket: 0 embedding, 1..layers the blocks, layers+1 norm+output
};

// Every parameter in flat-buffer order: embedding, each block, final norm, output head.
std::vector<ParamSpec> parameter_layout(const ModelConfig& m);
// Cumulative element offsets of the layer groups: {0, end of embedding, end of block 0, ...,
// total}. layers + 2 groups.
std::vector<std::uint64_t> group_boundaries(const ModelConfig& m);

std::uint64_t parameter_count(const ModelConfig& m);
// Everything but the input embedding (PRIME/torchtitan's `exclude_embedding`: the output head
// counts, as it costs matmul FLOPs).
std::uint64_t non_embedding_parameter_count(const ModelConfig& m);
// PRIME's MFU numerator: 6 * N_non_embedding + 12 * L * H * d_head * T, with T = seq_len.
double flops_per_token(const ModelConfig& m);

// A multi-line human-readable summary (shapes, counts, FLOPs per token).
std::string describe(const ModelConfig& m);

}  // namespace meridian::trainer
