// ThreadRuntime implementation.
#include "engine/backends/runtime_thread/thread_runtime.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "engine/core/error.h"

namespace meridian {
namespace {

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class StdMutex final : public Mutex {
 public:
  void lock() override { mu_.lock(); }
  void unlock() override { mu_.unlock(); }
  std::mutex mu_;
};

class StdCondVar final : public CondVar {
 public:
  bool wait_for(Mutex& held, double timeout_s) override {
    auto& m = dynamic_cast<StdMutex&>(held).mu_;
    std::unique_lock<std::mutex> lock(m, std::adopt_lock);
    const auto status = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s < 0 ? 0 : timeout_s));
    lock.release();  // the caller still holds `held`
    return status == std::cv_status::no_timeout;
  }
  void notify_all() override { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

class ThreadActivity final : public Activity {
 public:
  explicit ThreadActivity(std::function<void()> body)
      : thread_([this, body = std::move(body)] {
          try {
            body();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~ThreadActivity() override {
    if (thread_.joinable()) thread_.join();
  }
  void join() override {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;  // last: started after error_ exists
};

}  // namespace

ThreadRuntime::ThreadRuntime() : origin_s_(steady_s()) {}

double ThreadRuntime::now_s() { return steady_s() - origin_s_; }

void ThreadRuntime::sleep_s(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void ThreadRuntime::compute_s(double seconds) { sleep_s(seconds); }

std::unique_ptr<Activity> ThreadRuntime::spawn(std::string /*name*/, std::function<void()> body) {
  return std::make_unique<ThreadActivity>(std::move(body));
}

std::unique_ptr<Mutex> ThreadRuntime::make_mutex() { return std::make_unique<StdMutex>(); }

std::unique_ptr<CondVar> ThreadRuntime::make_condvar() { return std::make_unique<StdCondVar>(); }

}  // namespace meridian
