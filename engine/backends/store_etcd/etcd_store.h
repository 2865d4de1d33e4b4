// EtcdStore: meridian::Store on an etcd 3.4 cluster, over etcd's v3 JSON gateway (HTTP/1.1,
// POST /v3/kv/range, /v3/kv/txn, /v3/lease/*, /v3/watch as a streamed response; keys and values
// base64), with its own small HTTP client on POSIX sockets, over TLS (OpenSSL) for etcds://. A
// replicated store: the run survives the death of any etcd member while a quorum of members
// lives. Not a general etcd client (no persistent watch streams, no gRPC).
//
// Mapping: every Store key lives under the URL's prefix; compare_set is one transaction (compare
// on the value, or on create_revision = 0 for "absent"); add is a transaction on mod_revision,
// retried on conflict; a lease is an etcd lease with its TTL rounded up to whole seconds (etcd
// raises it further to its minimum, 1.5 election timeouts, 2 s with etcd's defaults); watch
// returns etcd's header.revision (etcd counts one revision per transaction: a lease's end that
// erases several keys is one revision, which the Store's watch contract allows). Each watch is
// its own streamed request; it answers at once when etcd's revision moved since the caller's
// (anywhere in etcd: etcd replays a watch's past only every 100 ms), so a caller may re-check
// more often than with the TCP store. Reads are linearizable.
//
// Failover: a request goes to the endpoint that answered last; on a connection failure, a
// timeout of one attempt, or an "unavailable" answer (no leader, leader changed, the member is
// stopping) it moves on to the next endpoint, backing off once all were tried, until the call's
// deadline. PeerLostError only when no endpoint answered by then. Once every endpoint has
// failed in turn the cluster has no reachable quorum: that outage is logged while it lasts
// (EtcdStoreOptions::log). A write whose answer was lost
// is retried: set and compare_set are safe to repeat; an add may then count twice (rare: only
// when a member dies between applying the write and answering it).
//
// The run's join proof: the first node writes the run record `<prefix>run` (meridian version,
// configuration hash, a nonce, and HMAC-SHA256(secret) over them, the TCP store's transcript);
// every node checks it at construction and is refused (ConfigError with the reason) when the
// version, the configuration or the secret differ. etcd itself cannot check a node's proof:
// who may reach the cluster is etcd's own business (its auth: user and password here).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backends/common/store_identity.h"
#include "engine/core/store.h"

namespace meridian {

struct EtcdEndpoint {
  std::string host;
  std::uint16_t port = 0;
};

struct EtcdStoreOptions {
  std::vector<EtcdEndpoint> endpoints;  // tried in order, from the one that answered last
  std::string prefix = "/meridian/";    // every key of the run lives under it
  std::string user;                     // etcd auth: both or neither
  std::string password;
  bool tls = false;       // etcds://: the server's certificate is verified for its name/address
  std::string ca_file;    // PEM CAs that sign the servers' certificates ("" = the system's)
  std::string cert_file;  // client certificate and key (PEM) for etcd's --client-cert-auth
  std::string key_file;
  std::string client_id;            // names this node in errors
  StoreIdentity identity;           // the run's secret, version and configuration hash
  double connect_timeout_s = 10.0;  // reaching the cluster at construction
  double io_timeout_s = 30.0;       // one request, failover included (waits add their own)
  // Quorum loss (every endpoint failed in turn: dead, or no leader among the members left) is
  // logged when it starts, every outage_log_interval_s while calls keep failing, and when an
  // answer comes again. `log` gets one line each; empty = not logged.
  std::function<void(const std::string&)> log;
  double outage_log_interval_s = 5.0;
};

// Whether `text` names an etcd store (starts with etcd:// or etcds://).
bool is_etcd_url(const std::string& text);

// Parses `etcd[s]://HOST:PORT[,HOST:PORT...][/PREFIX][?OPTION=VALUE&...]`, options `user` and
// `password-file` (etcd auth; the file read as a secret file, mode 600) and, with etcds://,
// `cacert`, `cert` and `key` (PEM files). PREFIX defaults to "meridian"; the store's prefix is
// "/PREFIX/". Errors (ConfigError) start with `what` (e.g. "run.yaml: store") and name the
// problem.
EtcdStoreOptions parse_etcd_url(const std::string& url, const std::string& what);

// Thread-safety: every method may be called concurrently (a small pool of connections; each
// caller holds one for the length of its request, so a long watch never blocks a keepalive).
// Errors: ConfigError when the run record refuses this node or auth fails, PeerLostError when
// no endpoint answers within the call's timeout, TimeoutError when a wait runs out,
// ProtocolError for a malformed answer or an add on a non-integer, Error for a request etcd
// declines.
class EtcdStore final : public Store {
 public:
  // Reaches the cluster (authenticating when a user is given) and checks or writes the run
  // record, so that a refusal surfaces here.
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

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
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian
