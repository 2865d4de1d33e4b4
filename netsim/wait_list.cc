// The notifier actor behind WaitList::notify_all (see wait_list.h).
#include "netsim/wait_list.h"

#include <limits>
#include <memory>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

struct Notifier {
  bool running = false;
  sg4::SemaphorePtr wake;
  std::vector<sg4::SemaphorePtr> pending;
};

// One simulation per process (SimGrid's engine is a singleton), hence one notifier.
Notifier& notifier() {
  static Notifier n;
  return n;
}

}  // namespace

void start_notifier(sg4::Host* host) {
  Notifier& n = notifier();
  n.pending.clear();
  n.wake = sg4::Semaphore::create(0);
  n.running = true;
  sg4::Actor::create("notifier", host, [] {
    Notifier& me = notifier();
    for (;;) {
      me.wake->acquire();
      std::vector<sg4::SemaphorePtr> batch;
      batch.swap(me.pending);
      for (auto& s : batch) s->release();
    }
  })->daemonize();
}

void release_all(std::vector<sg4::SemaphorePtr> sems) {
  Notifier& n = notifier();
  if (sems.size() == 1 || !n.running) {
    // One release is one simcall: it happens whole even if this actor is killed right after.
    for (auto& s : sems) s->release();
    return;
  }
  for (auto& s : sems) n.pending.push_back(std::move(s));
  n.wake->release();
}

bool acquire_until(const sg4::SemaphorePtr& sem, double deadline_s) {
  if (deadline_s == std::numeric_limits<double>::infinity()) {
    sem->acquire();
    return true;
  }
  if (deadline_s <= sg4::Engine::get_clock()) return !sem->acquire_timeout(0);
  // The timer's callback runs in the maestro (no simcall needed there); it outlives the waiter
  // if the waiter's host is turned off, hence the shared flag and the semaphore's own reference.
  auto fired = std::make_shared<bool>(false);
  // A pending timer keeps SimGrid's clock going after the last actor has ended: a waiter killed
  // at the end of the run (a daemon, or an actor of a host turned off) must take its timer with
  // it, or the run "ends" at the timer's deadline (issue 21: an emulation that ended at 15 s
  // reported 3,600 s; a churn event at 999,999 s stretched a run to 11.6 days). The guard runs
  // on the normal return and while a kill unwinds this actor's stack.
  struct TimerGuard {
    simgrid::kernel::timer::Timer* timer;
    std::shared_ptr<bool> fired;
    ~TimerGuard() {
      if (!*fired) timer->remove();  // not fired: still pending, and removing it frees it
    }
  } guard{simgrid::kernel::timer::Timer::set(deadline_s,
                                             [sem, fired] {
                                               *fired = true;
                                               sem->release();
                                             }),
          fired};
  sem->acquire();
  return !*fired;
}

}  // namespace meridian::netsim
