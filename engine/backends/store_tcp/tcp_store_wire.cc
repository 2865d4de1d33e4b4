// The TCP store's wire helpers: field encoding, bounds-checked decoding, join transcripts and
// deadline-bounded socket I/O. See tcp_store_wire.h for the format.
#include "engine/backends/store_tcp/tcp_store_wire.h"

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

Writer& Writer::u8(std::uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}
Writer& Writer::u16(std::uint16_t v) { return u8(v >> 8).u8(v & 0xff); }
Writer& Writer::u32(std::uint32_t v) { return u16(v >> 16).u16(v & 0xffff); }
Writer& Writer::i64(std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  return u32(static_cast<std::uint32_t>(u >> 32)).u32(static_cast<std::uint32_t>(u));
}
Writer& Writer::str(std::string_view s) {
  MERIDIAN_CHECK_LE(s.size(), std::size_t{0xffffffffu});
  u32(static_cast<std::uint32_t>(s.size()));
  out_.append(s);
  return *this;
}
Writer& Writer::raw(const void* data, std::size_t n) {
  out_.append(static_cast<const char*>(data), n);
  return *this;
}
std::string Writer::frame() const {
  std::string out;
  out.reserve(4 + out_.size());
  const auto n = static_cast<std::uint32_t>(out_.size());
  const char prefix[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(prefix, 4);
  out.append(out_);
  return out;
}

void Reader::need(std::size_t n, const char* what) const {
  if (in_.size() - pos_ < n) {
    throw ProtocolError(std::string("store message truncated in field '") + what + "' (needs " +
                        std::to_string(n) + " bytes, " + std::to_string(in_.size() - pos_) +
                        " left)");
  }
}
Type Reader::type() { return static_cast<Type>(u8("type")); }
std::uint8_t Reader::u8(const char* what) {
  need(1, what);
  return static_cast<std::uint8_t>(in_[pos_++]);
}
std::uint16_t Reader::u16(const char* what) {
  const std::uint16_t hi = u8(what);
  return static_cast<std::uint16_t>((hi << 8) | u8(what));
}
std::uint32_t Reader::u32(const char* what) {
  const std::uint32_t hi = u16(what);
  return (hi << 16) | u16(what);
}
std::int64_t Reader::i64(const char* what) {
  const std::uint64_t hi = u32(what);
  return static_cast<std::int64_t>((hi << 32) | u32(what));
}
std::string Reader::str(const char* what, std::uint32_t max_bytes) {
  const std::uint32_t n = u32(what);
  if (n > max_bytes) {
    throw ProtocolError(std::string("store message field '") + what + "' claims " +
                        std::to_string(n) + " bytes, limit " + std::to_string(max_bytes));
  }
  need(n, what);
  std::string out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}
void Reader::raw(void* out, std::size_t n, const char* what) {
  need(n, what);
  std::memcpy(out, in_.data() + pos_, n);
  pos_ += n;
}
void Reader::finish(const char* what) const {
  if (pos_ != in_.size()) {
    throw ProtocolError(std::string("store message '") + what + "' has " +
                        std::to_string(in_.size() - pos_) + " unexpected trailing bytes");
  }
}

std::string join_transcript(const Nonce& server_nonce, const std::string& client_id,
                            const std::string& version, const std::string& config_hash,
                            const Nonce& client_nonce) {
  Writer w(Type::kJoin);
  w.str("meridian-store-join").raw(server_nonce.data(), server_nonce.size());
  w.str(client_id).str(version).str(config_hash).raw(client_nonce.data(), client_nonce.size());
  return w.body();
}

std::string server_transcript(const Nonce& server_nonce, const Nonce& client_nonce) {
  Writer w(Type::kWelcome);
  w.str("meridian-store-welcome").raw(client_nonce.data(), client_nonce.size());
  w.raw(server_nonce.data(), server_nonce.size());
  return w.body();
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

namespace {

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

}  // namespace

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

std::uint32_t decode_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string recv_frame(int fd, std::uint32_t max_body_bytes, double deadline_s) {
  unsigned char prefix[4];
  recv_exact(fd, reinterpret_cast<char*>(prefix), 4, deadline_s);
  const std::uint32_t n = decode_u32(prefix);
  if (n == 0 || n > max_body_bytes) {
    throw ProtocolError("store: frame claims " + std::to_string(n) + " bytes, limit " +
                        std::to_string(max_body_bytes));
  }
  std::string body(n, '\0');
  recv_exact(fd, body.data(), n, deadline_s);
  return body;
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
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const double left_s = deadline_s - now_s();
      rc = left_s > 0 ? ::poll(&p, 1, static_cast<int>(left_s * 1000.0) + 1) : 0;
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
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
