// ModeledWorker: modelled inner-step time (see modeled_worker.h).
#include "netsim/modeled_worker.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/core/error.h"

namespace meridian::netsim {

std::vector<std::uint64_t> scenario_buckets(const Scenario& sc) {
  if (sc.diloco.buckets == "layers") return sc.model.bucket_boundaries();
  const std::uint64_t k = std::stoull(sc.diloco.buckets), n = sc.model.param_count();
  std::vector<std::uint64_t> b;
  for (std::uint64_t i = 0; i <= k; ++i) b.push_back(n * i / k);
  return b;
}

ModeledWorker::ModeledWorker(const Scenario& sc, Runtime& runtime,
                             std::shared_ptr<const double> speed_factor)
    : runtime_(runtime),
      speed_factor_(std::move(speed_factor)),
      step_time_s_(sc.inner_step_s()),
      tokens_per_step_(sc.tokens_per_inner_step()),
      param_count_(sc.model.param_count()),
      boundaries_(scenario_buckets(sc)),
      // The engine ships the outer parameters and the outer momentum itself (two copies); the
      // worker's sections are the rest of `state_copies` (AdamW m and v by default).
      extra_state_copies_(std::max(0, sc.recovery.state_copies - 2)) {}

InnerStepsResult ModeledWorker::run_inner_steps(int steps) {
  const double t0 = runtime_.now_s();
  // One modelled execution for the whole batch of steps: same time, far fewer simulator events.
  runtime_.compute_s(steps * step_time_s_ / *speed_factor_);
  steps_done_ += steps;
  InnerStepsResult r;
  r.steps = steps;
  r.tokens = std::int64_t(steps) * tokens_per_step_;
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.compute_s = runtime_.now_s() - t0;
  return r;
}

std::vector<StateSection> ModeledWorker::state_sections() {
  std::vector<StateSection> s;
  for (int i = 0; i < extra_state_copies_; ++i)
    s.push_back({"state" + std::to_string(i), {}, param_count_});
  return s;
}

std::string ModeledWorker::progress() const { return std::to_string(steps_done_); }

void ModeledWorker::restore_progress(const std::string& progress) {
  try {
    steps_done_ = std::stoll(progress);
  } catch (const std::exception&) {
    throw ProtocolError("modeled worker: bad progress '" + progress + "'");
  }
}

}  // namespace meridian::netsim
