// Socket I/O with deadlines and the join transcripts, shared by the TCP and etcd stores. See
// store_net.h.
#include "engine/backends/common/store_net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "engine/core/error.h"

namespace meridian::store_wire {

namespace {

// A transcript opens with the type byte of the TCP store's message it proves (JOIN, WELCOME:
// engine/backends/store_tcp/tcp_store_wire.h) and length-prefixes every field (u32, big-endian).
constexpr char kJoinType = 2, kWelcomeType = 3;

void field(std::string& t, std::string_view s) {
  MERIDIAN_CHECK_LE(s.size(), std::size_t{0xffffffffu});
  const auto n = static_cast<std::uint32_t>(s.size());
  const char prefix[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  t.append(prefix, 4);
  t.append(s);
}

}  // namespace

std::string join_transcript(const Nonce& server_nonce, const std::string& client_id,
                            const std::string& version, const std::string& config_hash,
                            const Nonce& client_nonce) {
  std::string t(1, kJoinType);
  field(t, "meridian-store-join");
  t.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  field(t, client_id);
  field(t, version);
  field(t, config_hash);
  t.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  return t;
}

std::string server_transcript(const Nonce& server_nonce, const Nonce& client_nonce) {
  std::string t(1, kWelcomeType);
  field(t, "meridian-store-welcome");
  t.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  t.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  return t;
}

Nonce random_nonce() {
  std::random_device device;  // /dev/urandom on Linux
  Nonce n;
  for (std::size_t i = 0; i < n.size(); i += 4) {
    const std::uint32_t r = device();
    for (int b = 0; b < 4; ++b) n[i + b] = static_cast<std::uint8_t>(r >> (8 * b));
  }
  return n;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void wait_ready(int fd, short events, double deadline_s, const char* doing) {
  for (;;) {
    const double left_s = deadline_s - now_s();
    if (left_s <= 0) throw TimeoutError(std::string("store: timed out ") + doing);
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::min(left_s * 1000.0 + 1.0, 1e9));
    const int rc = ::poll(&p, 1, ms);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) {
      throw PeerLostError(-1,
                          std::string("store: poll failed ") + doing + ": " + std::strerror(errno));
    }
  }
}

void recv_exact(int fd, char* out, std::size_t n, double deadline_s) {
  std::size_t got = 0;
  while (got < n) {
    wait_ready(fd, POLLIN, deadline_s, "waiting for the store's reply");
    const ssize_t rc = ::recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (rc == 0) throw PeerLostError(-1, "store: connection closed by the other end");
    if (rc < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw PeerLostError(-1, std::string("store: receive failed: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(rc);
  }
}

Listener listen_on(const std::string& host, std::uint16_t port, int backlog, const char* what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    throw ConfigError(std::string(what) + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  Listener l;
  std::string last_error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      l.fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (l.fd < 0) {
    throw ConfigError(std::string(what) + ": cannot listen on " + host + ":" + service + ": " +
                      last_error);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char text[INET6_ADDRSTRLEN] = {};
  if (bound.ss_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&bound);
    ::inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof text);
    l.port = ntohs(a6->sin6_port);
    l.address = "[" + std::string(text) + "]:" + std::to_string(l.port);
  } else {
    const auto* a4 = reinterpret_cast<const sockaddr_in*>(&bound);
    ::inet_ntop(AF_INET, &a4->sin_addr, text, sizeof text);
    l.port = ntohs(a4->sin_port);
    l.address = std::string(text) + ":" + std::to_string(l.port);
  }
  return l;
}

void send_all(int fd, std::string_view data, double deadline_s) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    wait_ready(fd, POLLOUT, deadline_s, "sending to the store");
    const ssize_t rc =
        ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw PeerLostError(-1, std::string("store: send failed: ") + std::strerror(errno));
    }
    sent += static_cast<std::size_t>(rc);
  }
}

int connect_until(const addrinfo& address, double deadline_s, int& error) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno;
    return -1;
  }
  error = 0;
  if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const double left_s = deadline_s - now_s();
      error = ETIMEDOUT;
      if (left_s > 0 && ::poll(&p, 1, static_cast<int>(left_s * 1000.0) + 1) > 0) {
        socklen_t len = sizeof(error);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      }
    }
  }
  if (error == 0) return fd;
  ::close(fd);
  return -1;
}

int dial_once(const std::string& host, std::uint16_t port, double deadline_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    throw PeerLostError(-1, "store " + where + ": cannot resolve: " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    int error = 0;
    fd = connect_until(*a, deadline_s, error);
    if (fd < 0) last_error = std::strerror(error);
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw PeerLostError(-1, "store " + where + ": cannot connect: " + last_error);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int dial(const std::string& host, std::uint16_t port, double deadline_s,
         const std::function<void(int fd)>& handshake,
         const std::function<void(const std::string& error, double waited_s)>& on_wait) {
  double backoff_s = 0.01;
  const double start_s = now_s();
  double next_notice_s = start_s + 2.0;
  for (;;) {
    int fd = -1;
    try {
      fd = dial_once(host, port, deadline_s);
      if (handshake) handshake(fd);
      return fd;
    } catch (const PeerLostError& e) {
      if (fd >= 0) ::close(fd);
      if (now_s() + backoff_s >= deadline_s) throw;
      if (on_wait && now_s() >= next_notice_s) {
        on_wait(e.what(), now_s() - start_s);
        next_notice_s = now_s() + 10.0;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff_s));
      backoff_s = std::min(backoff_s * 2, 0.5);
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
  }
}

}  // namespace meridian::store_wire
