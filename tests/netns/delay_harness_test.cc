// The delay harness end to end (label `netns`): two namespaces at 100 Mbit/s joined by
// `meridian netdelay` with a 40 ms RTT; `meridian netprobe` measures round trips and moves 4 MB.
// Skipped, saying why, where namespaces cannot be made (not root, no iproute2, no netns).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

const std::string kNetns = std::string(MERIDIAN_SOURCE_DIR) + "/scripts/netns/netns.sh";
const std::string kMeridian = MERIDIAN_BIN;

struct Result {
  int status = -1;
  std::string out;
};

Result run(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return r;
}

// "k=v k=v ..." -> map
std::map<std::string, double> parse_fields(const std::string& line) {
  std::map<std::string, double> out;
  std::istringstream in(line);
  std::string kv;
  while (in >> kv) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) out[kv.substr(0, eq)] = std::stod(kv.substr(eq + 1));
  }
  return out;
}

class Harness {  // `netns.sh up` in the constructor, `down` (always) in the destructor
 public:
  Harness(const std::string& prefix, int nodes, int rate_mbit, int rtt_ms)
      : prefix_(prefix), nodes_(nodes) {
    up_ =
        run("MERIDIAN=" + kMeridian + " " + kNetns + " up " + prefix + " " + std::to_string(nodes) +
            " " + std::to_string(rate_mbit) + " " + std::to_string(rtt_ms));
  }
  ~Harness() { run(kNetns + " down " + prefix_ + " " + std::to_string(nodes_)); }
  const Result& up() const { return up_; }
  std::string ip(int i) const {
    return run(kNetns + " ip " + prefix_ + " " + std::to_string(i)).out;
  }

 private:
  std::string prefix_;
  int nodes_;
  Result up_;
};

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST(DelayHarness, RoundTripIsTheConfiguredDelayAndDataArrivesWhole) {
  const Result check = run(kNetns + " check");
  if (check.status == 77) GTEST_SKIP() << "SKIPPED: " << trim(check.out);
  ASSERT_EQ(check.status, 0) << check.out;

  const std::string prefix = "mdt" + std::to_string(getpid() % 100000);
  Harness h(prefix, 2, 100, 40);
  ASSERT_EQ(h.up().status, 0) << h.up().out;
  const std::string ip1 = trim(h.ip(1));
  const fs::path port_file = fs::temp_directory_path() / ("meridian-netprobe-" + prefix + ".port");
  fs::remove(port_file);
  const Result server =
      run("ip netns exec " + prefix + "-1 " + kMeridian + " netprobe serve --bind " + ip1 +
          " --port 0 --port-file " + port_file.string() + " --connections 2 >/dev/null 2>&1 &");
  ASSERT_EQ(server.status, 0) << server.out;
  // The server writes its port once listening (bounded wait, generous for a loaded machine;
  // `down` stops the server if the test fails).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (!fs::exists(port_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(port_file)) << "netprobe serve did not start within 90 s";
  std::string port;
  std::ifstream(port_file) >> port;
  fs::remove(port_file);

  const Result probe = run("ip netns exec " + prefix + "-0 " + kMeridian + " netprobe " + ip1 +
                           ":" + port + " --pings 10 --bytes 4000000");
  ASSERT_EQ(probe.status, 0) << probe.out;
  const auto f = parse_fields(probe.out);
  ASSERT_EQ(f.count("rtt_ms_min"), 1u) << probe.out;
  // A frame cannot come back before two one-way delays of 20 ms (exact lower bounds); the upper
  // bounds only catch a stuck queue, not slowness.
  EXPECT_GE(f.at("rtt_ms_min"), 40.0) << probe.out;
  EXPECT_GE(f.at("connect_ms"), 40.0) << probe.out;
  EXPECT_LT(f.at("rtt_ms_min"), 1000.0) << probe.out;
  EXPECT_EQ(f.at("bytes"), 4000000.0) << probe.out;
  // tbf at 100 Mbit/s with a 128 kB burst cannot carry 4 MB much faster than 100 Mbit/s.
  EXPECT_LT(f.at("mbit_per_s"), 110.0) << probe.out;
  std::cout << probe.out;
}

}  // namespace
