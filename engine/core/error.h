// The engine's error types and MERIDIAN_CHECK.
// Recoverable conditions are exceptions handled in one place (the outer loop); broken invariants
// are MERIDIAN_CHECK failures. Backends translate their native errors into these at their edge.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace meridian {

// Base of every error Meridian raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A peer died, closed its end, or aborted the epoch. The collective can be retried in a new epoch.
class PeerLostError : public Error {
 public:
  PeerLostError(int peer, const std::string& what) : Error(what), peer_(peer) {}
  // The rank (in the failing epoch) that was lost, or -1 when not known.
  int peer() const { return peer_; }

 private:
  int peer_;
};

// A bounded wait ran out. Treated like a lost peer by the outer loop.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A message failed validation: bad magic, version, epoch, sizes, checksum, truncation.
// Raised before any use of the message's contents and before any allocation sized by it.
class ProtocolError : public Error {
 public:
  explicit ProtocolError(const std::string& what, int peer = -1) : Error(what), peer_(peer) {}
  // The rank (in the epoch) whose message was invalid, when the receiver knows it was that
  // peer's own doing; -1 otherwise (a store reply, a file, a size this rank asked for).
  int peer() const { return peer_; }

 private:
  int peer_;
};

// A chunk that decoded to NaN or Inf: a protocol-level fault of its sender (peer()), which
// should have checked its pseudo-gradient before sending (engine/core/diloco, the non-finite
// guard).
class NonFiniteError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// Bad configuration or input file; the message names the file, the key and what was expected.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A broken invariant (a bug, not an environmental condition).
class CheckError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& detail);

template <typename A, typename B>
std::string describe_pair(const A& a, const B& b) {
  std::ostringstream os;
  os << " (" << a << " vs " << b << ")";
  return os.str();
}
}  // namespace detail

}  // namespace meridian

// MERIDIAN_CHECK(cond) and MERIDIAN_CHECK_EQ/NE/LT/LE/GT/GE(a, b): throw CheckError with
// file:line, the expression and (for the binary forms) both values.
#define MERIDIAN_CHECK(cond)                                                    \
  do {                                                                          \
    if (!(cond)) ::meridian::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define MERIDIAN_CHECK_OP_(a, b, op)                                                           \
  do {                                                                                          \
    const auto& meridian_a_ = (a);                                                              \
    const auto& meridian_b_ = (b);                                                              \
    if (!(meridian_a_ op meridian_b_))                                                          \
      ::meridian::detail::check_failed(__FILE__, __LINE__, #a " " #op " " #b,                   \
                                       ::meridian::detail::describe_pair(meridian_a_, meridian_b_)); \
  } while (0)

#define MERIDIAN_CHECK_EQ(a, b) MERIDIAN_CHECK_OP_(a, b, ==)
#define MERIDIAN_CHECK_NE(a, b) MERIDIAN_CHECK_OP_(a, b, !=)
#define MERIDIAN_CHECK_LT(a, b) MERIDIAN_CHECK_OP_(a, b, <)
#define MERIDIAN_CHECK_LE(a, b) MERIDIAN_CHECK_OP_(a, b, <=)
#define MERIDIAN_CHECK_GT(a, b) MERIDIAN_CHECK_OP_(a, b, >)
#define MERIDIAN_CHECK_GE(a, b) MERIDIAN_CHECK_OP_(a, b, >=)
