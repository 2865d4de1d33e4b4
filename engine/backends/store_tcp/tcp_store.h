// The TCP store: a key-value server for the rendezvous and membership of a real run, and the
// client that implements meridian::Store over it. POSIX sockets only. Not a database: state is
// in memory and lives as long as the server; not encrypted: the shared secret authenticates
// nodes (challenge-response HMAC-SHA256) but traffic is readable on the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/common/store_identity.h"  // StoreIdentity, read_secret_file
#include "engine/core/store.h"

namespace meridian {

// Bounds checked on every message before anything sized by it is allocated. A peer whose
// message exceeds them is cut off; the server keeps serving everyone else.
struct StoreLimits {
  std::uint32_t max_frame_bytes = 16u << 20;  // one request or reply, all fields included
  std::uint32_t max_key_bytes = 4096;
  std::uint32_t max_keys = 65536;               // keys in one wait request or list reply
  std::uint64_t max_stored_bytes = 1ull << 30;  // keys + values held by the server
};

// Bounds on connections that have not joined yet (proved the secret), so that a flood of
// connections, idle or trickling bytes (slowloris), can neither exhaust the server's descriptors
// nor lock real nodes out. A newcomer beyond a bound always makes room by closing an unjoined
// connection in that bound's scope, whatever it has sent: first one stalled mid-frame (a real
// node sends its whole join frame in one write right after the greeting, so it is never seen so),
// else the oldest idle one (a real node is idle for a round trip only, as the newest). A client
// whose connection is shed before its welcome dials again; the handshake deadline
// (TcpStoreServerOptions::handshake_timeout_s) closes whatever has not joined by then.
struct StoreAdmissionLimits {
  std::size_t max_unjoined = 256;             // over all addresses
  std::size_t max_unjoined_per_address = 32;  // from one IP address (so one address cannot
                                              // shed the unjoined connections of the others)
  std::size_t max_accepts_per_wakeup = 64;    // accepted before the loop serves the others
  double log_lines_per_s = 5.0;  // refusal/cut-off lines; beyond it they are counted, and the
                                 // count is logged with the next line that gets through
};

struct TcpStoreServerOptions {
  std::string bind_host = "127.0.0.1";  // "0.0.0.0" (or "::") to serve every interface
  std::uint16_t port = 0;               // 0 = an ephemeral port, reported by start()
  StoreIdentity identity;
  double handshake_timeout_s = 10.0;  // a connection that has not joined by then is closed
  StoreLimits limits;
  StoreAdmissionLimits admission;
  // Receives one line per notable event (joins, refusals, cut-off peers; lines about peers
  // that never joined are rate-limited by admission.log_lines_per_s). May be empty.
  std::function<void(const std::string&)> log;
};

// Serves the store from one background thread (a poll() loop; waits are parked, not threads).
// Leases end on the server's monotonic clock (the poll loop wakes for the next deadline).
// Thread-safety: start/stop/port/stats may be called from any one thread.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();  // stops
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // Binds and listens, starts serving; returns the bound port. Throws ConfigError when the
  // address cannot be bound (naming it and the OS error).
  std::uint16_t start();
  // Closes every connection and joins the serving thread. Idempotent.
  void stop();
  std::uint16_t port() const;

  struct Stats {
    std::uint64_t joined = 0;    // connections that proved the secret and were accepted
    std::uint64_t refused = 0;   // wrong secret, version or configuration
    std::uint64_t cut_off = 0;   // protocol violations: bad sizes, garbage, handshake timeout
    std::uint64_t requests = 0;  // requests served
    std::uint64_t shed = 0;      // unjoined connections closed or refused by the admission
                                 // limits, or accepted and closed when descriptors ran out
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string client_id;  // names this node in the server's log
  StoreIdentity identity;
  double connect_timeout_s = 10.0;  // connecting (retried while refused) and joining
  // The same bound for the connections dialled after the join at construction (empty: the
  // connect_timeout_s). A store that was up and now refuses for longer has ended (its state with
  // it): `meridian train` gives up after a liveness lease rather than a start-up's patience.
  std::optional<double> reconnect_timeout_s;
  double io_timeout_s = 30.0;       // a request that does not wait (waits add their own timeout)
  StoreLimits limits;
  // Told, as a line for a person, while connecting keeps failing (2 s in, then every 10 s);
  // none: silent until the deadline's error.
  std::function<void(const std::string&)> on_wait;
};

// meridian::Store over TCP. Each concurrent caller uses its own connection (a small pool, one
// join per connection), so a long wait() never blocks a heartbeat. Each lease this client grants
// is held on a connection of its own, which carries its keepalives and revoke: the server ends
// the lease when that connection closes, so a holder that exits or is killed is dead to the
// others at once instead of after its time to live (a live holder whose connection breaks gets
// -1 from its next keepalive and takes a new lease, as after a starved heartbeat). Errors:
// ConfigError when refused (the server's reason in the message), PeerLostError when the server is
// unreachable or closes, TimeoutError when a wait runs out, ProtocolError for a malformed reply,
// Error when the server declines a request (store full, add on a non-integer).
class TcpStore final : public Store {
 public:
  // Connects and joins once, so that a refusal surfaces at construction.
  explicit TcpStore(TcpStoreClientOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, double timeout_s) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, double timeout_s) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::optional<std::string> compare_set(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) override;
  bool erase(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  std::vector<std::pair<std::string, std::string>> read_prefix(const std::string& prefix) override;
  std::int64_t lease_grant(double ttl_s) override;
  double keepalive(std::int64_t lease, double interval_s) override;
  bool lease_revoke(std::int64_t lease) override;
  std::optional<std::string> compare_set_leased(const std::string& key,
                                                const std::optional<std::string>& expected,
                                                const std::string& desired,
                                                std::int64_t lease) override;
  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double timeout_s) override;

 private:
  int take_connection();
  // The join handshake on a fresh connection (throws; the caller closes `fd`).
  void join(int fd, double deadline_s);
  void give_back(int fd);
  // COMPARE_SET, or COMPARE_SET_LEASED when `lease` is given.
  std::optional<std::string> compare_set_request(const std::string& key,
                                                 const std::optional<std::string>& expected,
                                                 const std::string& desired,
                                                 std::optional<std::int64_t> lease);
  // Sends one request and returns the reply body (status byte first) or throws.
  std::string round_trip(const std::string& request, double wait_s);
  // The same on connection `fd`, which the caller owns (and closes when this throws).
  std::string exchange(int fd, const std::string& request, double wait_s);
  // The connection lease `lease` is held on, taken out of held_ (-1 when not held here).
  int release_held(std::int64_t lease);

  TcpStoreClientOptions options_;
  bool joined_ = false;  // the join at construction succeeded (set before any other call)
  std::mutex mutex_;     // guards idle_ and held_
  std::vector<int> idle_;
  std::map<std::int64_t, int> held_;  // lease -> the connection it is held on
};

}  // namespace meridian
