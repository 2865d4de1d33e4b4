// The TCP store's admission of a real node while a flood of idle, never-joining connections is
// held open (issue 19: "the store refuses a connection flood and still admits a real node within
// 1 s"). The store serves from a forked child (optionally with RLIMIT_NOFILE lowered); the flood
// comes from local addresses 127.0.x.y. Per case: the time to answer the flood, the real node's
// join latency (connect + handshake + one set, median and max over --joins), and the store's CPU
// seconds over one idle second with the flood held. Not a Google Benchmark program: one Markdown
// table row per case on stdout, for results/bench/store_flood.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/options.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"
#include "tests/gloo/connection_flood.h"

namespace {

using meridian::testing::flood_address;

constexpr char kSecret[] = "store-flood-bench";
struct Case {
  int connections;
  int addresses;
  rlim_t nofile;  // 0 = unchanged
};

double now_s() { return meridian::store_wire::now_s(); }

void run(const Case& k, int joins) {
  meridian::testing::ForkedStore store(kSecret, k.nofile, -1);
  if (store.port() == 0) throw meridian::Error("the store did not start");
  const double t0 = now_s();
  const auto fds = meridian::testing::open_idle_connections(
      store.port(), k.connections,
      [&](int i) { return flood_address(i, std::max(1, k.addresses)); });
  const auto settled = meridian::testing::settle_flood(fds, now_s() + 120);
  const double settle_s = now_s() - t0;
  std::vector<double> join_ms;
  for (int j = 0; j < joins; ++j) {
    meridian::TcpStoreClientOptions c;
    c.port = store.port();
    c.client_id = "real-node";
    c.identity = {kSecret, "1", ""};
    c.connect_timeout_s = 30.0;
    const double s = now_s();
    meridian::TcpStore node(c);
    node.set("k", std::to_string(j));
    join_ms.push_back((now_s() - s) * 1000.0);
  }
  std::sort(join_ms.begin(), join_ms.end());
  const double cpu0 = store.cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle_cpu_s = store.cpu_seconds() - cpu0;
  store.stop();
  for (int fd : fds) ::close(fd);
  std::printf("| %d | %d | %s | %.2f | %d / %d | %.2f | %.2f | %.3f |\n", k.connections,
              k.addresses, k.nofile ? std::to_string(k.nofile).c_str() : "20000 (unchanged)",
              settle_s, settled.greeted, settled.shed, join_ms[join_ms.size() / 2], join_ms.back(),
              idle_cpu_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int joins = 20;
  meridian::cli::Options o(
      "store_flood_bench", {"[--joins=N]"},
      "Prints one Markdown row per case: flood size and spread, descriptor limit, time to answer "
      "the flood, a real node's join latency (median, max over N joins), CPU seconds the store "
      "used over one idle second with the flood held.");
  o.integer("--joins", "N", "a real node's joins per case (default 20)", joins, 1, 100000);
  o.parse_or_exit(argc, argv);
  std::printf(
      "| idle connections | from addresses | RLIMIT_NOFILE | flood answered (s) | greeted / shed"
      " | join median (ms) | join max (ms) | store CPU s in 1 idle s |\n"
      "|---|---|---|---|---|---|---|---|\n");
  const Case cases[] = {{0, 1, 0},       {4000, 1, 0},   {4000, 200, 0},
                        {4000, 4000, 0}, {400, 20, 256}, {4000, 200, 256}};
  try {
    for (const Case& k : cases) run(k, joins);
  } catch (const meridian::Error& e) {
    std::cerr << "store_flood_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
