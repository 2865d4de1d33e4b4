// detection_bench: how long the membership protocol takes to see a crashed node, against the
// configured dead_after_s, with real clocks and a real store on loopback (issue 23: "eviction
// reflects silence, not the store's queueing"). N ElasticMesh members as threads of one process,
// each with its own client of the embedded TCP store (as separate processes would have; no
// training, no all-reduce: the membership protocol only). After round 0 forms, K members crash
// one at a time at random moments: their store connection is cut (CuttableStore), so their
// keepalives stop without a deathrattle, as when a process is SIGKILLed. Detection = the
// coordinator's `silent` event for that node - the moment of the cut. The simulator's
// counterpart is scripts/studies/intellect1-scale/detection.sh.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/options.h"
#include "engine/backends/faults/cuttable_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/mesh/elastic_mesh.h"

namespace meridian {
namespace {

const StoreIdentity kIdentity{"bench-secret", "bench", "bench-config"};

// Collects the `silent` events with their times; wakes the waiter on each.
class SilentSink final : public EventSink {
 public:
  void emit(const Event& e) override {
    if (e.type != "silent") return;
    const std::string f = e.fields.str();
    const auto at = f.find("\"node_silent\":");
    if (at == std::string::npos) return;
    const std::int64_t id = std::stoll(f.substr(at + 14));
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.count(id)) seen_[id] = e.t_s;
    cv_.notify_all();
  }
  // The time `id` was reported silent, or -1 after `timeout_s`.
  double wait_for(std::int64_t id, double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return seen_.count(id); });
    return seen_.count(id) ? seen_[id] : -1;
  }
  std::map<std::int64_t, double> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, double> seen_;
};

struct Result {
  int nodes = 0;
  std::vector<double> latency_s;
  int missed = 0;  // crashes never reported within 3 x dead_after_s
  int false_silent = 0;
  double join_s = 0;
};

Result measure(int n, int crashes, double beat_s, double dead_s, std::mt19937_64& rng) {
  TcpStoreServerOptions so;
  so.identity = kIdentity;
  TcpStoreServer server(so);
  const std::uint16_t port = server.start();
  ThreadRuntime runtime;
  SilentSink sink;
  MeshOptions o;
  o.initial_world = n;
  o.heartbeat_interval_s = beat_s;
  o.dead_after_s = dead_s;
  o.admission_timeout_s = o.round_timeout_s = 600.0;
  struct Member {
    std::unique_ptr<Store> client;
    std::unique_ptr<CuttableStore> store;
    std::unique_ptr<ElasticMesh> mesh;
  };
  std::vector<Member> members(n);
  std::atomic<int> admitted{0};
  const double t0 = runtime.now_s();
  std::vector<std::thread> starters;
  for (int i = 0; i < n; ++i) {
    starters.emplace_back([&, i] {
      TcpStoreClientOptions co;
      co.port = port;
      co.client_id = "node-" + std::to_string(i + 1);
      co.identity = kIdentity;
      co.connect_timeout_s = 60.0;
      Member& m = members[i];
      m.client = std::make_unique<TcpStore>(co);
      m.store = std::make_unique<CuttableStore>(*m.client, "crashed by the bench");
      m.mesh = std::make_unique<ElasticMesh>(*m.store, runtime, sink, o);
      m.mesh->start(true, i + 1);
      m.mesh->wait_admitted();
      ++admitted;
    });
  }
  for (auto& t : starters) t.join();
  Result r;
  r.nodes = n;
  r.join_s = runtime.now_s() - t0;
  // The coordinator (the leader key's holder) is not crashed: its own crash is a hand-over, a
  // different measurement.
  std::vector<int> victims;
  for (int i = 0; i < n; ++i)
    if (!members[i].mesh->is_leader()) victims.push_back(i);
  std::shuffle(victims.begin(), victims.end(), rng);
  victims.resize(std::min<std::size_t>(victims.size(), crashes));
  std::uniform_real_distribution<double> pause(0.0, 2 * beat_s);
  for (const int v : victims) {
    std::this_thread::sleep_for(std::chrono::duration<double>(pause(rng)));
    const double cut_at = runtime.now_s();
    members[v].store->cut();
    const double seen = sink.wait_for(v + 1, 3 * dead_s);
    if (seen < 0) {
      ++r.missed;
    } else {
      r.latency_s.push_back(seen - cut_at);
    }
    std::cerr << "detection_bench: " << n << " nodes: node " << v + 1 << " silent after "
              << (seen < 0 ? -1 : seen - cut_at) << " s" << std::endl;
  }
  const std::map<std::int64_t, double> seen = sink.seen();
  for (const auto& [id, t] : seen)
    if (std::find(victims.begin(), victims.end(), id - 1) == victims.end()) ++r.false_silent;
  for (Member& m : members) m.mesh->stop();
  members.clear();
  return r;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = text.find(',', at);
    const std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const int v = static_cast<int>(cli::opt::integer_in("--nodes", part, 2, 100000));
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  std::vector<int> counts{14, 56, 112, 256};
  int crashes = 8;
  double beat_s = 2.0, dead_s = 6.0;
  std::uint64_t seed = 1;
  cli::Options o(
      "detection_bench",
      {"[--nodes=14,56,112,256] [--crashes=K] [--heartbeat=S] [--dead-after=S] [--seed=N]"},
      "Prints a Markdown table on stdout: per member count, the detection latency (cut -> the "
      "coordinator's `silent` event) against dead_after_s: min, median, max, and false "
      "detections (a live member reported silent). Progress on stderr.");
  o.value("--nodes", "N,N,...", "member counts to measure (default 14,56,112,256)",
          [&counts](const std::string&, const std::string& v) { counts = parse_counts(v); })
      .integer("--crashes", "K", "crashes per count, one at a time (default 8)", crashes, 1, 100000)
      .number("--heartbeat", "S", "keepalive interval in seconds (default 2, the engine's)", beat_s)
      .number("--dead-after", "S", "lease time to live in seconds (default 6, the engine's)",
              dead_s)
      .integer("--seed", "N", "the crash moments' seed (default 1)", seed, 0, ~std::uint64_t{0});
  o.parse_or_exit(argc, argv);
  if (crashes < 1 || !(beat_s > 0) || !(dead_s > beat_s)) {
    std::cerr << "detection_bench: need --crashes >= 1 and --dead-after > --heartbeat > 0\n";
    return 2;
  }
  std::mt19937_64 rng(seed);
  std::printf("| members | crashes | detected after: min | median | p90 | max | dead_after_s | "
              "missed | live members reported silent | all admitted after |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const int n : counts) {
    const Result r = measure(n, crashes, beat_s, dead_s, rng);
    std::printf("| %d | %zu | %.2f s | %.2f s | %.2f s | %.2f s | %.1f s | %d | %d | %.1f s |\n",
                r.nodes, r.latency_s.size() + r.missed, quantile(r.latency_s, 0),
                quantile(r.latency_s, 0.5), quantile(r.latency_s, 0.9), quantile(r.latency_s, 1),
                dead_s, r.missed, r.false_silent, r.join_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace meridian

int main(int argc, char** argv) { return meridian::run(argc, argv); }
