// Spectrum layer selection (Hartford et al., 2024): the singular values of every weight matrix,
// the Marchenko–Pastur edge that separates noise from signal, a signal-to-noise ratio, and the
// top modules to train. Eigen's BDCSVD does the SVD. Not a trainer: it writes the list of
// modules to train; the trainer freezes the rest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace meridian::safetensors {
class File;
}

namespace meridian::post {

// The spectrum of one m×n matrix W (m ≤ n after transposition) and what it says.
//
// Noise model: W = S + N with N's entries i.i.d., mean 0, variance σ². The singular values of N
// fill [σ(√n − √m), σ(√n + √m)] (Marchenko–Pastur, aspect β = m/n), so
//   mp_edge = σ̂ (√m + √n)
// and a singular value above it carries signal. σ is estimated from the median singular value
// s_med, which a low-rank S barely moves (Gavish & Donoho, 2014):
//   σ̂ = s_med / √(n · μ_β)
// where μ_β is the median of the Marchenko–Pastur law with ratio β and unit variance (the law of
// the eigenvalues of N Nᵀ / n when σ = 1), found numerically (mp_median()).
//   snr = Σ_{s > mp_edge} s² / Σ_{s ≤ mp_edge} s²   (energy above the edge / energy below).
struct MatrixSpectrum {
  std::string name;         // tensor name, e.g. "layers.0.attention.wq.weight"
  std::string module_type;  // q, k, v, o, gate, up, down, embed, lm_head or other
  std::int64_t rows = 0, cols = 0;
  std::vector<double> singular_values;  // descending
  double sigma = 0;                     // σ̂
  double mp_edge = 0;                   // σ̂ (√m + √n)
  int signal_rank = 0;                  // singular values above mp_edge
  double signal_energy = 0;             // Σ s² above the edge
  double noise_energy = 0;              // Σ s² at or below the edge
  double snr = 0;                       // signal_energy / noise_energy; +inf when noise_energy is 0
};

// Median of the Marchenko–Pastur distribution with ratio beta in (0, 1] and unit variance.
// μ_1 ≈ 0.6528 (the square of the quarter-circle median 0.80795); μ_β → 1 as β → 0.
double mp_median(double beta);

// Analyses a row-major rows×cols fp32 matrix.
MatrixSpectrum analyze_matrix(std::string name, std::span<const float> values, std::int64_t rows,
                              std::int64_t cols);

// The module type of a parameter from its name: Llama/HF (q_proj, gate_proj, ...) and
// torchtitan (wq, w1 = gate, w3 = up, w2 = down, tok_embeddings, output) conventions.
std::string module_type_of(const std::string& tensor_name);

struct SpectrumOptions {
  double top_fraction = 0.25;  // share of matrices to train, per group, rounded to nearest
  bool by_type = false;        // rank within each module type instead of over all matrices
  bool train_vectors = true;   // 1-D tensors (norms, biases) are too small to rank: train them
};

struct SpectrumReport {
  std::string checkpoint;
  SpectrumOptions options;
  std::vector<MatrixSpectrum> matrices;  // in checkpoint order
  std::vector<bool> selected;            // parallel to matrices
  std::vector<std::string> vectors;      // non-2-D float tensors (not ranked)
  std::vector<std::string> skipped;      // non-float tensors (never trained)
  std::int64_t matrix_params = 0, selected_matrix_params = 0, vector_params = 0;

  // Names of the tensors to train: the selected matrices plus, with train_vectors, the vectors.
  std::vector<std::string> trainable() const;
};

// Analyses every 2-D floating-point tensor of a checkpoint and selects the top modules.
SpectrumReport run_spectrum(const safetensors::File& checkpoint, const SpectrumOptions& options);

// Selection alone (exposed for tests): top_fraction of `matrices` by SNR, within each module type
// when by_type. Ties are broken by name so the result is deterministic. Returns one flag per
// matrix.
std::vector<bool> select_top(const std::vector<MatrixSpectrum>& matrices, double top_fraction,
                             bool by_type);

// The YAML the trainer reads: `train:` (tensor names), `frozen:`, and a `modules:` table with
// every matrix's statistics, ranked.
void write_yaml(const SpectrumReport& report, std::ostream& os);

// Reads the `train:` list of a Spectrum YAML (for the trainer); ConfigError naming the file when
// it is missing or malformed.
std::vector<std::string> read_trainable(const std::filesystem::path& yaml_path);

}  // namespace meridian::post
