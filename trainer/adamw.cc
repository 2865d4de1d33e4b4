// AdamW on flat buffers and the learning-rate schedule. Not a general torch::optim
// replacement: one parameter group, fixed hyper-parameters but the lr.
#include "trainer/adamw.h"

#include <cmath>

#include "engine/error.h"

namespace meridian::trainer {

double scheduled_lr(const OptimConfig& c, std::int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.decay_start_step < 0 || step < c.decay_start_step) return c.lr;
  if (step >= c.total_steps) return 0.0;
  const double p = static_cast<double>(step - c.decay_start_step) /
                   static_cast<double>(c.total_steps - c.decay_start_step);
  return c.lr * (1.0 - std::sqrt(p));
}

FlatAdamW::FlatAdamW(const OptimConfig& config, at::Tensor params, at::Tensor grads)
    : config_(config), params_(std::move(params)), grads_(std::move(grads)) {
  MERIDIAN_CHECK_EQ(params_.dim(), 1);
  MERIDIAN_CHECK_EQ(params_.numel(), grads_.numel());
  exp_avg_ = at::zeros_like(params_);
  exp_avg_sq_ = at::zeros_like(params_);
  denom_ = at::empty_like(params_);
}

double FlatAdamW::clip_gradients() {
  at::NoGradGuard no_grad;
  const double norm = grads_.norm().item<double>();
  if (config_.grad_clip > 0) {
    const double coef = config_.grad_clip / (norm + 1e-6);
    if (coef < 1.0) grads_.mul_(coef);
  }
  return norm;
}

void FlatAdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_count_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step_count_));
  // torch.optim.AdamW (single-tensor path): decay, moments, then
  // p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps).
  if (config_.weight_decay != 0) params_.mul_(1.0 - lr * config_.weight_decay);
  exp_avg_.lerp_(grads_, 1.0 - b1);
  exp_avg_sq_.mul_(b2).addcmul_(grads_, grads_, 1.0 - b2);
  at::sqrt_out(denom_, exp_avg_sq_);
  denom_.div_(std::sqrt(bias2)).add_(config_.eps);
  params_.addcdiv_(exp_avg_, denom_, -lr / bias1);
}

}  // namespace meridian::trainer
