// Test and benchmark support: floods of TCP connections to the store, as an attacker (or a
// misconfigured load balancer) would open them: idle ones (connected, never a byte written) and
// slowloris ones (a join frame trickled a byte at a time, dialled again whenever closed).
// Loopback only; each connection can come from its own local address (127.0.1.1, ...), so that
// one address's limit and the store's overall limit can be exercised apart. Not a client: see
// tcp_store.h.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/backends/store_tcp/tcp_store_wire.h"

namespace meridian::testing {

// Local address i of a flood spread over `addresses` addresses: 127.0.1.x, 127.0.2.x, ...
// (never 127.0.0.1, the real nodes' address).
inline std::string flood_address(int i, int addresses) {
  const int k = i % addresses;
  return "127.0." + std::to_string(1 + k / 250) + "." + std::to_string(1 + k % 250);
}

// A non-blocking socket bound to local address `from` and connecting to 127.0.0.1:`port` (not
// waited for); -1 when that fails (out of descriptors).
inline int connect_from(std::uint16_t port, const std::string& from) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Opens `count` connections to 127.0.0.1:`port`, connection i bound to local address
// `from(i)`, without waiting for them to be established (non-blocking connect). The caller
// closes the sockets. Returns fewer when this process runs out of descriptors.
template <typename From>
std::vector<int> open_idle_connections(std::uint16_t port, int count, From from) {
  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int fd = connect_from(port, std::string(from(i)));
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

// Slowloris: `count` connections to 127.0.0.1:`port`, connection i from local address
// `from(i)`, each trickling a join frame (a valid length prefix, then its body) one byte every
// `byte_interval_s`, and each dialled again as soon as the server closes it, so that they keep
// the store's unjoined slots filled. Served by its own thread until destroyed; it reads (and
// drops) what the server sends and closes with a reset (no TIME_WAIT left behind by the churn).
class SlowlorisFlood {
 public:
  struct Counts {
    int greeted_open = 0;  // open now, greeted by the server, at least one byte sent
    int cut_slots = 0;     // of the `count` connection slots, those the server has closed once
    std::uint64_t dials = 0;
    std::uint64_t closed_by_server = 0;
    double longest_s = 0;      // the longest a connection stayed open before the server closed it
    double oldest_open_s = 0;  // the age of the oldest connection open now
  };

  SlowlorisFlood(std::uint16_t port, int count, std::function<std::string(int)> from,
                 double byte_interval_s)
      : port_(port), byte_interval_s_(byte_interval_s), from_(std::move(from)) {
    slots_.resize(static_cast<std::size_t>(count));
    if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return;
    thread_ = std::thread([this] { serve(); });
  }
  ~SlowlorisFlood() {
    if (thread_.joinable()) {
      const char b = 1;
      [[maybe_unused]] const ssize_t rc = ::write(stop_pipe_[1], &b, 1);
      thread_.join();
    }
    for (Slot& s : slots_) reset(s);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }
  SlowlorisFlood(const SlowlorisFlood&) = delete;
  SlowlorisFlood& operator=(const SlowlorisFlood&) = delete;

  Counts counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    Counts c = counts_;
    const double now = store_wire::now_s();
    for (const Slot& s : slots_) {
      c.greeted_open += s.fd >= 0 && s.greeted && s.sent > 0;
      c.cut_slots += s.cut;
      if (s.fd >= 0) c.oldest_open_s = std::max(c.oldest_open_s, now - s.opened_s);
    }
    return c;
  }

 private:
  struct Slot {
    int fd = -1;
    double opened_s = 0;
    double next_byte_s = 0;
    std::size_t sent = 0;  // bytes of the frame sent
    bool greeted = false;
    bool cut = false;
  };

  static void reset(Slot& s) {
    if (s.fd < 0) return;
    const linger rst{1, 0};
    ::setsockopt(s.fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
    ::close(s.fd);
    s.fd = -1;
  }

  void dial(Slot& s, int i, double now) {
    s.fd = connect_from(port_, from_(i));
    s.opened_s = s.next_byte_s = now;
    s.sent = 0;
    s.greeted = false;
    ++counts_.dials;
  }

  void serve() {
    // A join frame: a length prefix the server accepts, then a body that never ends in time.
    store_wire::Writer join(store_wire::Type::kJoin);
    join.str(std::string(200, 'x'));
    const std::string frame = join.frame();
    std::vector<pollfd> fds;
    for (;;) {
      const double now = store_wire::now_s();
      double next_s = now + 1.0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (std::size_t i = 0; i < slots_.size(); ++i) {
          Slot& s = slots_[i];
          if (s.fd < 0) dial(s, static_cast<int>(i), now);
          if (s.fd >= 0 && now >= s.next_byte_s && s.sent < frame.size()) {
            const ssize_t rc = ::send(s.fd, frame.data() + s.sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (rc == 1) {
              ++s.sent;
              s.next_byte_s = now + byte_interval_s_;
            }  // else still connecting (EAGAIN) or closed: its poll event says which
          }
          if (s.fd >= 0) next_s = std::min(next_s, s.next_byte_s);
        }
      }
      fds.clear();
      fds.push_back({stop_pipe_[0], POLLIN, 0});
      for (const Slot& s : slots_) fds.push_back({s.fd, POLLIN | POLLRDHUP, 0});
      const int wait_ms = static_cast<int>(std::max(0.0, next_s - store_wire::now_s()) * 1000) + 1;
      if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      std::lock_guard<std::mutex> lock(mu_);
      const double at = store_wire::now_s();
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        const short ev = fds[i + 1].revents;
        if (s.fd < 0 || ev == 0) continue;
        char buf[256];
        const ssize_t n = ::recv(s.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) s.greeted = true;
        if (n == 0 || (n < 0 && errno != EAGAIN) || (ev & (POLLRDHUP | POLLHUP | POLLERR))) {
          if (s.greeted) {  // closed by the server after accepting it (not a failed connect)
            ++counts_.closed_by_server;
            counts_.longest_s = std::max(counts_.longest_s, at - s.opened_s);
            s.cut = true;
          }
          reset(s);  // dialled again on the next turn
        }
      }
    }
  }

  std::uint16_t port_;
  double byte_interval_s_;
  std::function<std::string(int)> from_;
  int stop_pipe_[2] = {-1, -1};
  mutable std::mutex mu_;  // guards slots_ and counts_
  std::vector<Slot> slots_;
  Counts counts_;
  std::thread thread_;
};

struct FloodOutcome {
  int greeted = 0;  // still open: the server sent its greeting and holds the connection
  int shed = 0;     // closed (or reset) by the server
  int pending = 0;  // neither by the deadline
};

// Waits (poll, no sleeps) until the server has answered every flood connection, with its
// greeting or by closing it, or until `deadline_s` (store_wire::now_s()); reads what arrived.
inline FloodOutcome settle_flood(const std::vector<int>& fds, double deadline_s) {
  FloodOutcome out;
  std::vector<int> state(fds.size(), 0);  // 0 pending, 1 greeted, 2 shed
  std::vector<pollfd> p;
  std::vector<std::size_t> index;
  for (;;) {
    p.clear();
    index.clear();
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (state[i] == 2) continue;
      // A greeted connection is watched for its close only (POLLRDHUP); a pending one for data.
      p.push_back({fds[i], static_cast<short>(state[i] == 1 ? POLLRDHUP : POLLIN | POLLRDHUP), 0});
      index.push_back(i);
    }
    int pending = 0;
    for (int s : state) pending += s == 0;
    const double left_s = deadline_s - store_wire::now_s();
    if (pending == 0 || left_s <= 0) break;
    const int rc = ::poll(p.data(), p.size(), static_cast<int>(left_s * 1000) + 1);
    if (rc <= 0) continue;
    for (std::size_t j = 0; j < p.size(); ++j) {
      if (p[j].revents == 0) continue;
      const std::size_t i = index[j];
      char buf[256];
      const ssize_t n = ::recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 && !(p[j].revents & (POLLRDHUP | POLLHUP | POLLERR)))
        state[i] = 1;
      else if (n == 0 || (n < 0 && errno != EAGAIN) || (p[j].revents & (POLLRDHUP | POLLHUP)))
        state[i] = 2;
    }
  }
  for (int s : state) {
    out.greeted += s == 1;
    out.shed += s == 2;
    out.pending += s == 0;
  }
  return out;
}

// A TCP store serving from a forked child process, so that the child's descriptor limit can be
// lowered (RLIMIT_NOFILE) and its CPU time read. Killed (SIGKILL) by the destructor unless
// stop() ended it with SIGTERM first.
class ForkedStore {
 public:
  // `nofile` = 0 keeps the limit; `log_fd` >= 0 receives the server's log lines.
  ForkedStore(const std::string& secret, rlim_t nofile, int log_fd) {
    int port_pipe[2];
    if (::pipe(port_pipe) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) serve(secret, nofile, log_fd, port_pipe[1]);
    ::close(port_pipe[1]);
    if (pid_ > 0 && ::read(port_pipe[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = 0;
    ::close(port_pipe[0]);
  }
  ~ForkedStore() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ForkedStore(const ForkedStore&) = delete;
  ForkedStore& operator=(const ForkedStore&) = delete;

  std::uint16_t port() const { return port_; }  // 0 when the child did not start serving
  pid_t pid() const { return pid_; }

  // CPU seconds (user + system) the child has used, from /proc/<pid>/stat.
  double cpu_seconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
    std::string f;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i)
      if (i == 14 || i == 15) ticks += std::stod(f);  // utime, stime
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

  // SIGTERM, then the child's exit status (0: it stopped its server cleanly).
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  [[noreturn]] static void serve(const std::string& secret, rlim_t nofile, int log_fd,
                                 int port_fd) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    const rlimit lim{nofile, nofile};
    if (nofile > 0 && ::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(2);
    TcpStoreServerOptions o;
    o.identity = {secret, "1", ""};
    if (log_fd >= 0) {
      o.log = [log_fd](const std::string& line) {
        const std::string l = line + "\n";
        [[maybe_unused]] const ssize_t rc = ::write(log_fd, l.data(), l.size());
      };
    }
    TcpStoreServer server(o);
    const std::uint16_t port = server.start();
    if (::write(port_fd, &port, sizeof(port)) != sizeof(port)) ::_exit(3);
    int sig = 0;
    sigwait(&stop, &sig);
    server.stop();
    ::_exit(0);
  }

  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace meridian::testing
