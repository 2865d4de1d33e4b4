// Trainer checkpoints on disk: model.safetensors (weights by torchtitan name), optimizer.safetensors
// (AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>") and progress.json (the worker's
// progress plus each file's size and CRC-32C). Written atomically, verified on load. Pure C++;
// not the engine's recovery protocol (that ships the same spans over the network).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "trainer/model_config.h"

namespace meridian::trainer {

inline constexpr const char* kCheckpointFormat = "meridian-trainer-checkpoint-1";

struct CheckpointView {
  const ModelConfig* model = nullptr;
  std::span<const float> params, exp_avg, exp_avg_sq;  // flat, in parameter_layout order
  std::string progress_json;                           // the worker's progress()
};

// Writes `dir` atomically: everything goes to a sibling temporary directory, each file is
// fsynced, then the directory is renamed over `dir` (a previous checkpoint there is replaced)
// and the parent directory fsynced.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointView& view);

struct LoadedCheckpoint {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::string progress_json;
};

// Reads and verifies a checkpoint for `model`: format, model shapes, file sizes and CRC-32C
// against progress.json, the safetensors headers and data checksums, every tensor's name,
// dtype (F32) and shape. Throws ConfigError (missing files, other model) or ProtocolError
// (truncated or corrupt data), naming the file and the problem.
LoadedCheckpoint read_checkpoint(const std::filesystem::path& dir, const ModelConfig& model);

}  // namespace meridian::trainer
