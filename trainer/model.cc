// The Llama-style decoder's forward pass and its flat parameter storage. Not the training
// loop (trainer/trainer.cc) and not the optimizer (trainer/adamw.cc).
#include "trainer/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "engine/error.h"
#include "trainer/torch_compat.h"

namespace meridian::trainer {

LlamaModel::LlamaModel(const ModelConfig& config, at::ScalarType dtype)
    : config_(config), layout_(parameter_layout(config)) {
  const auto n = static_cast<std::int64_t>(parameter_count(config_));
  flat_ = at::zeros({n}, at::TensorOptions().dtype(dtype));
  flat_grad_ = at::zeros({n}, at::TensorOptions().dtype(dtype));
  params_.reserve(layout_.size());
  for (const auto& spec : layout_) {
    const auto off = static_cast<std::int64_t>(spec.offset);
    const auto len = static_cast<std::int64_t>(spec.numel);
    at::Tensor p = flat_.narrow(0, off, len).view(spec.shape);
    p.set_requires_grad(true);
    // Autograd accumulates in place into an existing gradient (AccumulateGrad, no grad mode),
    // so every backward lands in flat_grad_ without a copy.
    p.mutable_grad() = flat_grad_.narrow(0, off, len).view(spec.shape);
    params_.push_back(p);
  }
  std::tie(rope_cos_, rope_sin_) =
      rope_tables(config_.seq_len, config_.head_dim(), config_.rope_theta, dtype);
}

void LlamaModel::init_weights(std::uint64_t seed) {
  at::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const double residual_std = config_.init_std / std::sqrt(2.0 * config_.layers);
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const auto& name = layout_[i].name;
    at::Tensor p = params_[i];
    if (name.ends_with("norm.weight")) {
      p.fill_(1.0);
    } else if (name.ends_with("wo.weight") || name.ends_with("w2.weight")) {
      p.normal_(0.0, residual_std, gen);
    } else {
      p.normal_(0.0, config_.init_std, gen);
    }
  }
}

void LlamaModel::zero_grad() { flat_grad_.zero_(); }

at::Tensor LlamaModel::forward(const at::Tensor& tokens) const {
  MERIDIAN_CHECK_EQ(tokens.dim(), 2);
  const std::int64_t B = tokens.size(0), T = tokens.size(1);
  MERIDIAN_CHECK_LE(T, config_.seq_len);
  const std::int64_t H = config_.heads, KV = config_.kv_heads, hd = config_.head_dim();
  const double eps = config_.norm_eps;
  const at::Tensor cos = rope_cos_.narrow(0, 0, T), sin = rope_sin_.narrow(0, 0, T);

  std::size_t i = 0;
  auto next = [&]() -> const at::Tensor& { return params_[i++]; };
  at::Tensor h = at::embedding(next(), tokens);  // [B, T, d]
  for (int l = 0; l < config_.layers; ++l) {
    const at::Tensor &attn_norm = next(), &wq = next(), &wk = next(), &wv = next(),
                     &wo = next(), &ffn_norm = next(), &w1 = next(), &w2 = next(),
                     &w3 = next();
    at::Tensor x = rms_norm(h, attn_norm, eps);
    at::Tensor q = apply_rope(at::linear(x, wq).view({B, T, H, hd}), cos, sin);
    at::Tensor k = apply_rope(at::linear(x, wk).view({B, T, KV, hd}), cos, sin);
    at::Tensor v = at::linear(x, wv).view({B, T, KV, hd});
    h = h + at::linear(grouped_causal_attention(q, k, v), wo);
    x = rms_norm(h, ffn_norm, eps);
    h = h + at::linear(at::silu(at::linear(x, w1)) * at::linear(x, w3), w2);
  }
  const at::Tensor &norm = next(), &output = next();
  return at::linear(rms_norm(h, norm, eps), output);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto wide = at::promote_types(x.scalar_type(), at::kFloat);
  at::Tensor xf = x.to(wide);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return xf * inv * weight;
}

std::pair<at::Tensor, at::Tensor> rope_tables(int seq_len, int head_dim, double theta,
                                              at::ScalarType dtype) {
  // Angles in double so fp32 and fp64 models see the same rotation up to rounding.
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor i = at::arange(0, head_dim / 2, opts);
  at::Tensor inv_freq = at::pow(theta, -2.0 * i / head_dim);
  at::Tensor t = at::arange(0, seq_len, opts);
  at::Tensor angles = at::outer(t, inv_freq);  // [T, d/2]
  return {at::cos(angles).to(dtype), at::sin(angles).to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), d = x.size(3);
  at::Tensor pairs = x.reshape({B, T, H, d / 2, 2});
  at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, T).view({1, T, 1, d / 2}).to(x.scalar_type());
  at::Tensor s = sin.narrow(0, 0, T).view({1, T, 1, d / 2}).to(x.scalar_type());
  return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).view({B, T, H, d});
}

at::Tensor grouped_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const std::int64_t B = q.size(0), T = q.size(1), H = q.size(2), d = q.size(3);
  const std::int64_t KV = k.size(2), rep = H / KV;
  MERIDIAN_CHECK_EQ(H % KV, 0);
  at::Tensor qh = q.transpose(1, 2);  // [B, H, T, d]
  at::Tensor kh = k.transpose(1, 2);  // [B, KV, T, d]
  at::Tensor vh = v.transpose(1, 2);
  if (rep > 1) {
    kh = kh.unsqueeze(2).expand({B, KV, rep, T, d}).reshape({B, H, T, d});
    vh = vh.unsqueeze(2).expand({B, KV, rep, T, d}).reshape({B, H, T, d});
  }
  // The attention op wants matching dtypes; under autocast q/k/v are all bf16 already.
  at::Tensor o = compat::causal_attention(qh, kh, vh);  // [B, H, T, d]
  return o.transpose(1, 2).reshape({B, T, H * d});
}

LossParts lm_loss(const at::Tensor& logits, const at::Tensor& targets, double z_loss_weight) {
  const std::int64_t V = logits.size(-1);
  const auto wide = at::promote_types(logits.scalar_type(), at::kFloat);
  at::Tensor flat_logits = logits.reshape({-1, V}).to(wide);
  at::Tensor ce = at::cross_entropy_loss(flat_logits, targets.reshape({-1}));
  at::Tensor total = ce;
  if (z_loss_weight > 0) {
    at::Tensor max_logit = std::get<0>(flat_logits.max(-1));
    total = ce + z_loss_weight * max_logit.pow(2).mean();
  }
  return {total, ce};
}

}  // namespace meridian::trainer
