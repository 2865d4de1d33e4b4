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
  auto* timer = simgrid::kernel::timer::Timer::set(deadline_s, [sem, fired] {
    *fired = true;
    sem->release();
  });
  sem->acquire();
  if (*fired) return false;
  timer->remove();  // not fired: still pending, and removing it frees it
  return true;
}

}  // namespace meridian::netsim
