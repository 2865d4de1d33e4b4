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
#include <simgrid/s4u/Actor.hpp>
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
// Blocks the current actor until `sem` is released or simulated time reaches `deadline_s`
// (infinity: no deadline); returns false when the deadline came first. The deadline is a
// SimGrid kernel timer, not Semaphore::acquire_timeout, whose timeout is a sleep action on the
// host's CPU model (a variable in its max-min system, solver work at its start and end): the
// protocol's periodic waits (heartbeats, polls) are most of the simulator's timed waits.
bool acquire_until(const simgrid::s4u::SemaphorePtr& sem, double deadline_s);

class WaitList {
 public:
  static constexpr double kForever = std::numeric_limits<double>::infinity();

  // Returns true once pred() holds, false if `deadline_s` (simulated) passed first. `tag`
  // (optional, kept by the caller for the wait) lets notify_if skip this waiter.
  // An actor that owes deferred time starts waiting once it has paid it, as if it had slept
  // first (deadline_s is on its own clock): pred() is first checked then. When pred() does not
  // hold yet, paying and waiting are one timed wait (a notify before then only ends the payment).
  template <typename Pred>
  bool wait_until(double deadline_s, Pred pred, const void* tag = nullptr) {
    const double start_s = simgrid::s4u::Engine::get_clock();
    const double listen_s = start_s + take_deferred_time();
    if (listen_s > start_s) {
      if (deadline_s > listen_s && !pred()) {
        auto sem = simgrid::s4u::Semaphore::create(0);
        const Listening listening(*this, sem, tag);
        if (!acquire_until(sem, deadline_s)) return pred();
      }
      const double now = simgrid::s4u::Engine::get_clock();
      if (now < listen_s) simgrid::s4u::this_actor::sleep_for(listen_s - now);
    }
    for (;;) {
      if (pred()) return true;
      const double now = simgrid::s4u::Engine::get_clock();
      if (now >= deadline_s) return false;
      auto sem = simgrid::s4u::Semaphore::create(0);
      if (pred()) return true;  // creating the semaphore may have let other actors run
      const Listening listening(*this, sem, tag);
      if (!acquire_until(sem, deadline_s)) return pred();
    }
  }

  // Wakes every current waiter (each re-checks its predicate).
  void notify_all() {
    notify_if([](const void*) { return true; });
  }

  // Wakes the waiters whose tag satisfies match(tag), and every untagged one: a state change
  // that cannot affect a waiter's predicate need not wake it (a wake-up costs simcalls).
  template <typename Match>
  void notify_if(Match match) {
    if (waiters_.empty()) return;
    std::vector<simgrid::s4u::SemaphorePtr> wake;
    auto keep = waiters_.begin();
    for (auto& w : waiters_) {
      if (w.tag == nullptr || match(w.tag))
        wake.push_back(std::move(w.sem));
      else
        *keep++ = std::move(w);
    }
    waiters_.erase(keep, waiters_.end());
    if (!wake.empty()) release_all(std::move(wake));
  }

 private:
  // A waiter on the list for the scope of one wait, also while a kill (host failure) unwinds
  // its actor: a notify must never look at the tag, on the dead actor's stack, of a waiter gone.
  struct Listening {
    Listening(WaitList& list, const simgrid::s4u::SemaphorePtr& sem, const void* tag)
        : list_(list), sem_(sem) {
      list_.waiters_.push_back({sem, tag});
    }
    ~Listening() { list_.forget(sem_); }
    Listening(const Listening&) = delete;
    Listening& operator=(const Listening&) = delete;
    WaitList& list_;
    const simgrid::s4u::SemaphorePtr& sem_;
  };
  void forget(const simgrid::s4u::SemaphorePtr& sem) {
    waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(),
                                  [&](const Waiter& w) { return w.sem == sem; }),
                   waiters_.end());
  }
  struct Waiter {
    simgrid::s4u::SemaphorePtr sem;
    const void* tag;
  };
  std::vector<Waiter> waiters_;
};

}  // namespace meridian::netsim
