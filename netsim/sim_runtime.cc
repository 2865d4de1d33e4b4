// SimRuntime: Runtime over s4u actors, mutexes and condition variables (see sim_runtime.h).
#include "netsim/sim_runtime.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <simgrid/s4u.hpp>
#include <utility>

#include "engine/core/error.h"
#include "netsim/deferred_time.h"
#include "netsim/wait_list.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

// The engine's mutexes only order the activities of one node, and SimGrid runs actors
// cooperatively in one OS thread, so a free mutex is taken without a simcall (an s4u Mutex costs
// one per lock and per unlock); a held one is waited for on a semaphore. `free_at_s_` is when a
// mutex released by a waiting SimCondVar becomes free: the waiter still owed deferred time and,
// as before, holds the mutex until it has paid it (see SimCondVar::wait_for). Only the actors
// of one host use a node's mutex, so a holder killed with its host takes its waiters with it.
class SimMutex final : public Mutex {
 public:
  void lock() override {
    for (;;) {
      if (!locked_) {
        const double now = sg4::Engine::get_clock();
        if (now >= free_at_s_) {
          locked_ = true;
          return;
        }
        sg4::this_actor::sleep_for(free_at_s_ - now);
        continue;
      }
      auto sem = sg4::Semaphore::create(0);
      waiters_.push_back(sem);
      sem->acquire();
    }
  }
  void unlock() override { release_at(0.0); }
  // Unlocks; the mutex is free from simulated time `free_at_s` on.
  void release_at(double free_at_s) {
    if (!locked_) {
      // Only while an actor killed with its host unwinds: it may have been killed waiting in
      // SimCondVar::wait_for, where the mutex is not held, and its lock guard still unlocks.
      MERIDIAN_CHECK(std::uncaught_exceptions() > 0);
      return;
    }
    locked_ = false;
    free_at_s_ = free_at_s;
    if (waiters_.empty()) return;
    auto sem = std::move(waiters_.front());
    waiters_.pop_front();
    sem->release();  // the woken actor re-checks (another may have taken the mutex meanwhile)
  }

 private:
  bool locked_ = false;
  double free_at_s_ = 0.0;
  std::deque<sg4::SemaphorePtr> waiters_;
};

// A condition variable over SimMutex: one semaphore per waiter, no simcall for a notify that
// finds no waiter. A waiter that owes deferred time listens only once it has paid it, as if it
// had slept first: a notify before then is lost (it re-waits), and its mutex stays held until
// then. Waiting and paying are one timed wait instead of a sleep and a wait.
class SimCondVar final : public CondVar {
 public:
  bool wait_for(Mutex& held, double timeout_s) override {
    auto* m = dynamic_cast<SimMutex*>(&held);
    MERIDIAN_CHECK(m != nullptr);  // a CondVar pairs only with a Mutex of the same Runtime
    const double listen_s = sg4::Engine::get_clock() + take_deferred_time();
    const double deadline_s = listen_s + std::max(0.0, timeout_s);
    m->release_at(listen_s);
    bool notified = false;
    for (;;) {
      auto sem = sg4::Semaphore::create(0);
      waiters_.push_back(sem);
      if (!acquire_until(sem, deadline_s)) {
        waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), sem), waiters_.end());
        break;
      }
      if (sg4::Engine::get_clock() >= listen_s) {
        notified = true;
        break;
      }
      // Notified while it was still paying: lost, as for a sleeping actor. Wait on.
    }
    m->lock();
    return notified;
  }
  void notify_all() override {
    if (waiters_.empty()) return;
    pay_deferred_time();  // the notify happens at the notifier's own clock
    std::vector<sg4::SemaphorePtr> w;
    w.swap(waiters_);
    for (auto& s : w) s->release();
  }

 private:
  std::vector<sg4::SemaphorePtr> waiters_;
};

// The body's outcome, shared between the actor and the handle.
struct ActivityState {
  std::exception_ptr error;
};

class SimActivity final : public Activity {
 public:
  SimActivity(sg4::ActorPtr actor, std::shared_ptr<ActivityState> state)
      : actor_(std::move(actor)), state_(std::move(state)) {}
  ~SimActivity() override {
    if (actor_) actor_->join();
  }
  void join() override {
    if (!actor_) return;
    actor_->join();
    actor_ = nullptr;
    if (state_->error) std::rethrow_exception(std::exchange(state_->error, nullptr));
  }

 private:
  sg4::ActorPtr actor_;
  std::shared_ptr<ActivityState> state_;
};

}  // namespace

// The actor's own clock: what it owes is already part of its time (see deferred_time.h).
double SimRuntime::now_s() { return sg4::Engine::get_clock() + deferred_time_s(); }

void SimRuntime::sleep_s(double seconds) {
  pay_deferred_time();
  if (seconds > 0) sg4::this_actor::sleep_for(seconds);
}

void SimRuntime::compute_s(double seconds) {
  pay_deferred_time();
  if (seconds <= 0) return;
  sg4::this_actor::execute(seconds * host_->get_pstate_speed(host_->get_pstate()));
}

std::unique_ptr<Activity> SimRuntime::spawn(std::string name, std::function<void()> body) {
  pay_deferred_time();
  auto state = std::make_shared<ActivityState>();
  auto actor = sg4::Actor::create(name, host_, [state, body = std::move(body)] {
    // std::exception only: SimGrid's ForcefulKillException must unwind the actor untouched.
    try {
      body();
    } catch (const std::exception&) {
      state->error = std::current_exception();
    }
  });
  return std::make_unique<SimActivity>(std::move(actor), std::move(state));
}

std::unique_ptr<Mutex> SimRuntime::make_mutex() { return std::make_unique<SimMutex>(); }
std::unique_ptr<CondVar> SimRuntime::make_condvar() { return std::make_unique<SimCondVar>(); }

}  // namespace meridian::netsim
