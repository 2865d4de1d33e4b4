// The inner optimizer: AdamW over one flat parameter buffer (torch.optim.AdamW's update rule,
// decoupled weight decay on every element), global-norm gradient clipping, and the
// warmup-stable-(1 - sqrt) decay learning-rate schedule. Trainer-internal (includes ATen).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "trainer/model_config.h"

namespace meridian::trainer {

// Learning rate for the step with index `step` (0-based): linear warmup over warmup_steps
// (lr * (step + 1) / warmup_steps), constant, then lr * (1 - sqrt(p)) with
// p = (step - decay_start_step) / (total_steps - decay_start_step), reaching 0 at total_steps.
double scheduled_lr(const OptimConfig& c, std::int64_t step);

class FlatAdamW {
 public:
  // `params` and `grads` are flat tensors of the same size and dtype; the optimizer keeps
  // references (no copies) and allocates its moments alongside.
  FlatAdamW(const OptimConfig& config, at::Tensor params, at::Tensor grads);

  // Scales the gradient so its global L2 norm is at most grad_clip (as clip_grad_norm_:
  // coefficient grad_clip / (norm + 1e-6), capped at 1). Returns the norm before clipping.
  double clip_gradients();
  // One AdamW update with learning rate `lr`; increments step_count().
  void step(double lr);

  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t n) { step_count_ = n; }
  at::Tensor& exp_avg() { return exp_avg_; }        // first moment m
  at::Tensor& exp_avg_sq() { return exp_avg_sq_; }  // second moment v
  const OptimConfig& config() const { return config_; }

 private:
  OptimConfig config_;
  at::Tensor params_, grads_, exp_avg_, exp_avg_sq_;
  std::int64_t step_count_ = 0;
};

}  // namespace meridian::trainer
