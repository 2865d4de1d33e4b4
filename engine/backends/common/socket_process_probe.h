// ProcessProbe over TCP (engine/core/process_probe.h): this process listens on an ephemeral port
// of its transport's address and accepts and closes whatever connects (its own thread); a probe
// is one non-blocking connect. ECONNREFUSED is the only answer read as "gone": a live host's
// kernel sends it for a port nobody listens on, i.e. once the process that held it has exited.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "engine/core/process_probe.h"

namespace meridian {

class SocketProcessProbe final : public ProcessProbe {
 public:
  // Listens on `host` (an address of this machine, e.g. the one the node's transport binds);
  // ConfigError when it cannot.
  explicit SocketProcessProbe(const std::string& host);
  ~SocketProcessProbe() override;
  SocketProcessProbe(const SocketProcessProbe&) = delete;
  SocketProcessProbe& operator=(const SocketProcessProbe&) = delete;

  std::string address() const override { return address_; }
  Answer probe(const std::string& address, double timeout_s) override;

 private:
  void serve();

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::string address_;
  std::thread thread_;
};

}  // namespace meridian
