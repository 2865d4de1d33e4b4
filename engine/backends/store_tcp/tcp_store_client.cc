// The TCP store client: meridian::Store over the store server's protocol (tcp_store_wire.h).
// Connections are pooled, one caller per connection at a time, each joined with the
// challenge-response proof; every socket operation is bounded by a deadline.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/error.h"
#include "engine/core/util/hmac.h"

namespace meridian {

using store_wire::Reader;
using store_wire::Type;
using store_wire::Writer;

namespace {

std::uint32_t to_wire_ms(double timeout_s) {
  if (!(timeout_s > 0)) return 0;  // also NaN
  return static_cast<std::uint32_t>(std::min(timeout_s * 1000.0, 4.0e9));
}

}  // namespace

TcpStore::TcpStore(TcpStoreClientOptions options) : options_(std::move(options)) {
  if (options_.identity.secret.empty()) {
    throw ConfigError("store client: the shared secret is empty (give a non-empty secret file)");
  }
  give_back(take_connection());
  joined_ = true;
}

TcpStore::~TcpStore() {
  for (const int fd : idle_) ::close(fd);
  for (const auto& [lease, fd] : held_) ::close(fd);  // the server ends those leases
}

int TcpStore::take_connection() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      const int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  // Retried until the deadline: while the server is not up yet (refused or unreachable; nodes
  // may start before the store's process, in any order), and when a store shedding load
  // (StoreAdmissionLimits) closes the connection before its welcome.
  const double deadline_s =
      store_wire::now_s() + (joined_ ? options_.reconnect_timeout_s.value_or(
                                            options_.connect_timeout_s)
                                      : options_.connect_timeout_s);
  const auto on_wait = [&](const std::string& error, double waited_s) {
    if (!options_.on_wait) return;
    char text[96];
    std::snprintf(text, sizeof text, "not reachable for %.0f s; retrying for %.0f s more", waited_s,
                  std::max(0.0, deadline_s - store_wire::now_s()));
    options_.on_wait("the store at " + options_.host + ":" + std::to_string(options_.port) +
                     " is " + text + " (" + error + ")");
  };
  return store_wire::dial(
      options_.host, options_.port, deadline_s, [&](int fd) { join(fd, deadline_s); }, on_wait);
}

void TcpStore::join(int fd, double deadline_s) {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  Reader hello_r(store_wire::recv_frame(fd, store_wire::kMaxHandshakeFrameBytes, deadline_s));
  if (hello_r.type() != Type::kHello || hello_r.u32("magic") != store_wire::kMagic) {
    throw ProtocolError("store " + where + ": not a meridian store (bad greeting)");
  }
  if (const auto v = hello_r.u16("protocol"); v != store_wire::kProtocolVersion) {
    throw ConfigError("store " + where + ": speaks store protocol " + std::to_string(v) +
                      ", this node speaks " + std::to_string(store_wire::kProtocolVersion));
  }
  store_wire::Nonce server_nonce;
  hello_r.raw(server_nonce.data(), server_nonce.size(), "nonce");
  hello_r.finish("hello");

  const store_wire::Nonce client_nonce = store_wire::random_nonce();
  const auto& id = options_.identity;
  const Sha256Digest proof =
      hmac_sha256(id.secret, store_wire::join_transcript(server_nonce, options_.client_id,
                                                         id.version, id.config_hash, client_nonce));
  Writer join(Type::kJoin);
  join.str(options_.client_id).str(id.version).str(id.config_hash);
  join.raw(client_nonce.data(), client_nonce.size()).raw(proof.data(), proof.size());
  store_wire::send_all(fd, join.frame(), deadline_s);

  Reader answer(store_wire::recv_frame(fd, store_wire::kMaxHandshakeFrameBytes, deadline_s));
  const Type t = answer.type();
  if (t == Type::kRefused) {
    throw ConfigError("store " + where + " refused node '" + options_.client_id +
                      "': " + answer.str("reason", store_wire::kMaxHandshakeFrameBytes));
  }
  if (t != Type::kWelcome) throw ProtocolError("store " + where + ": unexpected join answer");
  Sha256Digest server_proof;
  answer.raw(server_proof.data(), server_proof.size(), "server proof");
  answer.finish("welcome");
  const Sha256Digest expected =
      hmac_sha256(id.secret, store_wire::server_transcript(server_nonce, client_nonce));
  if (!digests_equal(server_proof, expected)) {
    throw ConfigError("store " + where +
                      " could not prove it holds the run's secret (a different run's store?)");
  }
}

void TcpStore::give_back(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(fd);
}

std::string TcpStore::exchange(int fd, const std::string& request, double wait_s) {
  const double deadline_s = store_wire::now_s() + options_.io_timeout_s + std::max(wait_s, 0.0);
  store_wire::send_all(fd, request, deadline_s);
  return store_wire::recv_frame(fd, options_.limits.max_frame_bytes, deadline_s);
}

std::string TcpStore::round_trip(const std::string& request, double wait_s) {
  const int fd = take_connection();
  try {
    std::string reply = exchange(fd, request, wait_s);
    give_back(fd);
    return reply;
  } catch (...) {
    ::close(fd);  // its state is unknown: never reuse it
    throw;
  }
}

int TcpStore::release_held(std::int64_t lease) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = held_.find(lease);
  if (it == held_.end()) return -1;
  const int fd = it->second;
  held_.erase(it);
  return fd;
}

namespace {

// Checks the reply status; returns a Reader positioned after it.
Reader expect_ok(const std::string& reply, const char* op, const std::string& key) {
  Reader r(reply);
  const Type t = r.type();
  if (t == Type::kOk) return r;
  const std::string text = r.str("message", 1u << 20);
  if (t == Type::kTimeout) throw TimeoutError(std::string("store ") + op + ": " + text);
  if (t == Type::kError) throw Error(std::string("store ") + op + " '" + key + "': " + text);
  throw ProtocolError(std::string("store ") + op + ": unexpected reply type");
}

}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  Writer w(Type::kSet);
  w.str(key).str(value);
  expect_ok(round_trip(w.frame(), 0), "set", key).finish("set reply");
}

std::string TcpStore::get(const std::string& key, double timeout_s) {
  Writer w(Type::kGet);
  w.str(key).u32(to_wire_ms(timeout_s));
  const std::string reply = round_trip(w.frame(), timeout_s);
  Reader r = expect_ok(reply, "get", key);
  std::string value = r.str("value", options_.limits.max_frame_bytes);
  r.finish("get reply");
  return value;
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  Writer w(Type::kTryGet);
  w.str(key);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, "try_get", key);
  std::optional<std::string> out;
  if (r.u8("present")) out = r.str("value", options_.limits.max_frame_bytes);
  r.finish("try_get reply");
  return out;
}

void TcpStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  Writer w(Type::kWait);
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.u32(to_wire_ms(timeout_s));
  expect_ok(round_trip(w.frame(), timeout_s), "wait", keys.empty() ? "" : keys[0])
      .finish("wait reply");
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  Writer w(Type::kAdd);
  w.str(key).i64(delta);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, "add", key);
  const std::int64_t v = r.i64("value");
  r.finish("add reply");
  return v;
}

std::optional<std::string> TcpStore::compare_set(const std::string& key,
                                                 const std::optional<std::string>& expected,
                                                 const std::string& desired) {
  return compare_set_request(key, expected, desired, std::nullopt);
}

std::optional<std::string> TcpStore::compare_set_request(const std::string& key,
                                                         const std::optional<std::string>& expected,
                                                         const std::string& desired,
                                                         std::optional<std::int64_t> lease) {
  const char* what = lease ? "compare_set_leased" : "compare_set";
  Writer w(lease ? Type::kCompareSetLeased : Type::kCompareSet);
  w.str(key).u8(expected ? 1 : 0);
  if (expected) w.str(*expected);
  w.str(desired);
  if (lease) w.i64(*lease);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, what, key);
  std::optional<std::string> out;
  if (r.u8("present")) out = r.str("value", options_.limits.max_frame_bytes);
  r.finish(what);
  return out;
}

bool TcpStore::erase(const std::string& key) {
  Writer w(Type::kErase);
  w.str(key);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, "erase", key);
  const bool existed = r.u8("existed") != 0;
  r.finish("erase reply");
  return existed;
}

std::vector<std::string> TcpStore::list(const std::string& prefix) {
  Writer w(Type::kList);
  w.str(prefix);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, "list", prefix);
  const std::uint32_t n = r.u32("count");
  if (std::uint64_t{n} * 4 > r.remaining()) throw ProtocolError("store list: count exceeds reply");
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.str("key", options_.limits.max_key_bytes));
  r.finish("list reply");
  return keys;
}

std::vector<std::pair<std::string, std::string>> TcpStore::read_prefix(const std::string& prefix) {
  Writer w(Type::kReadPrefix);
  w.str(prefix);
  const std::string reply = round_trip(w.frame(), 0);
  Reader r = expect_ok(reply, "read_prefix", prefix);
  const std::uint32_t n = r.u32("count");
  if (std::uint64_t{n} * 8 > r.remaining())
    throw ProtocolError("store read_prefix: count exceeds reply");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string key = r.str("key", options_.limits.max_key_bytes);
    if (!key.starts_with(prefix))
      throw ProtocolError("store read_prefix: key '" + key + "' outside prefix '" + prefix + "'");
    out.emplace_back(std::move(key), r.str("value", options_.limits.max_frame_bytes));
  }
  r.finish("read_prefix reply");
  return out;
}

std::int64_t TcpStore::lease_grant(double ttl_s) {
  // Granted on a connection of its own, taken out of the pool for as long as the lease lives.
  Writer w(Type::kLeaseGrantHeld);
  w.u32(to_wire_ms(ttl_s));
  const int fd = take_connection();
  try {
    Reader r = expect_ok(exchange(fd, w.frame(), 0), "lease_grant", "");
    const std::int64_t lease = r.i64("lease");
    r.finish("lease_grant reply");
    std::lock_guard<std::mutex> lock(mutex_);
    held_.emplace(lease, fd);
    return lease;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

double TcpStore::keepalive(std::int64_t lease, double interval_s) {
  Writer w(Type::kKeepalive);
  w.i64(lease);
  const int fd = release_held(lease);
  std::string reply;
  if (fd < 0) {
    reply = round_trip(w.frame(), 0);  // a lease granted by another client
  } else {
    try {
      reply = exchange(fd, w.frame(), 0);
    } catch (const Error&) {
      // Its connection broke (or this request's state on it is unknown): closing it ends the
      // lease on the server, if that has not happened already.
      ::close(fd);
      return -1.0;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    held_.emplace(lease, fd);
  }
  Reader r = expect_ok(reply, "keepalive", "");
  const bool alive = r.u8("alive") != 0;
  r.finish("keepalive reply");
  return alive ? interval_s : -1.0;
}

bool TcpStore::lease_revoke(std::int64_t lease) {
  Writer w(Type::kLeaseRevoke);
  w.i64(lease);
  const auto alive = [](const std::string& reply) {
    Reader r = expect_ok(reply, "lease_revoke", "");
    const bool was = r.u8("was alive") != 0;
    r.finish("lease_revoke reply");
    return was;
  };
  const int fd = release_held(lease);
  if (fd < 0) return alive(round_trip(w.frame(), 0));
  // Revoked on its own connection and answered before it closes: the keys are gone on return.
  std::string reply;
  try {
    reply = exchange(fd, w.frame(), 0);
  } catch (...) {
    ::close(fd);  // closing ends the lease on the server anyway
    throw;
  }
  ::close(fd);
  return alive(reply);
}

std::optional<std::string> TcpStore::compare_set_leased(const std::string& key,
                                                        const std::optional<std::string>& expected,
                                                        const std::string& desired,
                                                        std::int64_t lease) {
  return compare_set_request(key, expected, desired, lease);
}

std::uint64_t TcpStore::watch(const std::vector<std::string>& prefixes,
                              std::uint64_t after_revision, double timeout_s) {
  Writer w(Type::kWatch);
  w.u32(static_cast<std::uint32_t>(prefixes.size()));
  for (const auto& p : prefixes) w.str(p);
  w.i64(static_cast<std::int64_t>(after_revision)).u32(to_wire_ms(timeout_s));
  Reader r = expect_ok(round_trip(w.frame(), timeout_s), "watch", "");
  const auto revision = static_cast<std::uint64_t>(r.i64("revision"));
  r.finish("watch reply");
  return revision;
}

}  // namespace meridian
