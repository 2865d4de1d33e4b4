// Trainer checkpoints on disk: model.safetensors (weights by torchtitan name),
// optimizer.safetensors (AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>"; a DiLoCo node adds
// its outer momentum "outer_momentum.<name>"), progress.json (the worker's progress, a node's
// outer progress, each tensor file's size and CRC-32C) and manifest.json (size and SHA-256 of
// each of those three files, written last). Written atomically, verified on load. Pure C++; not
// the engine's recovery protocol (that ships the same spans over the network).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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
  // A DiLoCo node's checkpoint (trainer/run_checkpoint.h) adds its outer state: the outer
  // momentum (flat, same layout) and its outer progress as a JSON object text. Both empty for
  // a trainer checkpoint.
  std::span<const float> outer_momentum;
  std::string outer_json;
  // An overlapped node's pending pseudo-gradient (OuterStepView::pending; same layout), written
  // as "outer_pending.<name>" when not empty.
  std::span<const float> outer_pending;
  // A streaming node's local parameters (OuterStepView::local; same layout), which between its
  // fragments' merges are not the outer ones: "outer_local.<name>" when not empty.
  std::span<const float> outer_local;
  // A sparse-codec node's error-feedback buffer (OuterStepView::error_feedback; same layout):
  // "outer_error_feedback.<name>" when not empty.
  std::span<const float> outer_error_feedback;
  // Called after each durable step of the write (a file written and fsynced, a rename) with
  // the path it touched; tests crash the writer there. Unset: nothing is called.
  std::function<void(const std::filesystem::path&)> after_each_step;
};

// Writes `dir` atomically: everything goes to a sibling temporary directory, each file is
// fsynced (the manifest last), then the directory is renamed over `dir` (a previous checkpoint
// there is replaced) and the parent directory fsynced. Returns the bytes written (all files).
std::uint64_t write_checkpoint(const std::filesystem::path& dir, const CheckpointView& view);

struct LoadedCheckpoint {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::string progress_json;
  std::vector<float> outer_momentum;  // empty unless the checkpoint holds an outer state
  std::vector<float> outer_pending;   // empty unless it holds a pending pseudo-gradient
  std::vector<float> outer_local;     // empty unless it holds streaming local parameters
  std::vector<float> outer_error_feedback;  // empty unless it holds an error-feedback buffer
  std::string outer_json;             // "" unless the checkpoint holds an outer state
};

// Reads and verifies a checkpoint for `model`: first the manifest (it lists exactly the three
// files, the directory holds nothing else, every file has its recorded size and SHA-256), then
// format, model shapes, file sizes and CRC-32C against progress.json, the safetensors headers
// and data checksums, every tensor's name, dtype (F32) and shape. A directory without a
// manifest (incomplete, or written before manifests) is refused. Throws ConfigError (missing
// files or manifest, other model) or ProtocolError (truncated, corrupt or modified data),
// naming the file and the problem.
LoadedCheckpoint read_checkpoint(const std::filesystem::path& dir, const ModelConfig& model);

// progress.json's text after checking it (only it) against the manifest: cheap metadata (which
// data shard, which step) that can be trusted without reading the tensor files. Throws as
// read_checkpoint does.
std::string read_checkpoint_metadata(const std::filesystem::path& dir);

}  // namespace meridian::trainer
