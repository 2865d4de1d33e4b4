// ProcessProbe: whether another node's process still runs, asked of the operating system rather
// than of the lease (engine/core/mesh/PROTOCOL.md, "A crashed process is refused at once"). Each
// node's process answers connections at an address while it runs; the kernel of a live host
// refuses connections to a port nobody listens on, so an address that answered once and now
// refuses belongs to a process that is gone. Anything else (a timeout, an unreachable host, a
// host that vanished) says nothing, and the lease decides as before.
#pragma once

#include <string>

namespace meridian {

class ProcessProbe {
 public:
  enum class Answer { kAnswered, kRefused, kUnknown };

  virtual ~ProcessProbe() = default;
  // Where this process answers ("host:port"), for the others to probe.
  virtual std::string address() const = 0;
  // Asks `address`, waiting at most timeout_s; never throws for what the network answers.
  virtual Answer probe(const std::string& address, double timeout_s) = 0;
};

}  // namespace meridian
