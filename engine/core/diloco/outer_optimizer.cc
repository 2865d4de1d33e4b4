// Nesterov SGD outer step.
#include "engine/core/diloco/outer_optimizer.h"

#include "engine/core/error.h"

namespace meridian {
namespace {

// One element of the Nesterov step; step() and preview() share it so that they round alike.
inline void nesterov(float lr, float mu, float g, float& buf, float& theta) {
  buf = mu * buf + g;
  theta = theta - lr * (g + mu * buf);
}

}  // namespace

OuterOptimizer::OuterOptimizer(std::uint64_t count, OuterOptimizerOptions options)
    : options_(options), momentum_(count, 0.0f) {}

void OuterOptimizer::step(std::span<float> theta, std::span<const float> gradient) {
  if (theta.empty() && gradient.empty()) return;
  MERIDIAN_CHECK_EQ(theta.size(), momentum_.size());
  MERIDIAN_CHECK_EQ(gradient.size(), momentum_.size());
  const float lr = options_.lr;
  const float mu = options_.momentum;
  for (std::size_t i = 0; i < theta.size(); ++i)
    nesterov(lr, mu, gradient[i], momentum_[i], theta[i]);
}

void OuterOptimizer::preview(std::uint64_t offset, std::span<const float> theta,
                             std::span<const float> gradient, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(theta.size(), gradient.size());
  MERIDIAN_CHECK_EQ(out.size(), theta.size());
  MERIDIAN_CHECK(offset + theta.size() <= momentum_.size());
  for (std::size_t i = 0; i < theta.size(); ++i) {
    float buf = momentum_[offset + i];
    float t = theta[i];
    nesterov(options_.lr, options_.momentum, gradient[i], buf, t);
    out[i] = t;
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
