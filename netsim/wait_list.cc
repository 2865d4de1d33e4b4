// The notifier actor behind WaitList::notify_all (see wait_list.h).
#include "netsim/wait_list.h"

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

}  // namespace meridian::netsim
