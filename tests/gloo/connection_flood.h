// Test and benchmark support: a flood of idle TCP connections to the store, as an attacker (or a
// misconfigured load balancer) would open them: connected, never a byte written. Loopback only;
// each connection can come from its own local address (127.0.0.2, ...), so that one address's
// limit and the store's overall limit can be exercised apart. Not a client: see tcp_store.h.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "engine/store/tcp_store.h"
#include "engine/store/tcp_store_wire.h"

namespace meridian::testing {

// Local address i of a flood spread over `addresses` addresses: 127.0.1.x, 127.0.2.x, ...
// (never 127.0.0.1, the real nodes' address).
inline std::string flood_address(int i, int addresses) {
  const int k = i % addresses;
  return "127.0." + std::to_string(1 + k / 250) + "." + std::to_string(1 + k % 250);
}

// Opens `count` connections to 127.0.0.1:`port`, connection i bound to local address
// `from(i)`, without waiting for them to be established (non-blocking connect). The caller
// closes the sockets. Returns fewer when this process runs out of descriptors.
template <typename From>
std::vector<int> open_idle_connections(std::uint16_t port, int count, From from) {
  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, std::string(from(i)).c_str(), &local.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
        (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 &&
         errno != EINPROGRESS)) {
      ::close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

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
