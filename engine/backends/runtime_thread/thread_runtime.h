// ThreadRuntime: the Runtime of real runs and in-process tests: steady clock, OS threads,
// std::mutex. compute_s() sleeps (real work is done by the InnerWorker itself).
#pragma once

#include "engine/core/runtime.h"

namespace meridian {

class ThreadRuntime final : public Runtime {
 public:
  ThreadRuntime();
  double now_s() override;
  void sleep_s(double seconds) override;
  void compute_s(double seconds) override;
  std::unique_ptr<Activity> spawn(std::string name, std::function<void()> body) override;
  std::unique_ptr<Mutex> make_mutex() override;
  std::unique_ptr<CondVar> make_condvar() override;

 private:
  double origin_s_;  // now_s() counts from construction
};

}  // namespace meridian
