// `meridian netprobe`: a TCP round-trip and throughput probe for the namespace harness (the
// machine has no ping or iperf3). `serve` answers pings and sinks bulk data; the client reports
// the round-trip times and the goodput of one bulk transfer over K parallel connections. A
// measuring tool, not a benchmark suite: blocking sockets, a thread per connection.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "engine/core/error.h"
#include "engine/core/util/files.h"

namespace meridian::cli {
namespace {

// What `meridian netprobe` was asked: serve, or probe HOST:PORT.
struct ProbeArgs {
  std::string target;  // "serve" or HOST:PORT
  std::string bind_host = "0.0.0.0", port_file, cc_name;
  std::uint16_t port = 0;
  std::uint64_t connections = 0, pings = 20, bytes = 10'000'000, flows = 1;
};

std::unique_ptr<Options> options(ProbeArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian netprobe",
      std::vector<std::string>{"serve [--bind HOST] [--port P] [--port-file F] [--connections K]",
                               "HOST:PORT [--pings N] [--bytes B] [--flows K] [--cc NAME]"},
      "serve: listens on HOST:P, answers K connections, each in its own thread. Client: N "
      "64-byte ping-pongs on one TCP_NODELAY connection, then B bytes in all sent over K new "
      "connections at once (B split evenly), opened before the clock starts; prints\n"
      "  connect_ms=.. rtt_ms_min=.. rtt_ms_median=.. rtt_ms_max=.. (with pings) flows=..\n"
      "  bytes=.. seconds=.. mbit_per_s=.. delivered_s=.. delivered_mbit_per_s=..\n"
      "  retrans_segs=.. segs=..\n"
      "seconds runs from the first byte sent to the last receiver's count coming back (so it "
      "includes one round trip); delivered_s to the last byte's arrival at its receiver (the "
      "receivers' clock, the same CLOCK_MONOTONIC on one machine, namespaces or not): the "
      "message's delivery time. retrans_segs: the senders' retransmitted segments (TCP_INFO), "
      "segs: the data segments without retransmissions (bytes / MSS per connection).");
  const auto unsigned_into = [](std::uint64_t& into) {
    return
        [&into](const std::string& n, const std::string& v) { into = opt::unsigned_integer(n, v); };
  };
  o->argument("serve|HOST:PORT", "serve, or the server to probe", a.target)
      .text("--bind", "HOST", "serve: the address to listen on (default 0.0.0.0)", a.bind_host)
      .value("--port", "P", "serve: the port (default 0: a free one, written to --port-file)",
             [&a](const std::string& n, const std::string& v) { a.port = opt::port(n, v); })
      .text("--port-file", "F", "serve: where the port is written once it listens", a.port_file)
      .value("--connections", "K", "serve: connections to answer (default: until killed)",
             unsigned_into(a.connections))
      .value("--pings", "N", "client: ping-pongs (default 20; 0: none)", unsigned_into(a.pings))
      .value("--bytes", "B", "client: bytes in all (default 10000000)", unsigned_into(a.bytes))
      .integer("--flows", "K", "client: connections at once (default 1)", a.flows, 1, 1024)
      .text("--cc", "NAME",
            "client: the bulk connections' congestion control (TCP_CONGESTION; any the kernel "
            "has, with CAP_NET_ADMIN, where a namespace's net.ipv4.tcp_congestion_control may "
            "only name the allowed ones); the one in use goes to stderr",
            a.cc_name);
  return o;
}

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

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// What a sink sends back when its peer has closed: the byte count and when the last byte came.
struct SinkReply {
  std::uint64_t bytes = 0;
  std::int64_t last_byte_ns = 0;  // CLOCK_MONOTONIC
};

// Serves one connection: the first byte says what it is ('p' pings: echo 64-byte messages until
// the peer closes; 's' sink: read to the end, reply with a SinkReply).
void serve_one(int fd) {
  std::vector<std::uint8_t> buf(kChunkBytes);
  char mode = 0;
  if (!read_all(fd, &mode, 1)) return;
  if (mode == 'p') {
    set_nodelay(fd);
    while (read_all(fd, buf.data(), kPingBytes)) write_all(fd, buf.data(), kPingBytes);
  } else if (mode == 's') {
    SinkReply reply;
    while (true) {
      const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_errno("recv");
      if (r == 0) break;
      reply.last_byte_ns = monotonic_ns();
      reply.bytes += static_cast<std::uint64_t>(r);
    }
    write_all(fd, &reply, sizeof reply);
  } else {
    throw ProtocolError("unknown mode byte");
  }
}

int run_serve(const ProbeArgs& a) {
  const std::string& bind_host = a.bind_host;
  const std::string& port_file = a.port_file;
  const std::uint16_t port = a.port;
  const std::uint64_t connections = a.connections;
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) fail_errno("socket");
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = resolve(bind_host, port);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail_errno("bind");
  if (listen(lfd, 8) != 0) fail_errno("listen");
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (!port_file.empty())  // appears complete or not at all
    write_file_atomically(port_file, std::to_string(ntohs(addr.sin_port)) + "\n");
  std::cerr << "netprobe: listening on " << bind_host << ":" << ntohs(addr.sin_port) << std::endl;
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers;
  for (std::uint64_t served = 0; connections == 0 || served < connections; ++served) {
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      fail_errno("accept");
    }
    std::erase_if(workers, [](Worker& w) {  // reap finished connections
      if (!*w.done) return false;
      w.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers.push_back(Worker{std::thread([fd, done] {
                               try {
                                 serve_one(fd);
                               } catch (const Error& e) {
                                 std::cerr << e.what() << "\n";
                               }
                               close(fd);
                               *done = true;
                             }),
                             done});
  }
  for (Worker& w : workers) w.thread.join();
  close(lfd);
  return kExitOk;
}

// `cc`: the congestion control to use ("" for the namespace's default), set before connecting.
int connect_to(const sockaddr_in& addr, const std::string& cc = "") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  if (!cc.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())))
    fail_errno("--cc " + cc);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    fail_errno("connect");
  return fd;
}

// One bulk connection's sending side and what it learnt.
struct Flow {
  int fd = -1;
  std::uint64_t bytes = 0;
  SinkReply reply;
  std::uint32_t retrans_segs = 0;
  std::uint32_t mss = 0;
  std::string error;
};

void send_flow(Flow& f) {
  try {
    std::vector<std::uint8_t> buf(kChunkBytes, 0x5a);
    for (std::uint64_t left = f.bytes; left > 0;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
      write_all(f.fd, buf.data(), n);
      left -= n;
    }
    shutdown(f.fd, SHUT_WR);
    if (!read_all(f.fd, &f.reply, sizeof f.reply)) throw Error("no count from the server");
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(f.fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
      f.retrans_segs = info.tcpi_total_retrans;
      f.mss = info.tcpi_snd_mss;
    }
  } catch (const Error& e) {
    f.error = e.what();
  }
}

int run_client(const ProbeArgs& a) {
  const std::string& target = a.target;
  const auto colon = target.rfind(':');
  if (colon == std::string::npos) throw ConfigError("expected HOST:PORT, got '" + target + "'");
  const sockaddr_in addr =
      resolve(target.substr(0, colon), opt::port("HOST:PORT", target.substr(colon + 1)));
  const std::uint64_t pings = a.pings, bytes = a.bytes, flows = a.flows;
  const std::string& cc_name = a.cc_name;

  std::ostringstream line;
  line << std::fixed << std::setprecision(3);
  if (pings > 0) {  // round trips: connect (SYN, SYN-ACK) and 64-byte ping-pongs
    const double t0 = now_s();
    const int fd = connect_to(addr);
    const double connect_ms = (now_s() - t0) * 1e3;
    set_nodelay(fd);
    std::vector<std::uint8_t> buf(kPingBytes, 0x5a);
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
    line << "connect_ms=" << connect_ms << " rtt_ms_min=" << rtt_ms.front()
         << " rtt_ms_median=" << rtt_ms[rtt_ms.size() / 2] << " rtt_ms_max=" << rtt_ms.back()
         << " ";
  }

  // Goodput: K connections opened first, then B bytes split over them at once.
  std::vector<Flow> f(flows);
  for (std::uint64_t k = 0; k < flows; ++k) {
    f[k].fd = connect_to(addr, cc_name);
    f[k].bytes = bytes / flows + (k < bytes % flows ? 1 : 0);
    write_all(f[k].fd, "s", 1);
  }
  char cc[16] = {};
  socklen_t cc_len = sizeof cc - 1;
  getsockopt(f[0].fd, IPPROTO_TCP, TCP_CONGESTION, cc, &cc_len);
  const std::int64_t start_ns = monotonic_ns();
  std::vector<std::thread> threads;
  for (Flow& flow : f) threads.emplace_back(send_flow, std::ref(flow));
  for (std::thread& t : threads) t.join();
  const double seconds = static_cast<double>(monotonic_ns() - start_ns) * 1e-9;
  std::uint64_t counted = 0, retrans = 0, segs = 0;
  std::int64_t last_ns = start_ns;
  for (Flow& flow : f) {
    close(flow.fd);
    if (!flow.error.empty()) throw Error(flow.error);
    counted += flow.reply.bytes;
    retrans += flow.retrans_segs;
    segs += flow.mss ? (flow.bytes + flow.mss - 1) / flow.mss : 0;
    last_ns = std::max(last_ns, flow.reply.last_byte_ns);
  }
  const double delivered_s = static_cast<double>(last_ns - start_ns) * 1e-9;
  const auto mbit = [&](double s) { return static_cast<double>(counted) * 8 / s / 1e6; };
  line << "flows=" << flows << " bytes=" << counted << " seconds=" << seconds
       << " mbit_per_s=" << mbit(seconds) << " delivered_s=" << std::setprecision(4) << delivered_s
       << std::setprecision(3) << " delivered_mbit_per_s=" << mbit(delivered_s)
       << " retrans_segs=" << retrans << " segs=" << segs;
  std::cout << line.str() << std::endl;
  std::cerr << "netprobe: congestion control " << cc << "\n";
  if (counted != bytes) {
    std::cerr << "netprobe: sent " << bytes << " bytes, the servers counted " << counted << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

int run_netprobe(const std::vector<std::string>& args) {
  ProbeArgs a;
  const auto opts = options(a);
  opts->parse(args);
  const bool serve = a.target == "serve";
  static const char* const kServeOnly[] = {"--bind", "--port", "--port-file", "--connections"};
  static const char* const kClientOnly[] = {"--pings", "--bytes", "--flows", "--cc"};
  for (const char* name : serve ? std::span(kClientOnly) : std::span(kServeOnly))
    if (opts->given(name))
      throw ConfigError(std::string(name) + ": only " +
                        (serve ? "for a client (HOST:PORT)" : "with serve"));
  return serve ? run_serve(a) : run_client(a);
}

MERIDIAN_COMMAND("netprobe", "TCP round-trip and throughput probe (serve, or HOST:PORT)",
                 help_of<ProbeArgs>(options), run_netprobe);

}  // namespace
}  // namespace meridian::cli
