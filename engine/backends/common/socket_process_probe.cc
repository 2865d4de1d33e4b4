#include "engine/backends/common/socket_process_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/backends/common/store_net.h"
#include "engine/core/error.h"

namespace meridian {

namespace {

// "host:port" or "[v6]:port" -> (host, port); nullopt-like empty host when malformed.
bool split(const std::string& address, std::string& host, std::string& port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  host = address.substr(0, colon);
  port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return true;
}

}  // namespace

SocketProcessProbe::SocketProcessProbe(const std::string& host) {
  // A backlog of 64: probes are one connect each, and the thread drains the queue at once.
  store_wire::Listener l = store_wire::listen_on(host, 0, 64, "process probe");
  listen_fd_ = l.fd;
  address_ = std::move(l.address);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw ConfigError(std::string("process probe: pipe failed: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

SocketProcessProbe::~SocketProcessProbe() {
  const char byte = 1;
  [[maybe_unused]] const ssize_t rc = ::write(wake_[1], &byte, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void SocketProcessProbe::serve() {
  // Accepts and closes: a probe only needs the kernel's handshake, and a connection left in
  // the backlog would fill it (later probes would time out: unknown, not wrong, but useless).
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (fds[0].revents & POLLIN) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN (drained), or out of descriptors: the next poll retries
        ::close(fd);
      }
    }
  }
}

ProcessProbe::Answer SocketProcessProbe::probe(const std::string& address, double timeout_s) {
  std::string host, port;
  if (!split(address, host, port)) return Answer::kUnknown;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
    return Answer::kUnknown;
  int error = 0;
  const int fd = store_wire::connect_until(*res, store_wire::now_s() + timeout_s, error);
  ::freeaddrinfo(res);
  if (fd >= 0) {
    ::close(fd);
    return Answer::kAnswered;
  }
  return error == ECONNREFUSED ? Answer::kRefused : Answer::kUnknown;
}

}  // namespace meridian
