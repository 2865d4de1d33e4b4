// WaitList: "wait until a predicate holds, or a deadline" for actors of one simulation, built on
// one s4u Semaphore per waiter. Unlike an s4u Mutex + ConditionVariable, nothing is held while
// waiting, so an actor killed by a host failure can never leave a lock held that survivors then
// block on (SimGrid does not release a killed actor's mutexes). Waking several waiters takes
// several simcalls, and the notifying actor may be killed between two of them (its host failed
// meanwhile); so wake-ups of more than one waiter are handed to a notifier actor on a host that
// never fails (start_notifier). Not thread-safe: SimGrid actors run cooperatively in one OS
// thread, and the predicate is re-checked after every simcall.
#pragma once

#include <algorithm>
#include <limits>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Semaphore.hpp>
#include <vector>

#include "netsim/deferred_time.h"

namespace simgrid::s4u {
class Host;
}

namespace meridian::netsim {

// Starts the notifier actor (a daemon) on `host`, which must never be turned off. Without it
// (unit tests of single components) notify_all releases the waiters itself.
void start_notifier(simgrid::s4u::Host* host);
// Releases the semaphores, through the notifier when there is one.
void release_all(std::vector<simgrid::s4u::SemaphorePtr> sems);

class WaitList {
 public:
  static constexpr double kForever = std::numeric_limits<double>::infinity();

  // Returns true once pred() holds, false if `deadline_s` (simulated) passed first.
  template <typename Pred>
  bool wait_until(double deadline_s, Pred pred) {
    pay_deferred_time();
    for (;;) {
      if (pred()) return true;
      const double now = simgrid::s4u::Engine::get_clock();
      if (now >= deadline_s) return false;
      auto sem = simgrid::s4u::Semaphore::create(0);
      if (pred()) return true;  // creating the semaphore may have let other actors run
      waiters_.push_back(sem);
      bool timed_out = false;
      if (deadline_s == kForever) {
        sem->acquire();
      } else {
        timed_out = sem->acquire_timeout(deadline_s - now);
      }
      waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), sem), waiters_.end());
      if (timed_out) return pred();
    }
  }

  // Wakes every current waiter (each re-checks its predicate).
  void notify_all() {
    if (waiters_.empty()) return;
    std::vector<simgrid::s4u::SemaphorePtr> w;
    w.swap(waiters_);
    release_all(std::move(w));
  }

 private:
  std::vector<simgrid::s4u::SemaphorePtr> waiters_;
};

}  // namespace meridian::netsim
