// Linear, SLERP, TIES and DARE merging of same-architecture safetensors checkpoints.
// Not a loader of model configs: tensors are matched by name, dtype and shape only.
#include "trainer/post/merge.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

#include "engine/core/error.h"
#include "trainer/safetensors/float_convert.h"
#include "trainer/safetensors/safetensors.h"

namespace meridian::post {
namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Task vectors τᵢ = θᵢ − θ_base of every model but the base, in model order.
std::vector<std::vector<double>> task_vectors(const std::vector<std::span<const double>>& models,
                                              int base) {
  std::vector<std::vector<double>> tau;
  const auto& b = models[base];
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (static_cast<int>(i) == base) continue;
    std::vector<double> d(b.size());
    for (std::size_t j = 0; j < b.size(); ++j) d[j] = models[i][j] - b[j];
    tau.push_back(std::move(d));
  }
  return tau;
}

void check_task_args(const std::vector<std::span<const double>>& models, int base,
                     const std::vector<double>& weights, double density, const char* method) {
  MERIDIAN_CHECK_GE(models.size(), 2u);
  MERIDIAN_CHECK(base >= 0 && base < static_cast<int>(models.size()));
  MERIDIAN_CHECK_EQ(weights.size(), models.size() - 1);
  if (!(density > 0 && density <= 1))
    throw ConfigError(std::string(method) + ": --density must be in (0, 1], got " +
                      std::to_string(density));
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

MergeMethod parse_merge_method(const std::string& name) {
  if (name == "linear") return MergeMethod::kLinear;
  if (name == "slerp") return MergeMethod::kSlerp;
  if (name == "ties") return MergeMethod::kTies;
  if (name == "dare") return MergeMethod::kDare;
  throw ConfigError("unknown --method '" + name +
                    "' (expected linear, slerp, ties or dare)");
}

std::string merge_method_name(MergeMethod m) {
  switch (m) {
    case MergeMethod::kLinear:
      return "linear";
    case MergeMethod::kSlerp:
      return "slerp";
    case MergeMethod::kTies:
      return "ties";
    case MergeMethod::kDare:
      return "dare";
  }
  return "?";
}

std::vector<double> merge_linear(const std::vector<std::span<const double>>& models,
                                 const std::vector<double>& weights) {
  MERIDIAN_CHECK(!models.empty());
  MERIDIAN_CHECK_EQ(weights.size(), models.size());
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (total == 0) throw ConfigError("merge linear: the weights sum to 0");
  std::vector<double> out(models[0].size(), 0.0);
  for (std::size_t i = 0; i < models.size(); ++i)
    for (std::size_t j = 0; j < out.size(); ++j) out[j] += weights[i] * models[i][j];
  for (double& v : out) v /= total;
  return out;
}

std::vector<double> merge_slerp(std::span<const double> a, std::span<const double> b, double t) {
  MERIDIAN_CHECK_EQ(a.size(), b.size());
  std::vector<double> out(a.size());
  double aa = 0, bb = 0, ab = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    aa += a[j] * a[j];
    bb += b[j] * b[j];
    ab += a[j] * b[j];
  }
  double c0 = 1 - t, c1 = t;  // linear interpolation unless the arc is long enough
  if (aa > 0 && bb > 0) {
    const double cos = std::clamp(ab / (std::sqrt(aa) * std::sqrt(bb)), -1.0, 1.0);
    if (std::abs(cos) <= kSlerpColinearCos) {
      const double theta = std::acos(cos), sin_theta = std::sin(theta);
      c0 = std::sin((1 - t) * theta) / sin_theta;
      c1 = std::sin(t * theta) / sin_theta;
    }
  }
  for (std::size_t j = 0; j < a.size(); ++j) out[j] = c0 * a[j] + c1 * b[j];
  return out;
}

std::vector<double> merge_ties(const std::vector<std::span<const double>>& models, int base,
                               const std::vector<double>& weights, double density) {
  check_task_args(models, base, weights, density, "merge ties");
  auto tau = task_vectors(models, base);
  const std::size_t n = models[base].size();
  // Trim: keep the k = floor(density · n) largest magnitudes of each task vector (ties broken by
  // position, so the result does not depend on the sort).
  const auto k = static_cast<std::size_t>(std::floor(density * static_cast<double>(n)));
  for (auto& d : tau) {
    if (k >= n) continue;
    std::vector<std::size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), [&](std::size_t x, std::size_t y) {
      const double ax = std::abs(d[x]), ay = std::abs(d[y]);
      return ax != ay ? ax > ay : x < y;
    });
    for (std::size_t r = k; r < n; ++r) d[idx[r]] = 0;
  }
  // Elect the sign of the weighted sum, then average only the entries that agree with it.
  std::vector<double> out(models[base].begin(), models[base].end());
  for (std::size_t j = 0; j < n; ++j) {
    double sum = 0;
    for (std::size_t i = 0; i < tau.size(); ++i) sum += weights[i] * tau[i][j];
    if (sum == 0) continue;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < tau.size(); ++i) {
      if (tau[i][j] != 0 && (tau[i][j] > 0) == (sum > 0)) {
        num += weights[i] * tau[i][j];
        den += weights[i];
      }
    }
    if (den != 0) out[j] += num / den;
  }
  return out;
}

std::vector<double> merge_dare(const std::vector<std::span<const double>>& models, int base,
                               const std::vector<double>& weights, double density,
                               std::uint64_t seed, const std::string& name) {
  check_task_args(models, base, weights, density, "merge dare");
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (total == 0) throw ConfigError("merge dare: the weights sum to 0");
  auto tau = task_vectors(models, base);
  std::vector<double> out(models[base].begin(), models[base].end());
  for (std::size_t i = 0; i < tau.size(); ++i) {
    // One stream per (seed, tensor, model): the mask does not depend on the tensor order.
    std::mt19937_64 rng(seed ^ fnv1a(name) ^ (0x9e3779b97f4a7c15ull * (i + 1)));
    for (std::size_t j = 0; j < out.size(); ++j) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
      if (u < density) out[j] += weights[i] / total * tau[i][j] / density;
    }
  }
  return out;
}

void check_same_architecture(const std::vector<const safetensors::File*>& models) {
  MERIDIAN_CHECK(!models.empty());
  const safetensors::File& ref = *models[0];
  for (std::size_t m = 1; m < models.size(); ++m) {
    const safetensors::File& f = *models[m];
    for (const auto& t : ref.tensors()) {
      const safetensors::Tensor* o = f.find(t.name);
      const std::string where = "merge: checkpoint '" + f.source() + "' ";
      if (!o)
        throw ConfigError(where + "has no tensor \"" + t.name + "\" (in '" + ref.source() + "')");
      if (o->dtype != t.dtype)
        throw ConfigError(where + "tensor \"" + t.name + "\" is " +
                          std::string(safetensors::dtype_name(o->dtype)) + ", '" + ref.source() +
                          "' has " + std::string(safetensors::dtype_name(t.dtype)));
      if (o->shape != t.shape)
        throw ConfigError(where + "tensor \"" + t.name + "\" has shape " + shape_str(o->shape) +
                          ", '" + ref.source() + "' has " + shape_str(t.shape));
    }
    for (const auto& t : f.tensors())
      if (!ref.find(t.name))
        throw ConfigError("merge: checkpoint '" + f.source() + "' has a tensor \"" + t.name +
                          "\" that '" + ref.source() + "' lacks");
  }
}

std::size_t merge_checkpoints(const std::vector<const safetensors::File*>& models,
                              const MergeOptions& o, const std::filesystem::path& out) {
  const std::size_t n_models = models.size();
  const std::string method = merge_method_name(o.method);
  if (n_models < 2) throw ConfigError("merge " + method + ": needs at least two checkpoints");
  if (o.method == MergeMethod::kSlerp && n_models != 2)
    throw ConfigError("merge slerp: needs exactly two checkpoints, got " +
                      std::to_string(n_models));
  const bool task = o.method == MergeMethod::kTies || o.method == MergeMethod::kDare;
  if (task && (o.base < 0 || o.base >= static_cast<int>(n_models)))
    throw ConfigError("merge " + method + ": --base " + std::to_string(o.base) +
                      " is not one of the " + std::to_string(n_models) + " checkpoints (0-based)");
  const std::size_t n_weights = task ? n_models - 1 : n_models;
  std::vector<double> weights = o.weights.empty() ? std::vector<double>(n_weights, 1.0) : o.weights;
  if (o.method != MergeMethod::kSlerp && weights.size() != n_weights)
    throw ConfigError("merge " + method + ": --weights needs " + std::to_string(n_weights) +
                      " values (" + (task ? "one per model other than the base" : "one per model") +
                      "), got " + std::to_string(weights.size()));
  if (o.method == MergeMethod::kSlerp && !(o.t >= 0 && o.t <= 1))
    throw ConfigError("merge slerp: --t must be in [0, 1], got " + std::to_string(o.t));
  check_same_architecture(models);

  std::vector<std::vector<std::byte>> storage;
  std::vector<safetensors::TensorView> views;
  storage.reserve(models[0]->tensors().size());
  for (const auto& t : models[0]->tensors()) {
    if (!safetensors::is_float_dtype(t.dtype)) {
      for (std::size_t m = 1; m < n_models; ++m) {
        const auto& other = models[m]->at(t.name).data;
        if (other.size() != t.data.size() ||
            std::memcmp(other.data(), t.data.data(), t.data.size()))
          throw ConfigError("merge: non-float tensor \"" + t.name + "\" differs between '" +
                            models[0]->source() + "' and '" + models[m]->source() +
                            "'; it cannot be merged");
      }
      storage.emplace_back(t.data.begin(), t.data.end());
    } else {
      std::vector<std::vector<double>> values;
      for (const auto* f : models) {
        const std::vector<float> v = safetensors::to_f32(f->at(t.name));
        values.emplace_back(v.begin(), v.end());
      }
      std::vector<std::span<const double>> spans(values.begin(), values.end());
      std::vector<double> merged;
      switch (o.method) {
        case MergeMethod::kLinear:
          merged = merge_linear(spans, weights);
          break;
        case MergeMethod::kSlerp:
          merged = merge_slerp(spans[0], spans[1], o.t);
          break;
        case MergeMethod::kTies:
          merged = merge_ties(spans, o.base, weights, o.density);
          break;
        case MergeMethod::kDare:
          merged = merge_dare(spans, o.base, weights, o.density, o.seed, t.name);
          break;
      }
      if (t.dtype == safetensors::Dtype::kF64) {
        storage.emplace_back(merged.size() * 8);
        std::memcpy(storage.back().data(), merged.data(), merged.size() * 8);
      } else {
        const std::vector<float> f32(merged.begin(), merged.end());  // round to nearest
        storage.push_back(safetensors::from_f32(f32, t.dtype));
      }
    }
    views.push_back({t.name, t.dtype, t.shape, storage.back()});
  }

  std::ostringstream inputs, ws;
  for (std::size_t m = 0; m < n_models; ++m) inputs << (m ? "," : "") << models[m]->source();
  for (std::size_t i = 0; i < weights.size(); ++i) ws << (i ? "," : "") << weights[i];
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"meridian.merge.method", method}, {"meridian.merge.inputs", inputs.str()}};
  if (o.method == MergeMethod::kSlerp) {
    meta["meridian.merge.t"] = std::to_string(o.t);
  } else {
    meta["meridian.merge.weights"] = ws.str();
  }
  if (task) {
    meta["meridian.merge.base"] = models[o.base]->source();
    meta["meridian.merge.density"] = std::to_string(o.density);
  }
  if (o.method == MergeMethod::kDare) meta["meridian.merge.seed"] = std::to_string(o.seed);
  safetensors::write(out, views, meta);
  return views.size();
}

std::filesystem::path resolve_checkpoint(const std::filesystem::path& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return arg;
  if (!fs::is_directory(arg, ec))
    throw ConfigError("checkpoint '" + arg.string() + "' does not exist");
  if (fs::is_regular_file(arg / "model.safetensors", ec)) return arg / "model.safetensors";
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(arg))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path());
  if (found.size() != 1)
    throw ConfigError("checkpoint directory '" + arg.string() + "' holds " +
                      std::to_string(found.size()) +
                      " .safetensors files and no model.safetensors; name the file");
  return found[0];
}

}  // namespace meridian::post
