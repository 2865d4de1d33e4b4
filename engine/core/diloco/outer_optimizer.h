// The DiLoCo outer optimizer: SGD with Nesterov momentum on the fp32 outer copy, with exactly
// PyTorch's torch.optim.SGD(nesterov=True, dampening=0, weight_decay=0) update. Not an inner
// optimizer and not sharded itself: each local rank owns the optimizer of its own shard.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace meridian {

struct OuterOptimizerOptions {
  float lr = 0.7f;        // INTELLECT-1 / DiLoCo outer learning rate
  float momentum = 0.9f;  // Nesterov momentum
};

// For every element i, in fp32, in this order (the buffer starts at 0, so the first step
// gives buf = g as PyTorch does):
//   buf[i]   = momentum * buf[i] + g[i]
//   theta[i] = theta[i] - lr * (g[i] + momentum * buf[i])
// where g is the (averaged) pseudo-gradient theta_outer - theta_local.
class OuterOptimizer {
 public:
  OuterOptimizer(std::uint64_t count, OuterOptimizerOptions options);

  // Applies one step in place on `theta` (count elements). An empty theta and gradient
  // (timing-only worker) is a no-op.
  void step(std::span<float> theta, std::span<const float> gradient);

  // The eager stand-in (engine/core/diloco/README.md, "Overlapped outer steps"): out = theta -
  // lr (1 + momentum) (gradient / divisor), the part of a Nesterov step that is linear in its
  // gradient; the momentum is not touched.
  void stand_in(std::span<const float> theta, std::span<const float> gradient, float divisor,
                std::span<float> out) const;

  // Streaming DiLoCo's merge (engine/core/diloco/README.md, "Streaming outer steps"): `out` gets
  // what step() would make of theta[offset, offset + n) with this gradient, element for element the
  // same arithmetic, without changing theta or the momentum (step() applies it at the round's
  // record).
  void preview(std::uint64_t offset, std::span<const float> theta, std::span<const float> gradient,
               std::span<float> out) const;

  std::span<float> momentum() { return momentum_; }
  std::span<const float> momentum() const { return momentum_; }
  const OuterOptimizerOptions& options() const { return options_; }

 private:
  OuterOptimizerOptions options_;
  std::vector<float> momentum_;
};

}  // namespace meridian
