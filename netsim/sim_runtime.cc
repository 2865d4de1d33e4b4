// SimRuntime: Runtime over s4u actors, mutexes and condition variables (see sim_runtime.h).
#include "netsim/sim_runtime.h"

#include <exception>
#include <mutex>
#include <simgrid/s4u.hpp>
#include <utility>

#include "engine/error.h"
#include "netsim/deferred_time.h"

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

class SimMutex final : public Mutex {
 public:
  SimMutex() : mu_(sg4::Mutex::create()) {}
  void lock() override { mu_->lock(); }
  void unlock() override { mu_->unlock(); }
  sg4::Mutex& native() { return *mu_; }

 private:
  sg4::MutexPtr mu_;
};

class SimCondVar final : public CondVar {
 public:
  SimCondVar() : cv_(sg4::ConditionVariable::create()) {}
  bool wait_for(Mutex& held, double timeout_s) override {
    auto* m = dynamic_cast<SimMutex*>(&held);
    MERIDIAN_CHECK(m != nullptr);  // a CondVar pairs only with a Mutex of the same Runtime
    pay_deferred_time();
    std::unique_lock<sg4::Mutex> lk(m->native(), std::adopt_lock);
    auto status = cv_->wait_for(lk, timeout_s);
    lk.release();  // the caller still holds the mutex, as with std::condition_variable
    return status == std::cv_status::no_timeout;
  }
  void notify_all() override {
    pay_deferred_time();
    cv_->notify_all();
  }

 private:
  sg4::ConditionVariablePtr cv_;
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
