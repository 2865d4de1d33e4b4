// Runtime: the clock, sleeping, modelled compute and concurrency, as the engine may use them.
// Engine code never calls std::this_thread, std::chrono clocks or blocks on a std::mutex itself:
// under SimGrid that deadlocks or reads the wrong clock. This is not a thread pool.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace meridian {

// A mutex valid under the Runtime that made it.
class Mutex {
 public:
  virtual ~Mutex() = default;
  virtual void lock() = 0;
  virtual void unlock() = 0;
};

// Holds a Mutex for its scope: the engine's std::lock_guard (<mutex> belongs to backends).
class LockGuard {
 public:
  explicit LockGuard(Mutex& m) : m_(m) { m_.lock(); }
  ~LockGuard() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

// A condition variable paired with a Mutex from the same Runtime.
class CondVar {
 public:
  virtual ~CondVar() = default;
  // Atomically releases `held` (locked by the caller) and waits for a notify or `timeout_s`.
  // Returns false on timeout. Spurious wake-ups are possible: wait in a loop on a predicate.
  virtual bool wait_for(Mutex& held, double timeout_s) = 0;
  virtual void notify_all() = 0;
};

// A concurrent activity started by Runtime::spawn (a thread, or a SimGrid actor).
class Activity {
 public:
  virtual ~Activity() = default;  // joins if still joinable
  // Waits for the body to return. An exception escaping the body is rethrown here.
  virtual void join() = 0;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // Seconds on this node's monotonic clock (simulated time under SimGrid). Only differences of
  // values read on the same node are meaningful: never compare clocks across nodes.
  virtual double now_s() = 0;
  virtual void sleep_s(double seconds) = 0;
  // Occupies this node's compute for `seconds` of modelled work (simulation: an execution on the
  // host, interrupted if the host fails; real runtimes: sleeps, as a stand-in for work done elsewhere).
  virtual void compute_s(double seconds) = 0;
  // Starts `body` concurrently on this node. `name` appears in logs and traces.
  virtual std::unique_ptr<Activity> spawn(std::string name, std::function<void()> body) = 0;
  virtual std::unique_ptr<Mutex> make_mutex() = 0;
  virtual std::unique_ptr<CondVar> make_condvar() = 0;
};

}  // namespace meridian
