// AdamW on flat buffers and the learning-rate schedule. Not a general torch::optim
// replacement: one parameter group, fixed hyper-parameters but the lr.
#include "trainer/adamw.h"

#include <ATen/Dispatch.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not reached through ATen.h in LibTorch 2.11)

#include <cmath>

#include "engine/core/error.h"

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
  MERIDIAN_CHECK(params_.is_contiguous() && grads_.is_contiguous());
  MERIDIAN_CHECK(grads_.scalar_type() == params_.scalar_type());
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

namespace {

// One pass of torch.optim.AdamW's update over n elements: decay, moments, then
// p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps), each in T like ATen's in-place ops.
template <typename T>
void adamw_pass(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                std::int64_t n, double decay, double beta1, double beta2, double sqrt_bias2,
                double eps, double step_size) {
  const T keep = static_cast<T>(decay), w1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), w2 = static_cast<T>(1.0 - beta2);
  const T s2 = static_cast<T>(sqrt_bias2), e = static_cast<T>(eps), lr = static_cast<T>(step_size);
  for (std::int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = m[i] + w1 * (gi - m[i]);
    const T vi = v[i] * b2 + w2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * keep + lr * (mi / (std::sqrt(vi) / s2 + e));
  }
}

}  // namespace

void FlatAdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_count_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step_count_));
  // torch.optim.AdamW (single-tensor path) fused into one pass over the four buffers instead
  // of eight passes of ATen ops (each a round trip through memory for a 50 MB buffer).
  const double decay = 1.0 - lr * config_.weight_decay;
  const std::int64_t n = params_.numel();
  AT_DISPATCH_FLOATING_TYPES(params_.scalar_type(), "FlatAdamW::step", [&] {
    adamw_pass<scalar_t>(params_.data_ptr<scalar_t>(), grads_.data_ptr<scalar_t>(),
                         exp_avg_.data_ptr<scalar_t>(), exp_avg_sq_.data_ptr<scalar_t>(), n, decay,
                         b1, b2, std::sqrt(bias2), config_.eps, -lr / bias1);
  });
}

}  // namespace meridian::trainer
