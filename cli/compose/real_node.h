// Real mode: one process's node of a real run, from its run file and command line — the thread
// runtime, the run's store (the embedded TCP store this node serves, a TCP store elsewhere, or an
// etcd cluster), the transport between nodes (Gloo, or NCCL where built) and the TorchWorker on
// the node's data shard. `meridian train FILE --node-id N` (cli/train/cmd_train_node.cc) runs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/backends/common/socket_process_probe.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/store.h"
#include "engine/core/transport.h"
#include "trainer/run_config.h"
#include "trainer/torch_worker.h"

namespace meridian::compose {

struct RealNodeArgs {
  std::string file;            // the run file, for messages
  std::int64_t node_id = -1;
  std::string store;           // HOST:PORT of the embedded TCP store another node serves
  int serve_port = -1;         // >= 0: serve the store in this process on this port (0: any)
  std::string bind;            // where the served store listens ("" = the run file's store.bind)
  std::string host = "127.0.0.1";  // the address this node's transport binds and advertises
  int shard = -1;              // data shard (-1 = (node_id - 1) % shards)
  int cuda_device = 0;         // NCCL: the GPU this node's communicator uses
  StoreIdentity identity;      // the run's secret, version and configuration hash
  std::function<void(const std::string&)> log;  // one line per event worth telling (stderr)
};

// "HOST:PORT" of --store; a ConfigError naming --store otherwise.
std::pair<std::string, std::uint16_t> split_host_port(const std::string& s);

// Builds everything in the constructor, in dependency order; ConfigError when the run file and
// the command line disagree (an etcd run given --store, no store at all, NCCL not built).
class RealNode {
 public:
  RealNode(const trainer::RunConfig& c, const RealNodeArgs& a);
  ~RealNode();
  RealNode(const RealNode&) = delete;
  RealNode& operator=(const RealNode&) = delete;

  Runtime& runtime() { return runtime_; }
  Store& store() { return *store_; }
  TransportFactory& transports() { return *transports_; }
  trainer::TorchWorker& worker() { return *worker_; }
  TcpStoreServer* server() { return server_.get(); }  // null unless this node serves the store
  // Where this process answers the others' process probes (MeshOptions::probe), on --host.
  ProcessProbe& probe() { return *probe_; }
  // Where the store this node serves listens ("" and 0 unless it serves one).
  const std::string& served_bind() const { return served_bind_; }
  std::uint16_t served_port() const { return served_port_; }
  int shard() const { return shard_; }
  // Made by a second step, once the caller has checked the store (a resume reads it first).
  void make_worker(const trainer::RunConfig& c);

 private:
  ThreadRuntime runtime_;
  std::unique_ptr<TcpStoreServer> server_;
  std::string served_bind_;
  std::uint16_t served_port_ = 0;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SocketProcessProbe> probe_;
  std::unique_ptr<TransportFactory> transports_;
  std::unique_ptr<trainer::TorchWorker> worker_;
  int shard_ = 0;
};

}  // namespace meridian::compose
