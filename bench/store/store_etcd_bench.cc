// store_etcd_bench: what the etcd store costs the membership protocol next to the embedded TCP
// store, on loopback, in one run: three ElasticMesh nodes (threads, each with its own store
// client, as separate processes would have) join, run protocol-only rounds (ready barrier,
// report, next record: no training, no all-reduce), and one leaves gracefully; before that,
// single calls (a set, a read, a watch woken by another client's set). etcd is a
// 3-member cluster the program starts itself (tests/store/etcd_cluster.h). Not a model of WAN
// latency (netsim's network.store does that) and not a throughput test of etcd.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/options.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/backends/store_etcd/etcd_store.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/mesh/elastic_mesh.h"
#include "tests/store/etcd_cluster.h"

namespace meridian {
namespace {

constexpr int kNodes = 3;
const StoreIdentity kIdentity{"bench-secret", "bench", "bench-config"};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Sample {
  double set_s = 0;           // one set
  double read_s = 0;          // one try_get
  double wake_s = 0;          // a set by one client -> a watch of another client returns
  double join_s = 0;          // slowest node: store client created -> admitted to round 0
  double round_s = 0;         // node 1: one stable round (ready, report, next record)
  double epoch_change_s = 0;  // node 1: the round in which node 3 leaves -> the next record
};

// Single calls, on two clients of the store (before the nodes use it).
void time_calls(const std::function<std::unique_ptr<Store>(int)>& make_store, Sample& s) {
  constexpr int kCalls = 50;
  std::unique_ptr<Store> a = make_store(10), b = make_store(11);
  double t0 = now_s();
  for (int k = 0; k < kCalls; ++k) a->set("calls/x", std::to_string(k));
  s.set_s = (now_s() - t0) / kCalls;
  t0 = now_s();
  for (int k = 0; k < kCalls; ++k) a->try_get("calls/x");
  s.read_s = (now_s() - t0) / kCalls;
  double wake_s = 0;
  for (int k = 0; k < 10; ++k) {
    const std::uint64_t r = b->revision();
    double set_at = 0;
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the watch is waiting
      set_at = now_s();
      a->set("calls/w", std::to_string(k));
    });
    b->watch({"calls/w"}, r, 10.0);
    const double woke = now_s();
    writer.join();
    wake_s += woke - set_at;
  }
  s.wake_s = wake_s / 10;
}

// One repetition: three nodes on stores made by `make_store(i)`.
Sample run_once(const std::function<std::unique_ptr<Store>(int)>& make_store, int rounds) {
  ThreadRuntime runtime;
  NullEventSink events;
  MeshOptions o;
  o.initial_world = kNodes;
  o.heartbeat_interval_s = 0.5;
  o.dead_after_s = 3.0;
  o.admission_timeout_s = o.round_timeout_s = 60.0;
  std::barrier sync(kNodes);
  Sample s;
  std::vector<double> join_s(kNodes);
  time_calls(make_store, s);
  std::vector<std::thread> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.emplace_back([&, i] {
      const double t0 = now_s();
      std::unique_ptr<Store> store = make_store(i);
      ElasticMesh mesh(*store, runtime, events, o);
      mesh.start(true, i + 1);
      RoundRecord r = mesh.wait_admitted();
      join_s[i] = now_s() - t0;
      sync.arrive_and_wait();
      const double r0 = now_s();
      for (int k = 0; k < rounds; ++k) {
        mesh.ready_barrier(r);
        mesh.report(r, true);
        r = mesh.next_round(r);
      }
      if (i == 0) s.round_s = (now_s() - r0) / rounds;
      sync.arrive_and_wait();
      const double c0 = now_s();
      const bool ready = mesh.ready_barrier(r);
      if (i == kNodes - 1) {
        mesh.announce_leave();
        mesh.report(r, ready);
        mesh.leave();
        return;
      }
      mesh.report(r, ready);
      const RoundRecord next = mesh.next_round(r);
      if (i == 0) s.epoch_change_s = now_s() - c0;
      if (next.members.size() != kNodes - 1)
        throw CheckError("bench: the leave did not change the members");
      mesh.leave();
    });
  }
  for (auto& t : nodes) t.join();
  for (const double j : join_s) s.join_s = std::max(s.join_s, j);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(int reps, int rounds) {
  std::map<std::string, std::vector<Sample>> samples;
  {
    TcpStoreServerOptions so;
    so.identity = kIdentity;
    for (int rep = 0; rep < reps; ++rep) {
      TcpStoreServer server(so);  // a fresh store per repetition
      const std::uint16_t port = server.start();
      samples["tcp"].push_back(run_once(
          [&](int i) {
            TcpStoreClientOptions co;
            co.port = port;
            co.client_id = "node-" + std::to_string(i + 1);
            co.identity = kIdentity;
            return std::make_unique<TcpStore>(co);
          },
          rounds));
    }
  }
  if (!testing::EtcdCluster::available()) {
    std::cerr << "store_etcd_bench: etcd is not installed (apt-get install etcd-server "
                 "etcd-client)"
              << std::endl;
    return 1;
  }
  testing::EtcdCluster cluster(3);
  for (int rep = 0; rep < reps; ++rep) {
    samples["etcd"].push_back(run_once(
        [&](int i) {
          EtcdStoreOptions eo = parse_etcd_url(cluster.url("bench-" + std::to_string(rep)), "bench");
          eo.client_id = "node-" + std::to_string(i + 1);
          eo.identity = kIdentity;
          return std::make_unique<EtcdStore>(eo);
        },
        rounds));
  }
  const auto stat = [&](const std::string& store, double Sample::*field) {
    std::vector<double> v;
    for (const Sample& s : samples[store]) v.push_back(s.*field);
    return median(v);
  };
  std::printf("| 3 nodes, loopback (median of %d; %d rounds each) | TCP store | etcd (3 members) | etcd / TCP |\n",
              reps, rounds);
  std::printf("|---|---:|---:|---:|\n");
  for (const auto& [name, field] : std::vector<std::pair<const char*, double Sample::*>>{
           {"one set", &Sample::set_s},
           {"one try_get (etcd: a linearizable read)", &Sample::read_s},
           {"a set -> another client's watch returns", &Sample::wake_s},
           {"join: client created -> admitted to round 0", &Sample::join_s},
           {"per round: ready barrier + report + next record", &Sample::round_s},
           {"epoch change: the round a node leaves in -> next record", &Sample::epoch_change_s}}) {
    const double tcp = stat("tcp", field), etcd = stat("etcd", field);
    std::printf("| %s | %.2f ms | %.2f ms | %.1f |\n", name, tcp * 1e3, etcd * 1e3, etcd / tcp);
  }
  return 0;
}

}  // namespace
}  // namespace meridian

int main(int argc, char** argv) {
  int reps = 5, rounds = 20;
  meridian::cli::Options o(
      "store_etcd_bench", {"[--reps=N] [--rounds=R]"},
      "Prints a Markdown table on stdout: single calls, and the join, per-round and epoch-change "
      "times of three nodes on the embedded TCP store and on a 3-member etcd cluster (loopback), "
      "and their ratio.");
  o.integer("--reps", "N", "repetitions per store (default 5; medians are reported)", reps, 1,
            100000)
      .integer("--rounds", "R", "protocol rounds timed per repetition (default 20)", rounds, 1,
               100000);
  o.parse_or_exit(argc, argv);
  try {
    return meridian::run(reps, rounds);
  } catch (const std::exception& e) {
    std::cerr << "store_etcd_bench: " << e.what() << std::endl;
    return 1;
  }
}
