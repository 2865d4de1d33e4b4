// The TCP store server: one thread, one poll() loop over every connection. Frames are read in
// two steps (4-byte length, then a body of exactly that length) so nothing is allocated before
// the length is checked; waits are parked per connection and completed when their keys appear
// or their deadline passes. A peer that breaks the protocol is cut off; nobody else notices.
// Connections that have not joined are bounded (StoreAdmissionLimits): a newcomer beyond a bound
// sheds one of them, whatever it has sent, and when descriptors run out they are shed rather than
// left in the backlog (which would make poll() report the listening socket readable forever: a
// busy loop).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/error.h"
#include "engine/core/store/lease_table.h"
#include "engine/core/util/hmac.h"

namespace meridian {

using store_wire::Reader;
using store_wire::Type;
using store_wire::Writer;

namespace {

struct PendingWait {
  // kGet returns the value of keys[0]; kWait returns nothing; kWatch (keys = prefixes) returns
  // the revision once a key under them changed after `after`, or at the deadline.
  Type type = Type::kWait;
  std::vector<std::string> keys;
  std::uint64_t after = 0;
  double deadline_s = 0;
};

struct Connection {
  int fd = -1;
  bool joined = false;
  bool sent_anything = false;  // a byte arrived since the greeting: stalled mid-frame unless
                               // joined (a node sends its whole join in one write)
  std::string address;         // the peer's IP address (the per-address admission limit's key)
  double accepted_s = 0;
  std::string peer;  // "client-id@address" once joined, the address before
  store_wire::Nonce nonce{};
  double handshake_deadline_s = 0;
  // Reading: first the 4-byte prefix, then a body of the announced length.
  unsigned char prefix[4] = {};
  std::size_t prefix_got = 0;
  std::string body;
  std::size_t body_got = 0;
  bool reading_body = false;
  std::string out;  // bytes not yet written
  std::size_t out_sent = 0;
  bool close_after_flush = false;
  std::optional<PendingWait> wait;
  // Leases granted on this connection with LEASE_GRANT_HELD: they end when it closes, whoever
  // closes it (the holder's process exiting or killed, or this server cutting it off).
  std::vector<std::int64_t> held_leases;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Integer value stored by add(): decimal text.
std::optional<std::int64_t> parse_int(const std::string& s) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Passes at most `per_s` lines a second (a burst of as many) and counts the rest; the count
// rides on the next line that passes, so a flood of refusals costs a few lines, not one each.
class RateLimitedLog {
 public:
  // Returns the line to write (with the count of lines held back before it) or nothing.
  std::optional<std::string> pass(const std::string& line, double now_s, double per_s) {
    tokens_ = std::min(per_s, tokens_ + (now_s - last_s_) * per_s);
    last_s_ = now_s;
    if (tokens_ < 1.0) {
      ++held_back_;
      return std::nullopt;
    }
    tokens_ -= 1.0;
    if (held_back_ == 0) return line;
    std::string out = line + " (and " + std::to_string(held_back_) + " similar lines held back)";
    held_back_ = 0;
    return out;
  }
  // The count of lines held back since the last line that passed, once a line may pass again
  // (or at once with `now`), so that the end of a flood is accounted for too.
  std::optional<std::string> flush(double now_s, double per_s, bool now = false) {
    if (held_back_ == 0 || (!now && now_s < next_flush_s(per_s))) return std::nullopt;
    tokens_ = std::max(0.0, std::min(per_s, tokens_ + (now_s - last_s_) * per_s) - 1.0);
    last_s_ = now_s;
    std::string out = "store: " + std::to_string(held_back_) +
                      " similar lines held back (peers that never joined: refused or cut off)";
    held_back_ = 0;
    return out;
  }
  // When a held-back count is due (infinity when none is).
  double next_flush_s(double per_s) const {
    if (held_back_ == 0) return std::numeric_limits<double>::infinity();
    return last_s_ + std::max(0.0, 1.0 - tokens_) / per_s;
  }

 private:
  double tokens_ = 0;
  double last_s_ = -1e9;
  std::uint64_t held_back_ = 0;
};

}  // namespace

struct TcpStoreServer::Impl {
  TcpStoreServerOptions options;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  std::uint16_t bound_port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> joined{0}, refused{0}, cut_off{0}, requests{0}, shed{0};
  // Kept open so that, when descriptors run out, one can be freed to accept and close a
  // connection (the backlog drains instead of keeping the listening socket readable).
  int reserve_fd = -1;
  bool out_of_descriptors = false;   // logged once per episode
  double accept_paused_until_s = 0;  // accepting waits until then (nothing could be freed)
  RateLimitedLog unjoined_log;

  // Loop-thread state.
  std::map<int, Connection> connections;
  std::map<std::string, std::string> data;
  std::uint64_t stored_bytes = 0;
  LeaseTable leases;  // on store_wire::now_s()
  ChangeLog changes;
  // The run's configuration hash: the server's own (options.identity), else the first joined
  // node's, and who fixed it ("" while unset or given).
  std::string run_config_hash;
  std::string run_config_hash_from;

  void log(const std::string& line) {
    if (options.log) options.log(line);
  }
  void flush_unjoined_log(bool now) {
    const auto line =
        unjoined_log.flush(store_wire::now_s(), options.admission.log_lines_per_s, now);
    if (line && options.log) options.log(*line);
  }
  // A line about a peer that never joined: rate-limited (a flood must not flood the log).
  void log_unjoined(const std::string& line) {
    if (!options.log) return;
    if (auto l = unjoined_log.pass(line, store_wire::now_s(), options.admission.log_lines_per_s))
      options.log(*l);
  }

  void run();
  void accept_new();
  // Makes room for a connection from `address` under the admission limits (shedding an unjoined
  // one in scope); false when there is none to shed.
  bool make_room(const std::string& address);
  // Closes one unjoined connection (of `address`, or of any when empty): one stalled mid-frame
  // before an idle one, the oldest first. `why` says what the store is short of. False when
  // there is none.
  bool shed_one(const std::string& address, const std::string& why);
  // accept4 failed with EMFILE/ENFILE: frees a descriptor and drains one connection, or pauses
  // accepting. Returns whether accepting may go on now.
  bool on_out_of_descriptors(int error);
  void on_readable(Connection& c);
  void on_frame(Connection& c);
  void handle_join(Connection& c, Reader& r);
  // A request of a joined client, by type: each handler reads its fields, finishes the frame
  // and replies (or parks a wait).
  void handle_request(Connection& c, Reader& r);
  void handle_set(Connection& c, Reader& r);
  void handle_wait(Connection& c, Reader& r, Type type);  // get, wait, watch
  void handle_try_get(Connection& c, Reader& r);
  void handle_add(Connection& c, Reader& r);
  void handle_lease(Connection& c, Reader& r, Type type);  // grant, keepalive, revoke
  void handle_compare_set(Connection& c, Reader& r, Type type);
  void handle_erase(Connection& c, Reader& r);
  void handle_list(Connection& c, Reader& r, Type type);  // list, read_prefix
  void reply(Connection& c, const Writer& w);
  void reply_error(Connection& c, const std::string& what);
  void flush(Connection& c);
  void cut(Connection& c, const std::string& why);
  void refuse(Connection& c, const std::string& why);
  bool try_complete_wait(Connection& c, bool expired);
  void complete_waits();
  void put(const std::string& key, std::string value);
  bool remove(const std::string& key);
  void expire_leases();
  // Ends the leases held on connections that closed (before they are forgotten).
  void end_held_leases();
  // Reads a key count and that many strings of at most max_key_bytes (wait keys, watch prefixes).
  std::vector<std::string> read_keys(Reader& r, const char* what);
};

void TcpStoreServer::Impl::cut(Connection& c, const std::string& why) {
  ++cut_off;
  const std::string line = "store: cut off " + c.peer + ": " + why;
  if (c.joined)
    log(line);
  else
    log_unjoined(line);
  close_fd(c.fd);
}

void TcpStoreServer::Impl::refuse(Connection& c, const std::string& why) {
  ++refused;
  log_unjoined("store: refused " + c.peer + ": " + why);
  Writer w(Type::kRefused);
  w.str(why);
  c.close_after_flush = true;
  reply(c, w);
}

void TcpStoreServer::Impl::reply(Connection& c, const Writer& w) {
  c.out += w.frame();
  flush(c);
}

void TcpStoreServer::Impl::flush(Connection& c) {
  while (c.fd >= 0 && c.out_sent < c.out.size()) {
    const ssize_t rc = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                              MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      const std::string line = "store: " + c.peer + " went away: " + std::strerror(errno);
      if (c.joined)
        log(line);
      else
        log_unjoined(line);
      close_fd(c.fd);
      return;
    }
    c.out_sent += static_cast<std::size_t>(rc);
  }
  if (c.fd >= 0 && c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    if (c.close_after_flush) close_fd(c.fd);
  }
}

void TcpStoreServer::Impl::put(const std::string& key, std::string value) {
  leases.detach(key);
  changes.record(key);
  auto it = data.find(key);
  if (it != data.end()) {
    stored_bytes -= it->second.size();
    stored_bytes += value.size();
    it->second = std::move(value);
  } else {
    stored_bytes += key.size() + value.size();
    data.emplace(key, std::move(value));
  }
}

bool TcpStoreServer::Impl::remove(const std::string& key) {
  leases.detach(key);
  auto it = data.find(key);
  if (it == data.end()) return false;
  changes.record(key);
  stored_bytes -= it->first.size() + it->second.size();
  data.erase(it);
  return true;
}

void TcpStoreServer::Impl::expire_leases() {
  const double now = store_wire::now_s();
  if (leases.next_deadline_s() > now) return;
  for (const std::string& key : leases.expire(now)) remove(key);
  complete_waits();
}

void TcpStoreServer::Impl::end_held_leases() {
  bool ended = false;
  for (auto& [fd, c] : connections) {
    if (c.fd >= 0) continue;
    for (const std::int64_t lease : c.held_leases) {
      const std::vector<std::string> keys = leases.revoke(lease);
      if (keys.empty()) continue;
      ended = true;
      for (const std::string& key : keys) remove(key);
      log("store: lease " + std::to_string(lease) + " of " + c.peer +
          " ended with its connection (" + std::to_string(keys.size()) + " keys)");
    }
    c.held_leases.clear();
  }
  if (ended) complete_waits();
}

std::vector<std::string> TcpStoreServer::Impl::read_keys(Reader& r, const char* what) {
  const std::uint32_t n = r.u32("key count");
  if (n > options.limits.max_keys) {
    throw ProtocolError(std::string(what) + " names " + std::to_string(n) + " keys, limit " +
                        std::to_string(options.limits.max_keys));
  }
  // Each key needs at least its 4-byte length: a lying count fails before allocating.
  if (std::uint64_t{n} * 4 > r.remaining())
    throw ProtocolError(std::string(what) + " key count exceeds the message");
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.str("key", options.limits.max_key_bytes));
  return keys;
}

bool TcpStoreServer::Impl::try_complete_wait(Connection& c, bool expired) {
  if (!c.wait || c.fd < 0) return false;
  if (c.wait->type == Type::kWatch) {
    if (!expired && !changes.changed_since(c.wait->keys, c.wait->after)) return false;
    Writer w(Type::kOk);
    w.i64(static_cast<std::int64_t>(changes.revision()));
    c.wait.reset();
    reply(c, w);
    return true;
  }
  bool all = true;
  for (const auto& k : c.wait->keys) all = all && data.count(k) > 0;
  if (all) {
    Writer w(Type::kOk);
    if (c.wait->type == Type::kGet) w.str(data.at(c.wait->keys[0]));
    c.wait.reset();
    reply(c, w);
    return true;
  }
  if (expired) {
    std::string missing;
    for (const auto& k : c.wait->keys) {
      if (data.count(k) == 0) missing += (missing.empty() ? "'" : ", '") + k + "'";
      if (missing.size() > 200) break;
    }
    Writer w(Type::kTimeout);
    w.str("key(s) " + missing + " did not appear in time");
    c.wait.reset();
    reply(c, w);
    return true;
  }
  return false;
}

void TcpStoreServer::Impl::complete_waits() {
  for (auto& [fd, c] : connections) try_complete_wait(c, false);
}

void TcpStoreServer::Impl::handle_join(Connection& c, Reader& r) {
  if (r.type() != Type::kJoin) throw ProtocolError("expected a join message first");
  const std::string client_id = r.str("client id", 256);
  const std::string version = r.str("version", 256);
  const std::string config_hash = r.str("config hash", 256);
  store_wire::Nonce client_nonce;
  r.raw(client_nonce.data(), client_nonce.size(), "client nonce");
  Sha256Digest mac;
  r.raw(mac.data(), mac.size(), "proof");
  r.finish("join");
  c.peer = "'" + client_id + "'@" + c.peer;
  const Sha256Digest expected = hmac_sha256(
      options.identity.secret,
      store_wire::join_transcript(c.nonce, client_id, version, config_hash, client_nonce));
  if (!digests_equal(mac, expected)) {
    refuse(c, "wrong secret (the join proof does not match this store's secret)");
    return;
  }
  if (version != options.identity.version) {
    refuse(c, "version mismatch: the store runs meridian " + options.identity.version +
                  ", the node runs " + version);
    return;
  }
  // One rule for every store: a node joins only the run whose resolved configuration it has.
  // The run's is the store's own when given (the embedding node's, `meridian store --config`),
  // else the first node's to join.
  if (run_config_hash.empty() && !config_hash.empty()) {
    run_config_hash = config_hash;
    run_config_hash_from = client_id;
    log("store: the run's configuration hash is " + config_hash + " (from node '" + client_id +
        "', the first to join)");
  } else if (!run_config_hash.empty() && config_hash != run_config_hash) {
    refuse(c, "run configuration differs: the run's configuration hash is " + run_config_hash +
                  (run_config_hash_from.empty()
                       ? " (the store's)"
                       : " (from node '" + run_config_hash_from + "', the first to join)") +
                  ", the node's is " + config_hash +
                  " (was it started with another run file or other --set overrides?)");
    return;
  }
  c.joined = true;
  ++joined;
  log("store: joined " + c.peer);
  Writer w(Type::kWelcome);
  const Sha256Digest proof =
      hmac_sha256(options.identity.secret, store_wire::server_transcript(c.nonce, client_nonce));
  w.raw(proof.data(), proof.size());
  reply(c, w);
}

void TcpStoreServer::Impl::handle_request(Connection& c, Reader& r) {
  const Type type = r.type();
  ++requests;
  switch (type) {
    case Type::kSet:
      return handle_set(c, r);
    case Type::kGet:
    case Type::kWait:
    case Type::kWatch:
      return handle_wait(c, r, type);
    case Type::kTryGet:
      return handle_try_get(c, r);
    case Type::kAdd:
      return handle_add(c, r);
    case Type::kLeaseGrant:
    case Type::kLeaseGrantHeld:
    case Type::kKeepalive:
    case Type::kLeaseRevoke:
      return handle_lease(c, r, type);
    case Type::kCompareSet:
    case Type::kCompareSetLeased:
      return handle_compare_set(c, r, type);
    case Type::kErase:
      return handle_erase(c, r);
    case Type::kList:
    case Type::kReadPrefix:
      return handle_list(c, r, type);
    default:
      throw ProtocolError("unknown request type " + std::to_string(static_cast<int>(type)));
  }
}

void TcpStoreServer::Impl::reply_error(Connection& c, const std::string& what) {
  Writer e(Type::kError);
  e.str(what);
  reply(c, e);
}

void TcpStoreServer::Impl::handle_set(Connection& c, Reader& r) {
  const auto& lim = options.limits;
  std::string key = r.str("key", lim.max_key_bytes);
  std::string value = r.str("value", lim.max_frame_bytes);
  r.finish("set");
  if (stored_bytes + key.size() + value.size() > lim.max_stored_bytes)
    return reply_error(c, "store full: " + std::to_string(stored_bytes) + " bytes held, limit " +
                              std::to_string(lim.max_stored_bytes));
  put(key, std::move(value));
  reply(c, Writer(Type::kOk));
  complete_waits();
}

void TcpStoreServer::Impl::handle_wait(Connection& c, Reader& r, Type type) {
  const auto& lim = options.limits;
  PendingWait w;
  w.type = type;
  const char* what = w.type == Type::kGet ? "get" : w.type == Type::kWait ? "wait" : "watch";
  if (w.type == Type::kGet)
    w.keys.push_back(r.str("key", lim.max_key_bytes));
  else
    w.keys = read_keys(r, what);
  if (w.type == Type::kWatch) w.after = static_cast<std::uint64_t>(r.i64("after revision"));
  w.deadline_s = store_wire::now_s() + r.u32("timeout") / 1000.0;
  r.finish(what);
  c.wait = std::move(w);
  try_complete_wait(c, false);
}

void TcpStoreServer::Impl::handle_try_get(Connection& c, Reader& r) {
  const std::string key = r.str("key", options.limits.max_key_bytes);
  r.finish("try_get");
  Writer ok(Type::kOk);
  auto it = data.find(key);
  ok.u8(it != data.end() ? 1 : 0);
  if (it != data.end()) ok.str(it->second);
  reply(c, ok);
}

void TcpStoreServer::Impl::handle_add(Connection& c, Reader& r) {
  const std::string key = r.str("key", options.limits.max_key_bytes);
  const std::int64_t delta = r.i64("delta");
  r.finish("add");
  std::int64_t current = 0;
  if (auto it = data.find(key); it != data.end()) {
    const auto parsed = parse_int(it->second);
    if (!parsed)
      return reply_error(c, "add: key '" + key + "' holds a value that is not an integer");
    current = *parsed;
  }
  const std::int64_t next = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) +
                                                      static_cast<std::uint64_t>(delta));
  put(key, std::to_string(next));
  Writer ok(Type::kOk);
  ok.i64(next);
  reply(c, ok);
  complete_waits();
}

void TcpStoreServer::Impl::handle_lease(Connection& c, Reader& r, Type type) {
  Writer ok(Type::kOk);
  const double now_s = store_wire::now_s();
  if (type == Type::kLeaseGrant || type == Type::kLeaseGrantHeld) {
    const double ttl_s = r.u32("ttl") / 1000.0;
    r.finish("lease_grant");
    const std::int64_t lease = leases.grant(ttl_s, now_s);
    if (type == Type::kLeaseGrantHeld) c.held_leases.push_back(lease);
    ok.i64(lease);
    return reply(c, ok);
  }
  const std::int64_t lease = r.i64("lease");
  if (type == Type::kKeepalive) {
    r.finish("keepalive");
    ok.u8(leases.keepalive(lease, now_s) ? 1 : 0);
    return reply(c, ok);
  }
  r.finish("lease_revoke");
  expire_leases();  // a lease past its deadline has ended, whether or not the loop looked yet
  ok.u8(leases.alive(lease) ? 1 : 0);
  for (const std::string& key : leases.revoke(lease)) remove(key);
  reply(c, ok);
  complete_waits();
}

void TcpStoreServer::Impl::handle_compare_set(Connection& c, Reader& r, Type type) {
  const auto& lim = options.limits;
  const bool leased = type == Type::kCompareSetLeased;
  const std::string key = r.str("key", lim.max_key_bytes);
  const bool has_expected = r.u8("has expected") != 0;
  std::optional<std::string> expected;
  if (has_expected) expected = r.str("expected", lim.max_frame_bytes);
  std::string desired = r.str("desired", lim.max_frame_bytes);
  const std::int64_t lease = leased ? r.i64("lease") : 0;
  r.finish(leased ? "compare_set_leased" : "compare_set");
  auto it = data.find(key);
  const bool matches =
      (has_expected ? (it != data.end() && it->second == *expected) : (it == data.end())) &&
      (!leased || leases.alive(lease));
  Writer ok(Type::kOk);
  if (!matches) {  // the current value, if any
    ok.u8(it != data.end() ? 1 : 0);
    if (it != data.end()) ok.str(it->second);
    return reply(c, ok);
  }
  if (stored_bytes + key.size() + desired.size() > lim.max_stored_bytes)
    return reply_error(c, "store full: " + std::to_string(stored_bytes) + " bytes held");
  ok.u8(1).str(desired);
  put(key, std::move(desired));
  if (leased) leases.attach(lease, key);
  reply(c, ok);
  complete_waits();
}

void TcpStoreServer::Impl::handle_erase(Connection& c, Reader& r) {
  const std::string key = r.str("key", options.limits.max_key_bytes);
  r.finish("erase");
  Writer ok(Type::kOk);
  ok.u8(remove(key) ? 1 : 0);
  reply(c, ok);
  complete_waits();
}

// LIST answers the keys under a prefix, READ_PREFIX the keys and their values.
void TcpStoreServer::Impl::handle_list(Connection& c, Reader& r, Type type) {
  const auto& lim = options.limits;
  const bool with_values = type == Type::kReadPrefix;
  const char* what = with_values ? "read_prefix" : "list";
  const std::string prefix = r.str("prefix", lim.max_key_bytes);
  r.finish(what);
  std::vector<std::map<std::string, std::string>::const_iterator> entries;
  std::uint64_t bytes = 0;
  for (auto it = data.lower_bound(prefix); it != data.end() && it->first.starts_with(prefix);
       ++it) {
    entries.push_back(it);
    bytes += 4 + it->first.size() + (with_values ? 4 + it->second.size() : 0);
  }
  if (entries.size() > lim.max_keys || bytes + 16 > lim.max_frame_bytes)
    return reply_error(c, std::string(what) + " '" + prefix + "': " +
                              std::to_string(entries.size()) + " keys exceed one reply's limits");
  Writer ok(Type::kOk);
  ok.u32(static_cast<std::uint32_t>(entries.size()));
  for (const auto& it : entries) {
    ok.str(it->first);
    if (with_values) ok.str(it->second);
  }
  reply(c, ok);
}

void TcpStoreServer::Impl::on_frame(Connection& c) {
  Reader r(std::move(c.body));
  try {
    if (!c.joined) {
      handle_join(c, r);
    } else {
      if (c.wait) throw ProtocolError("a second request while a wait is pending");
      handle_request(c, r);
    }
  } catch (const ProtocolError& e) {
    cut(c, e.what());
  }
  c.body.clear();
  c.body.shrink_to_fit();
}

void TcpStoreServer::Impl::on_readable(Connection& c) {
  // Reads at most what the current frame still needs, so a flood of bytes never grows a buffer
  // beyond one validated frame.
  for (int rounds = 0; rounds < 64 && c.fd >= 0; ++rounds) {
    char* dst;
    std::size_t want;
    if (!c.reading_body) {
      dst = reinterpret_cast<char*>(c.prefix) + c.prefix_got;
      want = 4 - c.prefix_got;
    } else {
      dst = c.body.data() + c.body_got;
      want = c.body.size() - c.body_got;
    }
    const ssize_t rc = ::recv(c.fd, dst, want, MSG_DONTWAIT);
    if (rc == 0) {
      if (c.joined) log("store: " + c.peer + " disconnected");
      close_fd(c.fd);
      return;
    }
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) close_fd(c.fd);
      return;
    }
    c.sent_anything = true;
    if (!c.reading_body) {
      c.prefix_got += static_cast<std::size_t>(rc);
      if (c.prefix_got < 4) continue;
      const std::uint32_t n = store_wire::decode_u32(c.prefix);
      const std::uint32_t limit =
          c.joined ? options.limits.max_frame_bytes : store_wire::kMaxHandshakeFrameBytes;
      if (n == 0 || n > limit) {
        cut(c, "frame claims " + std::to_string(n) + " bytes, limit " + std::to_string(limit));
        return;
      }
      c.body.assign(n, '\0');
      c.body_got = 0;
      c.reading_body = true;
      continue;
    }
    c.body_got += static_cast<std::size_t>(rc);
    if (c.body_got < c.body.size()) continue;
    c.reading_body = false;
    c.prefix_got = 0;
    on_frame(c);
    // One request at a time: stop reading until its reply is out and no wait is parked.
    if (c.fd < 0 || c.wait || !c.out.empty()) return;
  }
}

bool TcpStoreServer::Impl::shed_one(const std::string& address, const std::string& why) {
  // A node answers its greeting with its whole join frame in one write, read in one go: it is
  // never seen stalled mid-frame, and it is idle for a round trip only, as the newest. So a
  // stalled connection goes first (slowloris: a byte now and then keeps none of them), then the
  // oldest idle one; the handshake deadline cuts whatever is left unjoined.
  auto victim = connections.end();
  const auto before = [](const Connection& a, const Connection& b) {
    if (a.sent_anything != b.sent_anything) return a.sent_anything;
    return a.accepted_s < b.accepted_s;
  };
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    const Connection& c = it->second;
    if (c.fd < 0 || c.joined || c.close_after_flush) continue;
    if (!address.empty() && c.address != address) continue;
    if (victim == connections.end() || before(c, victim->second)) victim = it;
  }
  if (victim == connections.end()) return false;
  const Connection& c = victim->second;
  ++shed;
  log_unjoined("store: refused " + c.peer + ": " +
               (c.sent_anything ? "stalled mid-handshake" : "idle without joining") + " after " +
               std::to_string(store_wire::now_s() - c.accepted_s) + " s, and " + why);
  close_fd(victim->second.fd);
  connections.erase(victim);  // now, so that its descriptor number can be reused at once
  return true;
}

bool TcpStoreServer::Impl::make_room(const std::string& address) {
  const auto& a = options.admission;
  std::size_t unjoined = 0, from_address = 0;
  for (const auto& [fd, c] : connections) {
    if (c.fd < 0 || c.joined) continue;
    ++unjoined;
    from_address += c.address == address;
  }
  if (from_address >= a.max_unjoined_per_address) {
    if (!shed_one(address, "its address is at the limit of " +
                               std::to_string(a.max_unjoined_per_address) +
                               " unjoined connections"))
      return false;
    --unjoined;
  }
  return unjoined < a.max_unjoined ||
         shed_one("", "the store is at its limit of " + std::to_string(a.max_unjoined) +
                          " unjoined connections");
}

bool TcpStoreServer::Impl::on_out_of_descriptors(int error) {
  if (!out_of_descriptors) {
    out_of_descriptors = true;
    log(std::string("store: out of file descriptors (") + std::strerror(error) +
        "): shedding connections that have not joined, then refusing new ones");
  }
  if (shed_one("", "the store is out of file descriptors")) return true;
  // Nothing to shed: take one connection off the backlog with the reserve descriptor and close
  // it, so the listening socket stops being readable for it.
  if (reserve_fd >= 0) {
    close_fd(reserve_fd);
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      ++shed;
      log_unjoined("store: refused a connection: out of file descriptors");
      ::close(fd);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return true;
  }
  accept_paused_until_s = store_wire::now_s() + 0.1;  // the reserve is gone too: wait a little
  return false;
}

void TcpStoreServer::Impl::accept_new() {
  if (store_wire::now_s() < accept_paused_until_s) return;
  bool ran_out = false;  // in this wakeup
  for (std::size_t n = 0; n < options.admission.max_accepts_per_wakeup; ++n) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        ran_out = true;
        if (on_out_of_descriptors(error)) continue;
        return;  // paused
      }
      // EAGAIN: the backlog is empty. An episode of running out ends with a drained backlog.
      if (out_of_descriptors && !ran_out && reserve_fd >= 0) {
        out_of_descriptors = false;
        log("store: file descriptors available again");
      }
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Connection c;
    c.fd = fd;
    char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    c.address = host;
    c.peer = std::string(host) + ":" + serv;
    if (!make_room(c.address)) {
      ++shed;
      log_unjoined("store: refused " + c.peer + ": no unjoined connection in its scope to shed " +
                   "(admission limits " +
                   std::to_string(options.admission.max_unjoined_per_address) + " per address, " +
                   std::to_string(options.admission.max_unjoined) + " in all)");
      ::close(fd);
      continue;
    }
    c.accepted_s = store_wire::now_s();
    c.nonce = store_wire::random_nonce();
    c.handshake_deadline_s = c.accepted_s + options.handshake_timeout_s;
    Writer hello(Type::kHello);
    hello.u32(store_wire::kMagic).u16(store_wire::kProtocolVersion);
    hello.raw(c.nonce.data(), c.nonce.size());
    auto [it, inserted] = connections.emplace(fd, std::move(c));
    MERIDIAN_CHECK(inserted);
    reply(it->second, hello);
    // A peer that reset before its greeting (a flood that connects and aborts) is closed by now:
    // forget it at once, or the next accept4 that reuses its descriptor number would collide.
    if (it->second.fd < 0) connections.erase(it);
  }
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  while (!stopping.load()) {
    fds.clear();
    // While accepting is paused (descriptors ran out) the listening socket is not polled: it
    // would report the backlog readable at once, every time.
    const bool paused = store_wire::now_s() < accept_paused_until_s;
    fds.push_back({listen_fd, static_cast<short>(paused ? 0 : POLLIN), 0});
    fds.push_back({wake_pipe[0], POLLIN, 0});
    double next_deadline_s =
        paused ? accept_paused_until_s : std::numeric_limits<double>::infinity();
    for (auto& [fd, c] : connections) {
      short events = POLLRDHUP;
      if (!c.out.empty())
        events |= POLLOUT;
      else if (!c.wait && !c.close_after_flush)
        events |= POLLIN;
      fds.push_back({fd, events, 0});
      if (!c.joined) next_deadline_s = std::min(next_deadline_s, c.handshake_deadline_s);
      if (c.wait) next_deadline_s = std::min(next_deadline_s, c.wait->deadline_s);
    }
    next_deadline_s = std::min(next_deadline_s, leases.next_deadline_s());
    next_deadline_s =
        std::min(next_deadline_s, unjoined_log.next_flush_s(options.admission.log_lines_per_s));
    int timeout_ms = -1;
    if (next_deadline_s < std::numeric_limits<double>::infinity()) {
      timeout_ms = static_cast<int>(
          std::clamp((next_deadline_s - store_wire::now_s()) * 1000.0 + 1.0, 0.0, 1e9));
    }
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      log(std::string("store: poll failed: ") + std::strerror(errno));
      break;
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      auto it = connections.find(fds[i].fd);
      if (it == connections.end()) continue;
      Connection& c = it->second;
      const short ev = fds[i].revents;
      if (ev & (POLLERR | POLLNVAL)) {
        close_fd(c.fd);
        continue;
      }
      if (ev & POLLOUT) flush(c);
      if (c.fd >= 0 && (ev & POLLIN)) on_readable(c);
      if (c.fd >= 0 && (ev & (POLLHUP | POLLRDHUP)) && !(ev & POLLIN)) {
        if (c.joined) log("store: " + c.peer + " disconnected");
        close_fd(c.fd);
      }
    }
    expire_leases();
    const double now = store_wire::now_s();
    for (auto& [fd, c] : connections) {
      if (c.fd >= 0 && !c.joined && !c.close_after_flush && now >= c.handshake_deadline_s) {
        cut(c, "did not join within " + std::to_string(options.handshake_timeout_s) + " s");
      }
      if (c.fd >= 0 && c.wait && now >= c.wait->deadline_s) try_complete_wait(c, true);
    }
    end_held_leases();
    std::erase_if(connections, [](const auto& kv) { return kv.second.fd < 0; });
    flush_unjoined_log(false);
    // Accepting last: a node that answered its greeting is served before newcomers may shed it.
    if ((fds[0].revents & POLLIN) || (paused && store_wire::now_s() >= accept_paused_until_s))
      accept_new();
  }
  for (auto& [fd, c] : connections) close_fd(c.fd);
  connections.clear();
  flush_unjoined_log(true);
}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->run_config_hash = impl_->options.identity.config_hash;
  if (impl_->options.identity.secret.empty()) {
    throw ConfigError("store server: the shared secret is empty (give a non-empty secret file)");
  }
}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::uint16_t TcpStoreServer::start() {
  MERIDIAN_CHECK(!impl_->thread.joinable());
  auto& o = impl_->options;
  const store_wire::Listener l =
      store_wire::listen_on(o.bind_host, o.port, SOMAXCONN, "store server");
  impl_->listen_fd = l.fd;
  impl_->bound_port = l.port;
  impl_->reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (::pipe2(impl_->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw ConfigError(std::string("store server: pipe failed: ") + std::strerror(errno));
  }
  impl_->stopping = false;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  return impl_->bound_port;
}

void TcpStoreServer::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stopping = true;
  const char byte = 1;
  [[maybe_unused]] const ssize_t rc = ::write(impl_->wake_pipe[1], &byte, 1);
  impl_->thread.join();
  close_fd(impl_->listen_fd);
  close_fd(impl_->wake_pipe[0]);
  close_fd(impl_->wake_pipe[1]);
  close_fd(impl_->reserve_fd);
}

std::uint16_t TcpStoreServer::port() const { return impl_->bound_port; }

TcpStoreServer::Stats TcpStoreServer::stats() const {
  return {impl_->joined.load(), impl_->refused.load(), impl_->cut_off.load(),
          impl_->requests.load(), impl_->shed.load()};
}

}  // namespace meridian
