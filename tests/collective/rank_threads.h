// Test support: runs one function per rank on its own thread and collects what each threw.
// Not a scheduler: the threads run freely; the caller asserts on the outcomes.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace meridian::testing {

// Runs body(rank) for rank in [0, world) concurrently; returns each rank's exception (null when
// it returned normally).
inline std::vector<std::exception_ptr> run_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// True when `e` holds an exception of type E.
template <typename E>
bool holds(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The message of `e` (empty when null), for assertion output.
inline std::string describe(const std::exception_ptr& e) {
  if (!e) return "no error";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "non-standard exception";
  }
}

}  // namespace meridian::testing
