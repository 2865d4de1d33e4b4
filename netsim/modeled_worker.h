// ModeledWorker: an InnerWorker whose inner steps are modelled time, not training. Step time
// comes from FLOPs per token × tokens per step ÷ (GPUs × peak × MFU), or is given, divided by the
// node's speed factor (stragglers, `slow` churn events). Holds no parameters (phantom buffers):
// parameters() is empty and the state sections only carry their sizes.
#pragma once

#include <memory>

#include "engine/core/inner_worker.h"
#include "engine/core/runtime.h"
#include "netsim/scenario.h"

namespace meridian::netsim {

class ModeledWorker final : public InnerWorker {
 public:
  // `speed_factor` is read at each run_inner_steps call, so churn can change it meanwhile.
  ModeledWorker(const Scenario& sc, Runtime& runtime, std::shared_ptr<const double> speed_factor);

  InnerStepsResult run_inner_steps(int steps) override;
  std::uint64_t parameter_count() const override { return param_count_; }
  std::span<float> parameters() override { return {}; }
  std::vector<std::uint64_t> bucket_boundaries() const override { return boundaries_; }
  std::vector<StateSection> state_sections() override;
  std::string progress() const override;
  void restore_progress(const std::string& progress) override;

  double step_time_s() const { return step_time_s_; }

 private:
  Runtime& runtime_;
  std::shared_ptr<const double> speed_factor_;
  double step_time_s_;
  std::int64_t tokens_per_step_;
  std::uint64_t param_count_;
  std::vector<std::uint64_t> boundaries_;
  int extra_state_copies_;
  std::int64_t steps_done_ = 0;
};

// Buckets for a scenario: "layers" → the model's layer groups; "K" → K equal buckets.
std::vector<std::uint64_t> scenario_buckets(const Scenario& sc);

}  // namespace meridian::netsim
