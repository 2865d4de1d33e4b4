// Multi-process all-reduce benchmark: Meridian's ring (fp32, int8) over the Gloo transport next
// to Gloo's own ring all-reduce (gloo::allreduce, RING), same processes, same sizes, one run.
// Not Google Benchmark: it needs one process per rank (forked here, or one per network
// namespace with --rank), so it reports like nccl-tests: time per all-reduce (slowest rank,
// median of the iterations), algbw = bytes / time, busbw = algbw * 2(n-1)/n, and a
// correctness column per size (relative L2 difference from Gloo's result; exit status 3 when
// fp32 differs beyond rounding or int8 by more than 5 %).
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/options.h"
#include "engine/backends/gloo/gloo_store_adapter.h"
#include "engine/backends/gloo/gloo_transport.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/codec/codec_isa.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"

namespace meridian::bench {
namespace {

constexpr char kSecret[] = "gloo-allreduce-bench";

struct Config {
  int ranks = 4;
  std::vector<std::size_t> sizes_mib = {1, 4, 16, 64, 256};
  int iters = 3;
  std::vector<std::string> methods = {"gloo", "fp32", "int8"};
  double timeout_s = 600;
  std::size_t max_chunk_kib = 4096;  // RingOptions::max_chunk_bytes
  std::size_t gloo_segment_kib = 0;  // 0: Gloo's default maxSegmentSize
  int rank = -1;                     // -1: fork every rank here
  std::string store_host = "127.0.0.1";
  std::uint16_t store_port = 0;
  std::string hostname = "127.0.0.1";
  bool serve_store = false;
  bool interleave = false;  // rounds run every method in turn (paired ratios)
  CodecIsa codec_isa = CodecIsa::kAvx512;         // cap (codec_isa.h)
  Crc32cKernel crc_kernel = Crc32cKernel::kFold;  // cap (crc32c.h)
  int connections = 1;                            // GlooOptions::connections_per_peer
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

// A method that runs Meridian's ring: its codec and whether it keeps the input restorable.
struct RingMethod {
  CodecId codec;
  bool restore_on_failure;
};

std::optional<RingMethod> ring_method(const std::string& m) {
  if (m == "fp32") return RingMethod{CodecId::kFp32, true};
  if (m == "int8") return RingMethod{CodecId::kInt8Prime, true};
  if (m == "fp32-norestore") return RingMethod{CodecId::kFp32, false};
  if (m == "int8-norestore") return RingMethod{CodecId::kInt8Prime, false};
  return std::nullopt;
}

// The one of `all` whose name (as the library prints it in the table) is `v`.
template <typename E>
E named_value(const std::string& flag, const std::string& v, std::initializer_list<E> all,
              const char* (*name)(E)) {
  std::string names;
  for (const E e : all) {
    if (v == name(e)) return e;
    names += (names.empty() ? "" : ", ") + std::string(name(e));
  }
  throw ConfigError(flag + ": expected one of " + names + ", got '" + v + "'");
}

Config parse(int argc, char** argv) {
  Config c;
  cli::Options o(
      "gloo_allreduce_bench",
      {"[--ranks N] [--sizes-mib 1,4,16,64,256] [--iters K] [--methods gloo,fp32,int8,xfer] "
       "[--timeout-s S] [--max-chunk-kib K] [--gloo-segment-kib K] [--interleave] [--codec-isa "
       "avx512|avx2|portable] [--crc fold|crc32|table] [--connections K]",
       "... --rank R --ranks N --store HOST:PORT --hostname ADDR [--serve-store]   one rank per "
       "process (network namespaces)"},
      "Times Gloo's ring all-reduce against Meridian's ring over the Gloo transport, per size. "
      "Forked mode (no --rank) runs N ranks on 127.0.0.1 with an ephemeral store port.");
  const auto sizes = [](const std::string& n, const std::string& v) {
    std::vector<std::size_t> out;
    for (const auto& s : split(v)) out.push_back(cli::opt::integer_in(n, s, 1, 1u << 20));
    return out;
  };
  const auto kib = [](std::size_t& into) {
    return [&into](const std::string& n, const std::string& v) {
      into = cli::opt::integer_in(n, v, 0, 1u << 30);
    };
  };
  o.integer("--ranks", "N", "ranks (default 4)", c.ranks, 2, 4096)
      .value("--sizes-mib", "S,S,...", "all-reduce sizes in MiB (default 1,4,16,64,256)",
             [&c, sizes](const std::string& n, const std::string& v) { c.sizes_mib = sizes(n, v); })
      .integer("--iters", "K", "timed rounds per size (default 3)", c.iters, 1, 1u << 20)
      .value("--methods", "M,M,...",
             "gloo, fp32, int8, xfer, and fp32-norestore, int8-norestore: the ring without the "
             "copy that restores the input after a failed round (RingOptions::restore_on_failure, "
             "as DiLoCo runs) (default gloo,fp32,int8)",
             [&c](const std::string&, const std::string& v) { c.methods = split(v); })
      .number("--timeout-s", "S", "each round's bound (default 600)", c.timeout_s)
      .value("--max-chunk-kib", "K", "the ring's chunk (default 4096)", kib(c.max_chunk_kib))
      .value("--gloo-segment-kib", "K", "Gloo's maxSegmentSize (default Gloo's own, 1024)",
             kib(c.gloo_segment_kib))
      .flag("--interleave",
            "each round runs every method once, in the order given (Gloo first), so the methods "
            "see the same machine; adds the median of per-round ratios",
            c.interleave)
      .value("--codec-isa", "avx512|avx2|portable",
             "cap the codec kernels (default: the best this CPU has), to time a CPU without "
             "AVX-512 on one that has it; the kernels that ran are printed above the table",
             [&c](const std::string& n, const std::string& v) {
               c.codec_isa = named_value(
                   n, v, {CodecIsa::kAvx512, CodecIsa::kAvx2, CodecIsa::kPortable}, codec_isa_name);
             })
      .value("--crc", "fold|crc32|table", "cap the CRC-32C kernel, likewise",
             [&c](const std::string& n, const std::string& v) {
               c.crc_kernel = named_value(
                   n, v, {Crc32cKernel::kFold, Crc32cKernel::kCrc32, Crc32cKernel::kTable},
                   crc32c_kernel_name);
             })
      .integer("--connections", "K",
               "TCP connections per peer of Meridian's transport (transport.connections_per_peer; "
               "default 1); Gloo's own ring always has one",
               c.connections, 1, 1024)
      .integer("--rank", "R", "this process's rank (one rank per process)", c.rank, 0, 4095)
      .value("--store", "HOST:PORT", "the store, with --rank",
             [&c](const std::string& n, const std::string& v) {
               const auto colon = v.rfind(':');
               if (colon == std::string::npos)
                 throw ConfigError(n + ": expected HOST:PORT, got '" + v + "'");
               c.store_host = v.substr(0, colon);
               c.store_port = cli::opt::port(n, v.substr(colon + 1));
             })
      .text("--hostname", "ADDR", "the address this rank binds and advertises", c.hostname)
      .flag("--serve-store", "rank 0 runs the store on 0.0.0.0:PORT itself", c.serve_store);
  o.parse_or_exit(argc, argv);
  for (const auto& m : c.methods) {
    if (m != "gloo" && m != "xfer" && !ring_method(m)) {
      throw ConfigError("unknown method '" + m +
                        "' (gloo, fp32, int8, fp32-norestore, int8-norestore, xfer)");
    }
  }
  return c;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Smooth pseudo-random values in [-1, 1), different per rank (gradient-like for the codecs).
std::vector<float> make_input(std::size_t count, int rank) {
  std::vector<float> v(count);
  std::uint32_t x = 12345u + 7919u * static_cast<std::uint32_t>(rank);
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return v;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& reference) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(reference[i]);
    num += d * d;
    den += double(reference[i]) * double(reference[i]);
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

// The ring's traffic without its computation: 2(n-1) steps, each sending one share to rank+1
// while receiving one from rank-1, in pieces of at most `max_piece_bytes`, over the Meridian
// transport, two exchanges in flight as in the ring (each with its own buffers). Separates the
// transport's cost from the ring's coding and reduction.
void transfer_only(Transport& t, std::vector<float>& buf, std::size_t max_piece_bytes,
                   double timeout_s) {
  const int n = t.size(), rank = t.rank();
  const std::size_t share = (buf.size() + n - 1) / n * sizeof(float);
  const std::size_t piece = std::max<std::size_t>(1, std::min(share, max_piece_bytes));
  std::vector<std::byte> out[2] = {std::vector<std::byte>(piece), std::vector<std::byte>(piece)};
  std::vector<std::byte> in[2] = {std::vector<std::byte>(piece), std::vector<std::byte>(piece)};
  std::unique_ptr<PendingExchange> pending[2];
  std::uint64_t serial = 0;
  for (int step = 0; step < 2 * (n - 1); ++step) {
    for (std::size_t off = 0; off < share; off += piece, ++serial) {
      const std::size_t len = std::min(piece, share - off);
      auto& slot = pending[serial % 2];
      if (slot) slot->wait(timeout_s);  // exchange serial - 2: its buffers are free again
      slot = t.start_exchange((rank + 1) % n, Payload::of(std::span(out[serial % 2]).first(len)),
                              (rank + n - 1) % n, std::span(in[serial % 2]).first(len),
                              make_tag(TagKind::kTest, serial));
    }
  }
  for (std::uint64_t s = serial; s < serial + 2; ++s)
    if (pending[s % 2]) pending[s % 2]->wait(timeout_s);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs one rank; rank 0 prints the table.
int run_rank(const Config& c, int rank, std::uint16_t store_port) {
  TcpStoreClientOptions so;
  so.host = c.store_host;
  so.port = store_port;
  so.client_id = "bench-rank" + std::to_string(rank);
  so.identity = {kSecret, "bench", ""};
  so.connect_timeout_s = 60;
  TcpStore store(so);
  auto barrier = [&](const std::string& name) {
    store.set(name + "/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < c.ranks; ++r) keys.push_back(name + "/" + std::to_string(r));
    store.wait(keys, c.timeout_s);
  };

  // Gloo's own context (for gloo::allreduce) and Meridian's transport, side by side.
  ::gloo::transport::tcp::attr attr;
  attr.hostname = c.hostname;
  auto device = ::gloo::transport::tcp::CreateDevice(attr);
  auto gloo_context = std::make_shared<::gloo::rendezvous::Context>(rank, c.ranks);
  gloo_context->setTimeout(std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000)));
  gloo_transport::StoreAdapter adapter(store, "bench/gloo-context/", c.timeout_s);
  gloo_context->connectFullMesh(adapter, device);

  gloo_transport::GlooOptions go;
  go.hostname = c.hostname;
  go.connections_per_peer = c.connections;
  gloo_transport::GlooTransportFactory factory(store, go);
  EpochSpec spec;
  spec.epoch = 1;
  spec.rank = rank;
  for (int r = 0; r < c.ranks; ++r) spec.members.push_back(r);
  spec.timeout_s = c.timeout_s;
  const double connect_start = now_s();
  auto transport = factory.connect(spec);
  const double connect_ms = (now_s() - connect_start) * 1000.0;
  ThreadRuntime runtime;
  RingWorkspace workspace;  // kept across rounds, as a trainer does (no per-round allocation)

  set_codec_isa_limit(c.codec_isa);
  set_crc32c_kernel_limit(c.crc_kernel);
  if (rank == 0) {
    std::printf(
        "Kernels: codec %s, CRC-32C %s; Meridian transport: %d connection(s) per peer, epoch "
        "connected in %.0f ms (rank 0)\n\n",
        codec_isa_name(codec_isa()), crc32c_kernel_name(crc32c_kernel()), c.connections,
        connect_ms);
    std::printf(
        "| MiB | method | time ms (median of %d) | algbw GB/s | busbw GB/s | vs Gloo fp32 | "
        "vs Gloo, paired rounds | rel. diff vs Gloo |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|\n",
        c.iters);
    std::fflush(stdout);
  }
  std::uint32_t gloo_tag = 1;
  int wrong = 0;  // sizes whose result is off: fp32 beyond rounding, int8 beyond 5 %
  for (const std::size_t mib : c.sizes_mib) {
    const std::size_t count = mib * (std::size_t{1} << 20) / sizeof(float);
    const std::vector<float> input = make_input(count, rank);
    std::vector<float> buf(count), gloo_result;
    std::map<std::string, std::vector<double>> times_ms;  // rank 0: per method, per round
    std::map<std::string, double> diff;                   // rank 0: relative diff vs Gloo
    // One round (it = -1: the warm-up, not reported) of `method`.
    auto round = [&](const std::string& method, int it) {
      buf = input;
      const std::string name = "b/" + std::to_string(mib) + "/" + method + "/" + std::to_string(it);
      barrier(name);
      const double t0 = now_s();
      if (method == "gloo") {
        ::gloo::AllreduceOptions opts(gloo_context);
        opts.setOutput(buf.data(), count);
        opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
            &::gloo::sum<float>));
        opts.setTag(gloo_tag++);
        if (c.gloo_segment_kib > 0) opts.setMaxSegmentSize(c.gloo_segment_kib * 1024);
        opts.setTimeout(std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000)));
        ::gloo::allreduce(opts);
      } else if (method == "xfer") {
        transfer_only(*transport, buf, c.max_chunk_kib * 1024, c.timeout_s);
      } else {
        const RingMethod rm = *ring_method(method);
        RingOptions o;
        o.restore_on_failure = rm.restore_on_failure;
        o.timeout_s = c.timeout_s;
        o.max_chunk_bytes = c.max_chunk_kib * 1024;
        o.outer_step = static_cast<std::uint64_t>(it + 1);
        o.bucket = static_cast<std::uint32_t>(mib);
        ring_all_reduce(*transport, runtime, *make_codec(rm.codec), ReduceBuffer::of(buf), o,
                        &workspace);
      }
      const double ms = (now_s() - t0) * 1000.0;
      store.set("t/" + name + "/" + std::to_string(rank), std::to_string(ms));
      if (rank != 0) return;
      if (it >= 0) {
        double slowest = 0;
        for (int r = 0; r < c.ranks; ++r) {
          slowest = std::max(
              slowest, std::stod(store.get("t/" + name + "/" + std::to_string(r), c.timeout_s)));
        }
        times_ms[method].push_back(slowest);
      }
      // Every run of Gloo's all-reduce gives the same sum (same input): keep the first one.
      if (method == "gloo" && gloo_result.empty()) gloo_result = buf;
      if (it == c.iters - 1 && !gloo_result.empty() && ring_method(method))
        diff[method] = relative_difference(buf, gloo_result);
    };
    if (c.interleave) {
      for (int it = -1; it < c.iters; ++it)
        for (const std::string& method : c.methods) round(method, it);
    } else {
      for (const std::string& method : c.methods)
        for (int it = -1; it < c.iters; ++it) round(method, it);
    }
    if (rank != 0) continue;
    const std::vector<double>& gloo_ms = times_ms["gloo"];
    for (const std::string& method : c.methods) {
      const std::vector<double>& t = times_ms[method];
      const double ms = median(t);
      const double bytes = double(count) * sizeof(float);
      const double algbw = bytes / (ms / 1000.0) / 1e9;
      const double busbw = algbw * 2.0 * (c.ranks - 1) / c.ranks;
      char vs[32] = "-", paired[32] = "-", rel[32] = "-";
      if (!gloo_ms.empty()) std::snprintf(vs, sizeof(vs), "%.3fx", median(gloo_ms) / ms);
      if (c.interleave && !gloo_ms.empty()) {
        std::vector<double> ratios;  // round by round: Gloo's time / this method's
        for (std::size_t i = 0; i < t.size(); ++i) ratios.push_back(gloo_ms[i] / t[i]);
        std::snprintf(paired, sizeof(paired), "%.3fx", median(ratios));
      }
      if (diff.count(method)) {
        wrong += diff[method] > (ring_method(method)->codec == CodecId::kFp32 ? 1e-5 : 0.05);
        std::snprintf(rel, sizeof(rel), "%.2e", diff[method]);
      }
      std::printf("| %zu | %s | %.1f | %.3f | %.3f | %s | %s | %s |\n", mib,
                  method == "gloo"   ? "Gloo ring fp32"
                  : method == "xfer" ? "Meridian transport only (ring traffic, no compute)"
                                     : ("Meridian ring " + method).c_str(),
                  ms, algbw, busbw, vs, paired, rel);
      std::fflush(stdout);
    }
  }
  barrier("end");
  // Rank 0 may serve the store (--serve-store): it leaves only after every other rank has seen
  // the barrier pass and said so, or they would read from a store that is gone.
  if (rank != 0) {
    store.set("left/" + std::to_string(rank), "1");
  } else {
    std::vector<std::string> left;
    for (int r = 1; r < c.ranks; ++r) left.push_back("left/" + std::to_string(r));
    store.wait(left, c.timeout_s);
  }
  if (wrong > 0)
    std::fprintf(stderr, "gloo_allreduce_bench: %d result(s) off (see the table)\n", wrong);
  return wrong > 0 ? 3 : 0;
}

int main_impl(int argc, char** argv) {
  const Config c = parse(argc, argv);
  if (c.rank >= 0) {
    std::unique_ptr<TcpStoreServer> server;
    if (c.rank == 0 && c.serve_store) {
      TcpStoreServerOptions o;
      o.bind_host = "0.0.0.0";
      o.port = c.store_port;
      o.identity = {kSecret, "bench", ""};
      server = std::make_unique<TcpStoreServer>(o);
      server->start();
    }
    return run_rank(c, c.rank, c.store_port);
  }
  TcpStoreServerOptions o;
  o.identity = {kSecret, "bench", ""};
  TcpStoreServer server(o);
  const std::uint16_t port = server.start();
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < c.ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = run_rank(c, r, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (const pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meridian::bench

int main(int argc, char** argv) {
  try {
    return meridian::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_bench: %s\n", e.what());
    return 2;
  }
}
