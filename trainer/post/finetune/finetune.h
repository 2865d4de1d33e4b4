// Fine-tuning and continual pre-training of the trainer's Llama-style model with an optional
// set of frozen tensors (Spectrum): frozen tensors get no gradient and no optimizer state.
// The header includes no LibTorch. Not DiLoCo: a single-process loop for post-training studies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/model_config.h"

namespace meridian::post {

struct FinetuneOptions {
  trainer::TrainerConfig config;
  // Initial weights, flat in trainer::parameter_layout order; empty = the trainer's seeded init.
  std::vector<float> init_params;
  // Tensor names to train (e.g. a Spectrum YAML's `train:`); empty = every tensor.
  std::vector<std::string> trainable;
  int steps = 100;
  std::uint64_t seed = 0;  // weight init (when init_params is empty) and data order
  // Called after every step with the steps done and that step's loss (e.g. a progress line).
  std::function<void(int steps_done, double loss)> on_step;
};

struct FinetuneResult {
  std::vector<double> train_loss;  // per step (nats/token)
  std::vector<double> step_s;      // wall seconds per step
  std::uint64_t params_total = 0;
  std::uint64_t params_trainable = 0;
  // AdamW moments actually allocated (2 × 4 bytes × trainable parameters), and what training
  // every tensor would allocate.
  std::uint64_t optimizer_state_bytes = 0;
  std::uint64_t optimizer_state_bytes_full = 0;
  std::vector<float> params;  // final weights, flat
};

// Trains on `corpus` (shard 0 of 1). Unknown names in options.trainable are a ConfigError.
FinetuneResult finetune(const FinetuneOptions& options, const trainer::TokenizedCorpus& corpus);

// Mean validation cross-entropy (nats/token) of `params` over the first `sequences` validation
// sequences of `corpus` (fewer when the split is shorter).
double evaluate(const trainer::TrainerConfig& config, std::span<const float> params,
                const trainer::TokenizedCorpus& corpus, int sequences);

// Weights as a safetensors file (trainer names and shapes, F32) and back; reading checks every
// name and shape of the layout and names the file and tensor on a mismatch.
void write_weights(const std::filesystem::path& path, const trainer::ModelConfig& model,
                   std::span<const float> params);
std::vector<float> read_weights(const std::filesystem::path& path,
                                const trainer::ModelConfig& model);

}  // namespace meridian::post
