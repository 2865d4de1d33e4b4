// SimRuntime: the engine's Runtime under SimGrid. Simulated clock, actors for activities,
// s4u Mutex/ConditionVariable, compute as an execution on the node's host (so it dies with the
// host). Valid only inside a running SimGrid engine; not thread-safe across OS threads (actors
// are cooperative and run in one OS thread).
#pragma once

#include <memory>
#include <string>

#include "engine/core/runtime.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

class SimRuntime final : public Runtime {
 public:
  // `host` runs this node's activities; compute_s(x) executes x seconds' worth of the host's
  // nominal speed, so a host speed profile (straggler) stretches it.
  explicit SimRuntime(simgrid::s4u::Host* host) : host_(host) {}

  double now_s() override;
  void sleep_s(double seconds) override;
  void compute_s(double seconds) override;
  std::unique_ptr<Activity> spawn(std::string name, std::function<void()> body) override;
  std::unique_ptr<Mutex> make_mutex() override;
  std::unique_ptr<CondVar> make_condvar() override;

  simgrid::s4u::Host* host() const { return host_; }

 private:
  simgrid::s4u::Host* host_;
};

}  // namespace meridian::netsim
