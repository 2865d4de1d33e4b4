// Real mode (real_node.h).
#include "cli/compose/real_node.h"

#include <algorithm>

#include "cli/args.h"
#include "engine/backends/gloo/gloo_transport.h"
#include "engine/backends/store_etcd/etcd_store.h"
#include "engine/core/error.h"
#ifdef MERIDIAN_HAVE_NCCL
#include "engine/backends/nccl/nccl_transport.h"
#endif

namespace meridian::compose {

std::pair<std::string, std::uint16_t> split_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw ConfigError("--store: expected HOST:PORT, got '" + s + "'");
  return {s.substr(0, colon), static_cast<std::uint16_t>(
                                  cli::opt::integer_in("--store port", s.substr(colon + 1), 1, 65535))};
}

RealNode::RealNode(const trainer::RunConfig& c, const RealNodeArgs& a) {
  if (c.store.empty() && a.store.empty() && a.serve_port < 0)
    throw ConfigError("give one of --store HOST:PORT and --serve-store PORT (or `store: {address: "
                      "etcd://...}` in " + a.file + ")");
  if (!c.store.empty() && (!a.store.empty() || a.serve_port >= 0))
    throw ConfigError(a.file + ": store.address: the run uses etcd; --store and --serve-store are "
                               "for the embedded TCP store");
  const double io_timeout_s = std::max(30.0, c.diloco.mesh.dead_after_s);
  const std::string client_id = "node-" + std::to_string(a.node_id);
  if (!c.store.empty()) {
    EtcdStoreOptions eo = parse_etcd_url(c.store, a.file + ": store.address");
    eo.client_id = client_id;
    eo.identity = a.identity;
    eo.connect_timeout_s = 30.0;
    eo.io_timeout_s = io_timeout_s;
    eo.log = a.log;  // quorum loss, while it lasts
    store_ = std::make_unique<EtcdStore>(eo);  // a refused run record throws ConfigError
  } else {
    std::string host;
    std::uint16_t port = 0;
    if (a.serve_port >= 0) {
      const std::string& bind = served_bind_ = a.bind.empty() ? c.store_bind : a.bind;
      TcpStoreServerOptions so;
      so.bind_host = bind;
      so.port = static_cast<std::uint16_t>(a.serve_port);
      so.identity = a.identity;
      so.log = a.log;
      server_ = std::make_unique<TcpStoreServer>(so);
      port = served_port_ = server_->start();
      host = (bind == "0.0.0.0" || bind == "::") ? "127.0.0.1" : bind;
    } else {
      std::tie(host, port) = split_host_port(a.store);
    }
    TcpStoreClientOptions co;
    co.host = host;
    co.port = port;
    co.client_id = client_id;
    co.identity = a.identity;
    co.connect_timeout_s = 30.0;
    // Unreachable for a lease's length, the store has ended every lease: the node is out.
    co.reconnect_timeout_s = std::max(2.0, c.diloco.mesh.dead_after_s);
    co.io_timeout_s = io_timeout_s;
    if (a.log)  // not half a minute of silence before "Connection refused" (issue 34)
      co.on_wait = [log = a.log, id = a.node_id](const std::string& line) {
        log("node " + std::to_string(id) + ": " + line);
      };
    store_ = std::make_unique<TcpStore>(co);  // a refusal (secret, version, configuration) throws
  }
  if (c.transport.kind == "nccl" && c.transport.connections_per_peer != 1) {
    throw ConfigError(a.file + ": transport.connections_per_peer: " +
                      std::to_string(c.transport.connections_per_peer) +
                      " is the Gloo transport's; NCCL opens its own sockets per peer "
                      "(NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD): remove the key or use "
                      "transport.kind: gloo");
  }
  if (c.transport.kind == "nccl") {
#ifdef MERIDIAN_HAVE_NCCL
    nccl_transport::NcclOptions no;
    no.cuda_device = a.cuda_device;
    transports_ = std::make_unique<nccl_transport::NcclTransportFactory>(*store_, no);
#else
    throw ConfigError(a.file + ": transport.kind: nccl, but this meridian was built without NCCL "
                               "(CUDA and nccl.h not found at configure time: cmake "
                               "-DMERIDIAN_WITH_NCCL=ON, ARCHITECTURE.md \"GPU machines\")");
#endif
  } else {
    gloo_transport::GlooOptions go;
    go.hostname = a.host;
    go.secret = a.identity.secret;
    go.connections_per_peer = c.transport.connections_per_peer;
    transports_ = std::make_unique<gloo_transport::GlooTransportFactory>(*store_, go);
  }
  probe_ = std::make_unique<SocketProcessProbe>(a.host);
  shard_ = a.shard >= 0 ? a.shard : static_cast<int>((a.node_id - 1) % c.shards);
  if (shard_ >= c.shards) throw ConfigError("--shard: expected a value below data.shards");
}

void RealNode::make_worker(const trainer::RunConfig& c) {
  trainer::TorchWorkerOptions wo;
  wo.config = c.trainer;
  wo.data = c.data;
  wo.world = c.shards;
  wo.rank = shard_;
  wo.seed = c.seed;
  wo.validation_sequences = c.validation_sequences;
  worker_ = std::make_unique<trainer::TorchWorker>(wo);
}

RealNode::~RealNode() = default;

}  // namespace meridian::compose
