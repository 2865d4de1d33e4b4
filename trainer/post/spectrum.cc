// Spectrum: BDCSVD singular values, the Marchenko–Pastur edge, SNR, top-module selection and
// the YAML the trainer reads. Not the freezing itself (the trainer's job).
#include "trainer/post/spectrum.h"

#include <yaml-cpp/yaml.h>

#include <Eigen/Dense>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <ostream>

#include "engine/core/error.h"
#include "trainer/safetensors/float_convert.h"
#include "trainer/safetensors/safetensors.h"

namespace meridian::post {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lo + hi);
}

}  // namespace

double mp_median(double beta) {
  MERIDIAN_CHECK(beta > 0 && beta <= 1);
  // Density on [a, b]: f(x) = √((b − x)(x − a)) / (2π β x). With x = c − h cos t (c, h the
  // centre and half-width) the square root becomes h sin t and dx = h sin t dt, so the CDF is
  // the integral over t ∈ [0, π] of the smooth h² sin²t / (2π β x(t)), even at β = 1 where a = 0.
  const double a = std::pow(1 - std::sqrt(beta), 2), b = std::pow(1 + std::sqrt(beta), 2);
  const double c = 0.5 * (a + b), h = 0.5 * (b - a);
  const int steps = 8192;
  const double dt = std::numbers::pi / steps;
  auto g = [&](double t) {
    const double x = c - h * std::cos(t);
    const double s = std::sin(t);
    return h * h * s * s / (2 * std::numbers::pi * beta * x);
  };
  std::vector<double> cdf(steps + 1, 0.0);
  // Midpoint rule: never evaluates the 0/0 at t = 0 when β = 1.
  for (int i = 0; i < steps; ++i) cdf[i + 1] = cdf[i] + dt * g((i + 0.5) * dt);
  const double half = 0.5 * cdf[steps];  // normalising by the computed total cancels its error
  const auto it = std::lower_bound(cdf.begin(), cdf.end(), half);
  const int i = static_cast<int>(it - cdf.begin());
  const double frac = (half - cdf[i - 1]) / (cdf[i] - cdf[i - 1]);
  const double t = (i - 1 + frac) * dt;
  return c - h * std::cos(t);
}

MatrixSpectrum analyze_matrix(std::string name, std::span<const float> values, std::int64_t rows,
                              std::int64_t cols) {
  MERIDIAN_CHECK_EQ(static_cast<std::int64_t>(values.size()), rows * cols);
  MatrixSpectrum s;
  s.name = std::move(name);
  s.module_type = module_type_of(s.name);
  s.rows = rows;
  s.cols = cols;
  if (rows == 0 || cols == 0) return s;
  for (float v : values)
    if (!std::isfinite(v))
      throw ConfigError("tensor \"" + s.name +
                        "\" has a non-finite value; cannot take its spectrum");

  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::MatrixXd w = Eigen::Map<const RowMajor>(values.data(), rows, cols).cast<double>();
  // Singular values only (no U, V): BDCSVD is divide and conquer, ~70× faster than JacobiSVD.
  Eigen::BDCSVD<Eigen::MatrixXd> svd(w);
  const Eigen::VectorXd& sv = svd.singularValues();
  s.singular_values.assign(sv.data(), sv.data() + sv.size());

  const double m = static_cast<double>(std::min(rows, cols));
  const double n = static_cast<double>(std::max(rows, cols));
  const double s_med = median_of(s.singular_values);
  s.sigma = s_med / std::sqrt(n * mp_median(m / n));
  s.mp_edge = s.sigma * (std::sqrt(m) + std::sqrt(n));
  for (double v : s.singular_values) {
    if (v > s.mp_edge) {
      ++s.signal_rank;
      s.signal_energy += v * v;
    } else {
      s.noise_energy += v * v;
    }
  }
  s.snr = s.noise_energy > 0 ? s.signal_energy / s.noise_energy
                             : std::numeric_limits<double>::infinity();
  return s;
}

std::string module_type_of(const std::string& tensor_name) {
  // Compare whole dot-separated components so "w1" never matches inside "layers.1".
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kTypes = {
      {"q", {"q_proj", "wq", "query"}},
      {"k", {"k_proj", "wk", "key"}},
      {"v", {"v_proj", "wv", "value"}},
      {"o", {"o_proj", "wo", "out_proj", "c_proj"}},
      {"gate", {"gate_proj", "w1"}},
      {"up", {"up_proj", "w3"}},
      {"down", {"down_proj", "w2"}},
      {"embed", {"embed_tokens", "tok_embeddings", "wte", "embedding", "embed"}},
      {"lm_head", {"lm_head", "output"}},
  };
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= tensor_name.size()) {
    const std::size_t dot = tensor_name.find('.', start);
    parts.push_back(tensor_name.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& [type, patterns] : kTypes)
    for (const auto& p : parts)
      if (std::find(patterns.begin(), patterns.end(), p) != patterns.end()) return type;
  return "other";
}

std::vector<bool> select_top(const std::vector<MatrixSpectrum>& matrices, double top_fraction,
                             bool by_type) {
  if (!(top_fraction >= 0 && top_fraction <= 1))
    throw ConfigError("spectrum: --top must be between 0% and 100%, got " +
                      std::to_string(top_fraction * 100) + "%");
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < matrices.size(); ++i)
    groups[by_type ? matrices[i].module_type : std::string("all")].push_back(i);
  std::vector<bool> selected(matrices.size(), false);
  for (auto& [_, idx] : groups) {
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      if (matrices[a].snr != matrices[b].snr) return matrices[a].snr > matrices[b].snr;
      return matrices[a].name < matrices[b].name;
    });
    // Rounded to nearest (halves up): a group of one (embed, lm_head) is kept only from 50 %.
    const auto k =
        static_cast<std::size_t>(std::llround(top_fraction * static_cast<double>(idx.size())));
    for (std::size_t j = 0; j < std::min(k, idx.size()); ++j) selected[idx[j]] = true;
  }
  return selected;
}

std::vector<std::string> SpectrumReport::trainable() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < matrices.size(); ++i)
    if (selected[i]) out.push_back(matrices[i].name);
  if (options.train_vectors) out.insert(out.end(), vectors.begin(), vectors.end());
  return out;
}

SpectrumReport run_spectrum(const safetensors::File& checkpoint, const SpectrumOptions& options) {
  SpectrumReport r;
  r.checkpoint = checkpoint.source();
  r.options = options;
  for (const auto& t : checkpoint.tensors()) {
    if (!safetensors::is_float_dtype(t.dtype)) {
      r.skipped.push_back(t.name);
      continue;
    }
    if (t.shape.size() != 2) {
      r.vectors.push_back(t.name);
      r.vector_params += t.numel();
      continue;
    }
    const std::vector<float> v = safetensors::to_f32(t);
    r.matrices.push_back(analyze_matrix(t.name, v, t.shape[0], t.shape[1]));
    r.matrix_params += t.numel();
  }
  r.selected = select_top(r.matrices, options.top_fraction, options.by_type);
  for (std::size_t i = 0; i < r.matrices.size(); ++i)
    if (r.selected[i]) r.selected_matrix_params += r.matrices[i].rows * r.matrices[i].cols;
  return r;
}

void write_yaml(const SpectrumReport& r, std::ostream& os) {
  std::vector<std::size_t> order(r.matrices.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (r.matrices[a].module_type != r.matrices[b].module_type)
      return r.matrices[a].module_type < r.matrices[b].module_type;
    return r.matrices[a].snr > r.matrices[b].snr;
  });

  YAML::Emitter y;
  y << YAML::Comment(
      "meridian spectrum: train the listed tensors, freeze the rest. SNR = energy of singular "
      "values above the Marchenko-Pastur edge / energy below; sigma from the median singular "
      "value (trainer/post/spectrum.h).");
  y << YAML::BeginMap;
  y << YAML::Key << "method" << YAML::Value << "spectrum";
  y << YAML::Key << "checkpoint" << YAML::Value << r.checkpoint;
  y << YAML::Key << "top_fraction" << YAML::Value << r.options.top_fraction;
  y << YAML::Key << "by_type" << YAML::Value << r.options.by_type;
  y << YAML::Key << "train_vectors" << YAML::Value << r.options.train_vectors;
  y << YAML::Key << "matrix_params" << YAML::Value << r.matrix_params;
  y << YAML::Key << "selected_matrix_params" << YAML::Value << r.selected_matrix_params;
  y << YAML::Key << "vector_params" << YAML::Value << r.vector_params;
  y << YAML::Key << "train" << YAML::Value << YAML::BeginSeq;
  for (const auto& name : r.trainable()) y << name;
  y << YAML::EndSeq;
  y << YAML::Key << "frozen" << YAML::Value << YAML::BeginSeq;
  for (std::size_t i = 0; i < r.matrices.size(); ++i)
    if (!r.selected[i]) y << r.matrices[i].name;
  if (!r.options.train_vectors)
    for (const auto& v : r.vectors) y << v;
  for (const auto& v : r.skipped) y << v;
  y << YAML::EndSeq;
  y << YAML::Key << "modules" << YAML::Value << YAML::BeginSeq;
  for (std::size_t i : order) {
    const MatrixSpectrum& m = r.matrices[i];
    y << YAML::Flow << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << m.name;
    y << YAML::Key << "type" << YAML::Value << m.module_type;
    y << YAML::Key << "shape" << YAML::Value << YAML::Flow << YAML::BeginSeq << m.rows << m.cols
      << YAML::EndSeq;
    y << YAML::Key << "sigma" << YAML::Value << m.sigma;
    y << YAML::Key << "mp_edge" << YAML::Value << m.mp_edge;
    y << YAML::Key << "max_sv" << YAML::Value
      << (m.singular_values.empty() ? 0.0 : m.singular_values.front());
    y << YAML::Key << "signal_rank" << YAML::Value << m.signal_rank;
    y << YAML::Key << "snr" << YAML::Value << m.snr;
    y << YAML::Key << "train" << YAML::Value << static_cast<bool>(r.selected[i]);
    y << YAML::EndMap;
  }
  y << YAML::EndSeq;
  y << YAML::EndMap;
  os << y.c_str() << "\n";
}

std::vector<std::string> read_trainable(const std::filesystem::path& yaml_path) {
  const std::string where = "spectrum file '" + yaml_path.string() + "'";
  YAML::Node root;
  try {
    root = YAML::LoadFile(yaml_path.string());
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": " + e.what());
  }
  const YAML::Node train = root["train"];
  if (!train || !train.IsSequence())
    throw ConfigError(where + ": key 'train' must be a list of tensor names");
  std::vector<std::string> out;
  for (const auto& n : train) {
    if (!n.IsScalar()) throw ConfigError(where + ": every entry of 'train' must be a tensor name");
    out.push_back(n.as<std::string>());
  }
  return out;
}

}  // namespace meridian::post
