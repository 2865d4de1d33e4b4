// The Gloo transport: meridian::Transport over Gloo's tcp transport with unbound buffers, one
// gloo::Context per membership epoch, rendezvous through a meridian::Store. Not a collective
// library: Meridian's algorithms run on top; Gloo's own collectives are used only by bench/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/store.h"
#include "engine/core/transport.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace meridian::gloo_transport {

struct GlooOptions {
  // Address this node's Gloo device binds to and advertises to its peers (a name or an IP).
  // Default: loopback, for tests and single-machine runs; a real run gives the node's address.
  std::string hostname = "127.0.0.1";
  // Alternatively the network interface to bind (e.g. "eth0"); takes precedence when set.
  std::string interface;
  // Prefix of this transport's rendezvous keys in the Store; each epoch adds its own part.
  std::string store_prefix = "gloo";
  // The run's shared secret. Every connection of an epoch proves it (an HMAC bound to the
  // epoch, its members and both ranks) before the epoch is used; a connection that does not
  // within the epoch's connect bound fails the epoch (PeerLostError). Empty: connections are not
  // authenticated (tests of the transport alone; every real run has a secret).
  std::string secret;
  // TCP connections to each peer (`transport.connections_per_peer`): K full meshes, one Gloo
  // context each. An exchange's message of at least 2 × min_stripe_bytes is cut into up to K
  // consecutive stripes, each on its own connection, so that one ring hop is not bounded by one
  // connection's window / RTT and loss (engine/backends/gloo/README.md, "Connections per peer").
  // A lost connection is a lost peer, as with one. send/recv (the credit protocol) use the first.
  int connections_per_peer = 1;
  std::size_t min_stripe_bytes = std::size_t{64} << 10;
};

// Builds one GlooTransport per epoch. Every member of an epoch calls connect() with the same
// EpochSpec; they find each other through `store` under <prefix>/e<epoch>/<members hash>/, so a
// retried epoch number with another membership never meets stale addresses.
//
// Process-wide effect: the constructor ignores SIGPIPE (Gloo's tcp transport writes with writev,
// which would otherwise kill the process when a peer dies mid-transfer).
// Thread-safety: connect() may be called from several threads (one epoch each).
class GlooTransportFactory final : public TransportFactory {
 public:
  // `store` must outlive the factory and every transport it builds.
  GlooTransportFactory(Store& store, GlooOptions options = {});
  ~GlooTransportFactory() override;
  // Waits for every member's addresses (up to spec.timeout_s, given up when spec.abandon
  // answers), then connects and authenticates every pair within spec.connect_timeout_s, still
  // asking spec.abandon every spec.poll_s: a member that died after it arrived is given up on
  // as soon as the mesh says so, not at the connect bound. Throws TimeoutError when the members
  // do not all arrive in time, PeerLostError when a connection fails, a peer does not
  // authenticate, or the wait was abandoned, ConfigError when the device cannot be created.
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override;

 private:
  // Every pair proves the run's secret to the other within `timeout_s` (options_.secret).
  void authenticate(::gloo::Context& context, const EpochSpec& spec, const std::string& prefix,
                    double timeout_s) const;
  // One full mesh of connections for `spec`, rendezvous under `prefix`.
  std::shared_ptr<::gloo::Context> connect_mesh(const EpochSpec& spec, const std::string& prefix,
                                                double connect_s);

  Store& store_;
  GlooOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  // Connects given up on while Gloo still waited inside them (it cannot be interrupted): each
  // ends by itself within its connect bound; the next connect() joins those that ended, the
  // destructor waits for the rest.
  struct Straggler {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> ended;
  };
  void join_stragglers(bool all);
  std::mutex stragglers_mu_;
  std::vector<Straggler> stragglers_;
};

}  // namespace meridian::gloo_transport
