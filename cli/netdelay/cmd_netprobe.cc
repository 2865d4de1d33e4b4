// `meridian netprobe`: a TCP round-trip and throughput probe for the namespace harness (the
// machine has no ping or iperf3). `serve` answers pings and sinks bulk data; the client reports
// the round-trip times and the goodput of one bulk transfer. A measuring tool, not a benchmark
// suite: one connection at a time, blocking sockets.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "engine/error.h"

namespace meridian::cli {
namespace {

constexpr char kUsage[] =
    "usage: meridian netprobe serve [--bind HOST] [--port P] [--port-file F] [--connections K]\n"
    "       meridian netprobe HOST:PORT [--pings N] [--bytes B]\n"
    "\n"
    "serve: listens on HOST:P (P = 0: a free port, written to F), answers K connections (default:\n"
    "until killed). Client: N 64-byte ping-pongs on one TCP_NODELAY connection (default 20), then\n"
    "B bytes (default 10000000) sent on a second connection; prints one line\n"
    "  connect_ms=.. rtt_ms_min=.. rtt_ms_median=.. rtt_ms_max=.. bytes=.. seconds=.. "
    "mbit_per_s=..\n"
    "where seconds runs from the first byte sent to the receiver's count coming back (so it\n"
    "includes one round trip).\n";

constexpr std::size_t kPingBytes = 64;
constexpr std::size_t kChunkBytes = 1 << 16;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

[[noreturn]] void fail_errno(const std::string& what) {
  throw Error(what + ": " + std::strerror(errno));
}

void write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_errno("send");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Reads exactly n bytes; false on a clean end of stream before the first byte.
bool read_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_errno("recv");
    }
    if (r == 0) {
      if (got == 0) return false;
      throw Error("connection closed mid-message");
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in resolve(const std::string& host, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw ConfigError("'" + host + "' is not an IPv4 address");
  return a;
}

// Serves one connection: the first byte says what it is ('p' pings: echo 64-byte messages until
// the peer closes; 's' sink: read to the end, reply with the 8-byte count).
void serve_one(int fd, std::vector<std::uint8_t>& buf) {
  char mode = 0;
  if (!read_all(fd, &mode, 1)) return;
  if (mode == 'p') {
    set_nodelay(fd);
    while (read_all(fd, buf.data(), kPingBytes)) write_all(fd, buf.data(), kPingBytes);
  } else if (mode == 's') {
    std::uint64_t total = 0;
    while (true) {
      const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_errno("recv");
      if (r == 0) break;
      total += static_cast<std::uint64_t>(r);
    }
    write_all(fd, &total, sizeof total);
  } else {
    throw ProtocolError("unknown mode byte");
  }
}

int run_serve(const std::vector<std::string>& args) {
  std::string bind_host = "0.0.0.0", port_file;
  std::uint16_t port = 0;
  std::uint64_t connections = 0;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--bind")
      bind_host = value();
    else if (a == "--port")
      port = opt::port("--port", value());
    else if (a == "--port-file")
      port_file = value();
    else if (a == "--connections")
      connections = opt::unsigned_integer("--connections", value());
    else
      throw ConfigError("unknown argument '" + a + "'\n" + kUsage);
  }
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) fail_errno("socket");
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = resolve(bind_host, port);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail_errno("bind");
  if (listen(lfd, 8) != 0) fail_errno("listen");
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";  // appears complete or not at all
    std::ofstream(tmp) << ntohs(addr.sin_port) << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  std::cerr << "netprobe: listening on " << bind_host << ":" << ntohs(addr.sin_port) << std::endl;
  std::vector<std::uint8_t> buf(kChunkBytes);
  for (std::uint64_t served = 0; connections == 0 || served < connections; ++served) {
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      fail_errno("accept");
    }
    try {
      serve_one(fd, buf);
    } catch (const Error& e) {
      std::cerr << e.what() << "\n";
    }
    close(fd);
  }
  close(lfd);
  return kExitOk;
}

int connect_to(const sockaddr_in& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    fail_errno("connect");
  return fd;
}

int run_client(const std::vector<std::string>& args) {
  const std::string target = args[0];
  const auto colon = target.rfind(':');
  if (colon == std::string::npos) throw ConfigError("expected HOST:PORT, got '" + target + "'");
  const sockaddr_in addr =
      resolve(target.substr(0, colon), opt::port("HOST:PORT", target.substr(colon + 1)));
  std::uint64_t pings = 20, bytes = 10'000'000;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--pings")
      pings = opt::unsigned_integer("--pings", value());
    else if (a == "--bytes")
      bytes = opt::unsigned_integer("--bytes", value());
    else
      throw ConfigError("unknown argument '" + a + "'\n" + kUsage);
  }
  if (pings == 0) throw ConfigError("--pings: expected at least 1");

  // Round trips: connect (SYN, SYN-ACK) and 64-byte ping-pongs.
  const double t0 = now_s();
  int fd = connect_to(addr);
  const double connect_ms = (now_s() - t0) * 1e3;
  set_nodelay(fd);
  std::vector<std::uint8_t> buf(kChunkBytes, 0x5a);
  write_all(fd, "p", 1);
  std::vector<double> rtt_ms;
  for (std::uint64_t k = 0; k < pings; ++k) {
    const double s = now_s();
    write_all(fd, buf.data(), kPingBytes);
    if (!read_all(fd, buf.data(), kPingBytes)) throw Error("server closed during pings");
    rtt_ms.push_back((now_s() - s) * 1e3);
  }
  close(fd);
  std::sort(rtt_ms.begin(), rtt_ms.end());

  // Goodput: B bytes, then the receiver's count.
  fd = connect_to(addr);
  write_all(fd, "s", 1);
  const double s = now_s();
  for (std::uint64_t left = bytes; left > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    write_all(fd, buf.data(), n);
    left -= n;
  }
  shutdown(fd, SHUT_WR);
  std::uint64_t counted = 0;
  if (!read_all(fd, &counted, sizeof counted)) throw Error("no count from the server");
  const double seconds = now_s() - s;
  close(fd);

  std::cout << std::fixed << std::setprecision(3) << "connect_ms=" << connect_ms
            << " rtt_ms_min=" << rtt_ms.front() << " rtt_ms_median=" << rtt_ms[rtt_ms.size() / 2]
            << " rtt_ms_max=" << rtt_ms.back() << " bytes=" << counted << " seconds=" << seconds
            << " mbit_per_s=" << static_cast<double>(counted) * 8 / seconds / 1e6 << std::endl;
  if (counted != bytes) {
    std::cerr << "netprobe: sent " << bytes << " bytes, the server counted " << counted << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

int run_netprobe(const std::vector<std::string>& args) {
  if (args.empty()) throw ConfigError(std::string("expected serve or HOST:PORT\n") + kUsage);
  return args[0] == "serve" ? run_serve(args) : run_client(args);
}

MERIDIAN_COMMAND("netprobe", "TCP round-trip and throughput probe (serve, or HOST:PORT)", kUsage,
                 run_netprobe);

}  // namespace
}  // namespace meridian::cli
