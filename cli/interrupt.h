// SIGINT and SIGTERM for the long commands: while an InterruptScope lives, the first signal only
// records itself, so that the command can end its run cleanly (a `run_interrupted` record, a
// summary that says how far it got); a second signal ends the process at once, as usual.
// Not a general signal facility: one scope at a time, the main thread polls.
#pragma once

#include <atomic>
#include <csignal>
#include <string>

namespace meridian::cli {

class InterruptScope {
 public:
  InterruptScope() {
    received_.store(0);
    previous_int_ = std::signal(SIGINT, &InterruptScope::handle);
    previous_term_ = std::signal(SIGTERM, &InterruptScope::handle);
  }
  ~InterruptScope() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  // 0 while no signal arrived, else the first signal's number. Async-signal-safe.
  static int received() { return received_.load(); }
  static std::string name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal " + std::to_string(sig);
  }
  // The shell's convention for a process ended by `sig`.
  static int exit_code(int sig) { return 128 + sig; }

 private:
  static void handle(int sig) {
    int none = 0;
    if (!received_.compare_exchange_strong(none, sig)) {  // the second one: stop now
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  }

  static inline std::atomic<int> received_{0};
  using Handler = void (*)(int);
  Handler previous_int_;
  Handler previous_term_;
};

}  // namespace meridian::cli
