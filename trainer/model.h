// The Llama-3-style decoder in LibTorch: RMSNorm (by hand), RoPE, SwiGLU, grouped-query
// attention, untied embeddings. Parameters live as views into one flat tensor and their
// gradients as views into one flat gradient tensor, so the optimizer, DiLoCo and checkpoints
// see single contiguous buffers. Trainer-internal (includes ATen); not an nn::Module.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "trainer/model_config.h"

namespace meridian::trainer {

class LlamaModel {
 public:
  // Allocates zeroed parameters of `dtype` (kFloat for training; kDouble in reference tests).
  explicit LlamaModel(const ModelConfig& config, at::ScalarType dtype = at::kFloat);

  // Deterministic init from `seed`: embeddings and projections N(0, init_std), the residual
  // projections (wo, w2) N(0, init_std / sqrt(2 * layers)), norm weights 1. Same seed, same bits.
  void init_weights(std::uint64_t seed);

  // tokens: [B, T] int64 with T <= seq_len. Returns logits [B, T, vocab] (fp32 under autocast).
  at::Tensor forward(const at::Tensor& tokens) const;

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamSpec>& layout() const { return layout_; }
  // Parameters in layout order; each is a leaf view into flat() with requires_grad set.
  const std::vector<at::Tensor>& parameters() const { return params_; }
  at::Tensor& flat() { return flat_; }
  at::Tensor& flat_grad() { return flat_grad_; }
  // Zeroes the flat gradient in place (the gradient views stay attached to the parameters).
  void zero_grad();

 private:
  ModelConfig config_;
  std::vector<ParamSpec> layout_;
  at::Tensor flat_;       // [N] all parameters
  at::Tensor flat_grad_;  // [N] their gradients
  std::vector<at::Tensor> params_;
  at::Tensor rope_cos_;   // [seq_len, head_dim / 2]
  at::Tensor rope_sin_;
};

// x w^T over the last dimension of x (a Linear without bias; w: [out, in]). In fp32 outside
// autocast it runs on oneDNN's sgemm where the build has it (see model.cc), else at::linear.
at::Tensor projection(const at::Tensor& x, const at::Tensor& w);

// RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight, computed in fp32 (or the input's wider type).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary embedding on interleaved pairs (x[2i], x[2i+1]) as Meta's Llama:
// x: [B, T, H, d]; cos, sin: [>= T, d / 2] with angle t * theta^(-2i/d).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The cos and sin tables for `seq_len` positions.
std::pair<at::Tensor, at::Tensor> rope_tables(int seq_len, int head_dim, double theta,
                                              at::ScalarType dtype);

// Causal grouped-query attention. q: [B, T, H, d]; k, v: [B, T, KV, d] with H % KV == 0
// (query head h reads KV head h / (H / KV)). Returns [B, T, H * d].
at::Tensor grouped_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

struct LossParts {
  at::Tensor total;          // what backward() runs on: cross-entropy + z-loss
  at::Tensor cross_entropy;  // mean next-token cross-entropy (nats)
};

// logits: [B, T, V]; targets: [B, T] int64. z-loss (PRIME's max-z-loss) adds
// weight * mean(max_v logits^2) when z_loss_weight > 0.
LossParts lm_loss(const at::Tensor& logits, const at::Tensor& targets, double z_loss_weight);

}  // namespace meridian::trainer
