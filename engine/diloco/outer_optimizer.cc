// Nesterov SGD outer step.
#include "engine/diloco/outer_optimizer.h"

#include "engine/error.h"

namespace meridian {

OuterOptimizer::OuterOptimizer(std::uint64_t count, OuterOptimizerOptions options)
    : options_(options), momentum_(count, 0.0f) {}

void OuterOptimizer::step(std::span<float> theta, std::span<const float> gradient) {
  if (theta.empty() && gradient.empty()) return;
  MERIDIAN_CHECK_EQ(theta.size(), momentum_.size());
  MERIDIAN_CHECK_EQ(gradient.size(), momentum_.size());
  const float lr = options_.lr;
  const float mu = options_.momentum;
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const float g = gradient[i];
    const float buf = mu * momentum_[i] + g;
    momentum_[i] = buf;
    theta[i] = theta[i] - lr * (g + mu * buf);
  }
}

void OuterOptimizer::stand_in(std::span<const float> theta, std::span<const float> gradient,
                              float divisor, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(theta.size(), gradient.size());
  MERIDIAN_CHECK_EQ(out.size(), theta.size());
  const float scale = options_.lr * (1.0f + options_.momentum);
  for (std::size_t i = 0; i < theta.size(); ++i)
    out[i] = theta[i] - scale * (gradient[i] / divisor);
}

}  // namespace meridian
