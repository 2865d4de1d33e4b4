// Model merging on safetensors checkpoints of one architecture, as MergeKit does it: linear,
// SLERP, TIES and DARE. Every tensor is merged in fp64 and written back in its own dtype.
// Not a model loader: it sees named tensors only, and refuses checkpoints that do not match.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace meridian::safetensors {
class File;
}

namespace meridian::post {

enum class MergeMethod { kLinear, kSlerp, kTies, kDare };
MergeMethod parse_merge_method(const std::string& name);  // ConfigError when unknown
std::string merge_method_name(MergeMethod m);

struct MergeOptions {
  MergeMethod method = MergeMethod::kLinear;
  // linear: one weight per model, result Σ wᵢθᵢ / Σ wᵢ. TIES/DARE: one weight per model other
  // than the base. Empty = all 1. SLERP: unused (see t).
  std::vector<double> weights;
  double t = 0.5;          // SLERP: 0 gives the first model, 1 the second
  double density = 0.5;    // TIES/DARE: fraction of each task vector kept (DARE drops with
                           // p = 1 − density and rescales the kept entries by 1/(1 − p))
  int base = 0;            // TIES/DARE: index of the base model
  std::uint64_t seed = 0;  // DARE's drop mask
};

// SLERP falls back to linear interpolation when |cos| of the two (normalised) tensors exceeds
// this, as MergeKit does: the arc is too short for sin() to be accurate.
inline constexpr double kSlerpColinearCos = 0.9995;

// The per-tensor methods, on flat fp64 vectors (exposed for tests). `models[i]` all have the
// same length; `name` seeds DARE's mask and names errors.
std::vector<double> merge_linear(const std::vector<std::span<const double>>& models,
                                 const std::vector<double>& weights);
std::vector<double> merge_slerp(std::span<const double> a, std::span<const double> b, double t);
std::vector<double> merge_ties(const std::vector<std::span<const double>>& models, int base,
                               const std::vector<double>& weights, double density);
std::vector<double> merge_dare(const std::vector<std::span<const double>>& models, int base,
                               const std::vector<double>& weights, double density,
                               std::uint64_t seed, const std::string& name);

// Checks that every checkpoint has the same tensor names, dtypes and shapes as the first;
// ConfigError naming the checkpoint and the tensor otherwise.
void check_same_architecture(const std::vector<const safetensors::File*>& models);

// Merges whole checkpoints and writes `out` (a safetensors file) atomically, with the method and
// inputs in __metadata__. Non-float tensors (step counters) must be equal in every model and are
// copied. Returns the number of tensors merged.
std::size_t merge_checkpoints(const std::vector<const safetensors::File*>& models,
                              const MergeOptions& options, const std::filesystem::path& out);

// A checkpoint argument: a .safetensors file, or a directory holding model.safetensors or exactly
// one *.safetensors file. ConfigError otherwise.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& arg);

}  // namespace meridian::post
