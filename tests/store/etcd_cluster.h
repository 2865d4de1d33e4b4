// A throwaway etcd cluster for tests and benchmarks: N members of Debian's etcd 3.4 on loopback,
// each with its own client and peer port (ephemeral), data in a temporary directory (on
// /dev/shm when present: fsync is cheap there), fast elections (50 ms heartbeat, 500 ms
// election timeout). Members can be killed (SIGKILL) and restarted; the leader is found with
// `etcdctl endpoint status`. With `tls`, clients speak TLS with client certificates (a CA and
// certificates made with the openssl command). Everything is stopped and removed at destruction.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace meridian::testing {

class EtcdCluster {
 public:
  static constexpr const char* kEtcd = "/usr/bin/etcd";
  static constexpr const char* kEtcdctl = "/usr/bin/etcdctl";

  // Whether the etcd binaries are installed (the Makefile installs etcd-server, etcd-client).
  static bool available() { return ::access(kEtcd, X_OK) == 0 && ::access(kEtcdctl, X_OK) == 0; }

  // Starts `members` members and waits (up to 30 s) until they have elected a leader.
  explicit EtcdCluster(int members, bool tls = false) : tls_(tls) {
    const std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "meridian-etcd-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("etcd cluster: mkdtemp failed");
    dir_ = tmpl;
    if (tls_) make_certificates();
    const std::vector<int> ports = free_ports(2 * members);
    for (int i = 0; i < members; ++i)
      members_.push_back({"m" + std::to_string(i), ports[2 * i], ports[2 * i + 1], -1});
    for (const Member& m : members_)
      cluster_ += (cluster_.empty() ? "" : ",") + m.name + "=" + peer_url(m);
    for (int i = 0; i < members; ++i) start(i, "new");
    wait_healthy(30.0);
  }

  ~EtcdCluster() {
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) kill(i);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  int client_port(int i) const { return members_[i].client_port; }
  bool running(int i) const { return members_[i].pid > 0; }

  // "etcd://127.0.0.1:P0,127.0.0.1:P1,..." (+ "/PREFIX" when given); with TLS
  // "etcds://...?cacert=..&cert=..&key=..".
  std::string url(const std::string& prefix = "") const {
    std::string u = tls_ ? "etcds://" : "etcd://";
    for (std::size_t i = 0; i < members_.size(); ++i)
      u += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(members_[i].client_port);
    if (!prefix.empty()) u += "/" + prefix;
    if (tls_)
      u += "?cacert=" + file("ca.pem") + "&cert=" + file("client.pem") +
           "&key=" + file("client.key");
    return u;
  }

  // A file of the cluster's directory (certificates: ca.pem, client.pem, client.key).
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // `etcdctl` with the TLS flags when the cluster speaks TLS.
  std::string ctl() const {
    return std::string(kEtcdctl) + (tls_ ? " --cacert=" + file("ca.pem") + " --cert=" +
                                               file("client.pem") + " --key=" + file("client.key")
                                         : std::string());
  }

  // SIGKILLs member i (no-op when it is not running).
  void kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    ::waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

  // Restarts member i from its data directory (it rejoins the cluster).
  void restart(int i) { start(i, "existing"); }

  // The index of the member that leads now, or -1 when none answers with a leader.
  int leader() const {
    for (int i = 0; i < size(); ++i) {
      if (!running(i)) continue;
      const std::string out =
          run_capture(ctl() + " --endpoints=" + client_url(members_[i]) +
                      " --command-timeout=2s endpoint status -w json 2>/dev/null");
      const auto j = nlohmann::json::parse(out, nullptr, false);
      if (j.is_discarded() || !j.is_array() || j.empty()) continue;
      const auto& status = j[0]["Status"];
      if (!status.contains("leader") || !status["header"].contains("member_id")) continue;
      if (status["leader"] == status["header"]["member_id"]) return i;
      // A follower names the leader's id: find that member.
      for (int k = 0; k < size(); ++k)
        if (k != i && running(k) && member_id(k) == status["leader"]) return k;
    }
    return -1;
  }

  // Waits until every running member answers and one of them leads; false after timeout_s.
  bool wait_healthy(double timeout_s) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      std::string endpoints;
      for (int i = 0; i < size(); ++i)
        if (running(i)) endpoints += (endpoints.empty() ? "" : ",") + client_url(members_[i]);
      const std::string cmd = ctl() + " --endpoints=" + endpoints +
                              " --command-timeout=2s endpoint health >/dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0 && leader() >= 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::string log_path(int i) const { return (dir_ / (members_[i].name + ".log")).string(); }

 private:
  struct Member {
    std::string name;
    int client_port, peer_port;
    pid_t pid;
  };

  std::string client_url(const Member& m) const {
    return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
  }

  // A CA, and server (for 127.0.0.1) and client certificates signed by it.
  void make_certificates() const {
    const std::string d = dir_.string();
    const std::string cmd =
        "cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem " +
        "-days 2 -subj /CN=meridian-test-ca && "
        "for who in server client; do "
        "openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who && "
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > "
        "$who.ext && "
        "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem "
        "-days 2 -extfile $who.ext || exit 1; done >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0)
      throw std::runtime_error("etcd cluster: cannot make test certificates with openssl");
  }
  static std::string peer_url(const Member& m) {
    return "http://127.0.0.1:" + std::to_string(m.peer_port);
  }

  nlohmann::json member_id(int k) const {
    const std::string out =
        run_capture(ctl() + " --endpoints=" + client_url(members_[k]) +
                    " --command-timeout=2s endpoint status -w json 2>/dev/null");
    const auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded() || !j.is_array() || j.empty()) return nullptr;
    return j[0]["Status"]["header"]["member_id"];
  }

  static std::string run_capture(const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }

  // Distinct free loopback ports: bound together (so they differ), then released for etcd.
  static std::vector<int> free_ports(int n) {
    std::vector<int> fds, ports;
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("etcd cluster: cannot find a free port");
      fds.push_back(fd);
      ports.push_back(ntohs(a.sin_port));
    }
    for (const int fd : fds) ::close(fd);
    return ports;
  }

  void start(int i, const std::string& state) {
    Member& m = members_[i];
    std::vector<std::string> args = {
        kEtcd,
        "--name=" + m.name,
        "--data-dir=" + (dir_ / m.name).string(),
        "--listen-client-urls=" + client_url(m),
        "--advertise-client-urls=" + client_url(m),
        "--listen-peer-urls=" + peer_url(m),
        "--initial-advertise-peer-urls=" + peer_url(m),
        "--initial-cluster=" + cluster_,
        "--initial-cluster-state=" + state,
        "--initial-cluster-token=meridian-test-" + std::to_string(::getpid()),
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
    };
    if (tls_) {
      for (const std::string& f :
           {"--cert-file=" + file("server.pem"), "--key-file=" + file("server.key"),
            std::string("--client-cert-auth"), "--trusted-ca-file=" + file("ca.pem")})
        args.push_back(f);
    }
    const std::string log = log_path(i);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("etcd cluster: fork failed");
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    m.pid = pid;
  }

  bool tls_ = false;
  std::filesystem::path dir_;
  std::vector<Member> members_;
  std::string cluster_;
};

}  // namespace meridian::testing
