// TorchWorker: the engine's InnerWorker backed by real LibTorch training of the Llama-style
// decoder on the samples DiLoCo plans for it (a data shard outside DiLoCo): AdamW inner steps,
// one thread, optional bf16 autocast, with checkpoints. The header includes no LibTorch (pimpl),
// so the CLI and the simulator can use it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/inner_worker.h"
#include "trainer/data.h"
#include "trainer/model_config.h"

namespace meridian::trainer {

struct TorchWorkerOptions {
  TrainerConfig config;          // model shapes and inner-optimizer settings
  DataOptions data;              // corpus and cache; data.vocab is set from config.model.vocab
  int rank = 0;                  // data shard of this node (without an engine plan)
  int world = 1;                 // number of shards
  std::uint64_t seed = 0;        // weight init and the data order (identical on every node)
  int validation_sequences = 16; // size of the fixed validation set evaluate() uses
  // Seconds on the caller's clock for InnerStepsResult::compute_s (the Runtime's clock in the
  // engine; a steady clock when empty).
  std::function<double()> clock;
};

class TorchWorker final : public InnerWorker {
 public:
  // Prepares (or reuses from data.cache_dir) the tokenized corpus, then builds the model.
  explicit TorchWorker(TorchWorkerOptions options);
  // Uses an already tokenized corpus (shared between workers of one process).
  TorchWorker(TorchWorkerOptions options, TokenizedCorpus corpus);
  ~TorchWorker() override;
  TorchWorker(const TorchWorker&) = delete;
  TorchWorker& operator=(const TorchWorker&) = delete;

  InnerStepsResult run_inner_steps(int steps) override;
  // train.batch sequences per inner step; once assign_samples() was called, the inner steps
  // read the engine's plan through the run's DataOrder (and never the shard again).
  std::int64_t samples_per_step() const override;
  void assign_samples(std::vector<SampleRange> ranges) override;
  std::uint64_t parameter_count() const override;
  std::span<float> parameters() override;  // zero-copy view of the model's flat buffer
  std::vector<std::uint64_t> bucket_boundaries() const override;  // one bucket per layer group
  // "adamw.exp_avg" and "adamw.exp_avg_sq": zero-copy views of the AdamW moments.
  std::vector<StateSection> state_sections() override;
  // JSON: inner step, tokens, data position (epoch, index), shard, seed.
  std::string progress() const override;
  void restore_progress(const std::string& progress) override;

  // Mean cross-entropy (nats/token) over the fixed validation sequences; no gradient.
  double evaluate();
  std::int64_t step() const;
  std::int64_t tokens() const;
  const TrainerConfig& config() const;
  const TokenizedCorpus& corpus() const;

  // Writes weights (model.safetensors), AdamW state (optimizer.safetensors) and progress
  // (progress.json with the files' sizes and CRC-32C) to `dir` atomically: a temporary
  // directory beside it, fsync, rename.
  void save_checkpoint(const std::string& dir) const;
  // Loads a checkpoint written by save_checkpoint for the same model shapes. A missing,
  // truncated or corrupt file, or a shape mismatch, raises an Error naming the file and the
  // problem and leaves this worker unchanged.
  void load_checkpoint(const std::string& dir);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::trainer
