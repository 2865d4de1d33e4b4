// EtcdStore over etcd's v3 JSON gateway: an HTTP/1.1 client on POSIX sockets (Content-Length
// and chunked bodies, keep-alive connections pooled per endpoint), the failover loop, and the
// Store operations as ranges, transactions, leases and streamed watches.
#include "engine/backends/store_etcd/etcd_store.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine/backends/common/store_net.h"
#include "engine/backends/store_etcd/etcd_wire.h"
#include "engine/core/error.h"
#include "engine/core/util/base64.h"
#include "engine/core/util/hmac.h"

namespace meridian {
namespace {

using json = nlohmann::json;
using store_wire::now_s;
using namespace etcd_wire;

// One request on one endpoint. A write that a follower forwarded to a leader that died waits
// for etcd's own request timeout (7 s with the defaults): give up on it sooner and retry.
constexpr double kAttemptS = 2.0;
constexpr char kDataSpace[] = "kv/";  // Store keys: <prefix>kv/<key>; the run record: <prefix>run

// A request etcd answered but declined (not retried): the status and etcd's message.
class Declined : public Error {
 public:
  Declined(int status, const std::string& message, const std::string& what)
      : Error(what), status(status), message(message) {}
  int status;
  std::string message;
};

bool lease_not_found(const Declined& d) {
  return d.message.find("lease not found") != std::string::npos;
}

struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;  // TLS session over fd (etcds://), or none
  std::size_t endpoint = 0;
  std::string buf;  // received, not yet consumed
  bool reused = false;
};

void close_conn(Conn& c) {
  if (c.ssl != nullptr) SSL_free(c.ssl);
  if (c.fd >= 0) ::close(c.fd);
  c.ssl = nullptr;
  c.fd = -1;
}

std::string openssl_error() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    out += (out.empty() ? "" : "; ") + std::string(text);
  }
  return out.empty() ? "unknown TLS error" : out;
}

// Waits for what an SSL call that returned `rc` needs; false when the session ended cleanly.
bool tls_wait(Conn& c, int rc, double deadline_s, const char* doing) {
  switch (SSL_get_error(c.ssl, rc)) {
    case SSL_ERROR_WANT_READ:
      store_wire::wait_ready(c.fd, POLLIN, deadline_s, doing);
      return true;
    case SSL_ERROR_WANT_WRITE:
      store_wire::wait_ready(c.fd, POLLOUT, deadline_s, doing);
      return true;
    case SSL_ERROR_ZERO_RETURN:
      return false;
    case SSL_ERROR_SYSCALL:
      if (errno == 0 || ERR_peek_error() == 0) return false;  // closed without close_notify
      [[fallthrough]];
    default:
      throw PeerLostError(-1, std::string("etcd: TLS ") + doing + ": " + openssl_error());
  }
}

void send_to(Conn& c, const std::string& data, double deadline_s) {
  if (c.ssl == nullptr) return store_wire::send_all(c.fd, data, deadline_s);
  std::size_t sent = 0;
  while (sent < data.size()) {
    const int n = SSL_write(c.ssl, data.data() + sent, static_cast<int>(data.size() - sent));
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (!tls_wait(c, n, deadline_s, "sending to etcd")) {
      throw PeerLostError(-1, "etcd: TLS session closed while sending");
    }
  }
}

// Receives more bytes into c.buf; false at the end of the stream.
bool fill(Conn& c, double deadline_s) {
  char tmp[65536];
  if (c.ssl != nullptr) {
    for (;;) {
      const int n = SSL_read(c.ssl, tmp, sizeof tmp);
      if (n > 0) {
        c.buf.append(tmp, static_cast<std::size_t>(n));
        return true;
      }
      if (!tls_wait(c, n, deadline_s, "waiting for etcd's answer")) return false;
    }
  }
  for (;;) {
    store_wire::wait_ready(c.fd, POLLIN, deadline_s, "waiting for etcd's answer");
    const ssize_t rc = ::recv(c.fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (rc == 0) return false;
    if (rc < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw PeerLostError(-1, std::string("etcd: receive failed: ") + std::strerror(errno));
    }
    c.buf.append(tmp, static_cast<std::size_t>(rc));
    return true;
  }
}

// An HTTP answer read from `c`.
etcd_wire::HttpAnswer answer_on(Conn& c, double deadline_s) {
  return etcd_wire::HttpAnswer(
      c.buf, [&c](double d) { return fill(c, d); }, deadline_s);
}

std::string run_record_transcript(const std::string& nonce, const StoreIdentity& id) {
  // The TCP store's join transcript, with the record's nonce on both sides and a fixed claimant.
  store_wire::Nonce n{};
  std::copy_n(nonce.begin(), std::min(nonce.size(), n.size()), n.begin());
  return store_wire::join_transcript(n, "etcd-run-record", id.version, id.config_hash, n);
}

std::string hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  for (const char ch : bytes) {
    out += kDigits[static_cast<unsigned char>(ch) >> 4];
    out += kDigits[static_cast<unsigned char>(ch) & 15];
  }
  return out;
}

}  // namespace

// --- URL ---------------------------------------------------------------------------------------

bool is_etcd_url(const std::string& text) {
  return text.rfind("etcd://", 0) == 0 || text.rfind("etcds://", 0) == 0;
}

EtcdStoreOptions parse_etcd_url(const std::string& url, const std::string& what) {
  const auto fail = [&](const std::string& problem) -> ConfigError {
    return ConfigError(what + ": " + problem + " (expected etcd[s]://HOST:PORT[,HOST:PORT...]" +
                       "[/PREFIX][?OPTION=VALUE&...], got '" + url + "')");
  };
  const bool tls = url.rfind("etcds://", 0) == 0;
  if (!tls && url.rfind("etcd://", 0) != 0) throw fail("not an etcd:// or etcds:// URL");
  std::string rest = url.substr(tls ? 8 : 7);
  std::string query;
  if (const auto q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest.resize(q);
  }
  std::string path;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    path = rest.substr(slash + 1);
    rest.resize(slash);
  }
  EtcdStoreOptions o;
  o.tls = tls;
  std::stringstream hosts(rest);
  std::string item;
  while (std::getline(hosts, item, ',')) {
    const auto colon = item.rfind(':');
    if (item.empty()) throw fail("an empty endpoint");
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      throw fail("endpoint '" + item + "' is not HOST:PORT");
    std::string host = item.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    const std::string port_text = item.substr(colon + 1);
    char* end = nullptr;
    const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
    if (*end != '\0' || port == 0 || port > 65535)
      throw fail("endpoint '" + item + "': port '" + port_text + "' is not in 1..65535");
    o.endpoints.push_back({host, static_cast<std::uint16_t>(port)});
  }
  if (o.endpoints.empty()) throw fail("no endpoint");
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (const char ch : path)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && std::strchr("._-/", ch) == nullptr)
      throw fail("prefix '" + path + "' may hold only letters, digits and . _ - /");
  o.prefix = "/" + (path.empty() ? std::string("meridian") : path) + "/";
  std::string password_file;
  std::stringstream params(query);
  while (std::getline(params, item, '&')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (name == "user") {
      o.user = value;
    } else if (name == "password-file") {
      password_file = value;
    } else if (name == "cacert" || name == "cert" || name == "key") {
      if (!tls) throw fail("option '" + name + "' needs TLS: etcds://");
      (name == "cacert" ? o.ca_file : name == "cert" ? o.cert_file : o.key_file) = value;
    } else {
      throw fail("unknown option '" + name + "' (known: user, password-file, cacert, cert, key)");
    }
    if (value.empty()) throw fail("option '" + name + "' has no value");
  }
  if (o.user.empty() != password_file.empty()) throw fail("user and password-file go together");
  if (o.cert_file.empty() != o.key_file.empty()) throw fail("cert and key go together");
  if (!password_file.empty()) o.password = read_secret_file(password_file);
  return o;
}

// --- the client --------------------------------------------------------------------------------

struct EtcdStore::Impl {
  explicit Impl(EtcdStoreOptions o) : options(std::move(o)) {
    if (options.tls) tls_context();
  }
  ~Impl() {
    for (Conn& c : idle) close_conn(c);
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }

  // The TLS client context: the server must present a certificate that the CA file (or the
  // system's CAs) signed, for the endpoint's name or address; a client certificate if given.
  void tls_context() {
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) throw ConfigError("etcd store: TLS: " + openssl_error());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const bool loaded = options.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx) == 1
                                                : SSL_CTX_load_verify_locations(
                                                      ctx, options.ca_file.c_str(), nullptr) == 1;
    if (!loaded)
      throw ConfigError("etcd store: cacert '" + options.ca_file + "': " + openssl_error());
    if (!options.cert_file.empty()) {
      if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1)
        throw ConfigError("etcd store: cert '" + options.cert_file + "': " + openssl_error());
      if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(ctx) != 1)
        throw ConfigError("etcd store: key '" + options.key_file + "': " + openssl_error());
    }
  }

  // The TLS handshake on a new connection, checking the server's name or address.
  void handshake(Conn& c, const std::string& host, double deadline_s) {
    c.ssl = SSL_new(ctx);
    if (c.ssl == nullptr || SSL_set_fd(c.ssl, c.fd) != 1)
      throw PeerLostError(-1, "etcd: TLS: " + openssl_error());
    X509_VERIFY_PARAM* param = SSL_get0_param(c.ssl);
    if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {  // not an address: a name
      SSL_set_tlsext_host_name(c.ssl, host.c_str());
      SSL_set1_host(c.ssl, host.c_str());
    }
    for (;;) {
      const int rc = SSL_connect(c.ssl);
      if (rc == 1) return;
      const long verify = SSL_get_verify_result(c.ssl);
      if (SSL_get_error(c.ssl, rc) != SSL_ERROR_WANT_READ &&
          SSL_get_error(c.ssl, rc) != SSL_ERROR_WANT_WRITE && verify != X509_V_OK)
        throw PeerLostError(-1,
                            "etcd " + host + ": TLS handshake: the server's certificate " +
                                "failed verification: " + X509_verify_cert_error_string(verify));
      if (!tls_wait(c, rc, deadline_s, "handshake"))
        throw PeerLostError(-1, "etcd " + host + ": TLS handshake: closed by the server");
    }
  }

  std::string where(std::size_t endpoint) const {
    const EtcdEndpoint& e = options.endpoints[endpoint];
    return e.host + ":" + std::to_string(e.port);
  }

  std::string endpoint_list() const {
    std::string out;
    for (std::size_t i = 0; i < options.endpoints.size(); ++i) out += (i ? "," : "") + where(i);
    return out;
  }

  std::size_t current_endpoint() {
    std::lock_guard<std::mutex> lock(mu);
    return current;
  }

  // --- Quorum loss: from a call that saw every endpoint fail in turn until the next answer.
  // The lines are built under the lock and logged outside it.
  void note_unreachable(const std::string& what, const std::string& last) {
    std::string line;
    {
      std::lock_guard<std::mutex> lock(mu);
      const double t = now_s();
      if (outage_since_s < 0) {
        outage_since_s = outage_logged_s = t;
        line = "etcd store " + endpoint_list() + ": no quorum: no endpoint answered " + what +
               " (last: " + last + "); retrying";
      } else if (t - outage_logged_s >= options.outage_log_interval_s) {
        outage_logged_s = t;
        line = "etcd store " + endpoint_list() + ": still no quorum after " +
               seconds_text(t - outage_since_s) + " (last: " + last + ")";
      }
    }
    if (!line.empty() && options.log) options.log(line);
  }

  void note_reachable() {
    std::string line;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (outage_since_s < 0) return;
      line = "etcd store " + endpoint_list() + ": quorum back after " +
             seconds_text(now_s() - outage_since_s);
      outage_since_s = -1;
    }
    if (options.log) options.log(line);
  }

  static std::string seconds_text(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", s);
    return text;
  }

  void move_on_from(std::size_t endpoint) {
    std::lock_guard<std::mutex> lock(mu);
    if (current == endpoint) current = (current + 1) % options.endpoints.size();
  }

  // A pooled connection to `endpoint`, or a new one.
  Conn take(std::size_t endpoint, double deadline_s, bool pooled = true) {
    if (pooled) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = idle.begin(); it != idle.end(); ++it) {
        if (it->endpoint != endpoint) continue;
        Conn c = std::move(*it);
        idle.erase(it);
        c.reused = true;
        return c;
      }
    }
    const EtcdEndpoint& e = options.endpoints[endpoint];
    Conn c;
    const double attempt_deadline_s = std::min(deadline_s, now_s() + kAttemptS);
    c.fd = store_wire::dial_once(e.host, e.port, attempt_deadline_s);
    c.endpoint = endpoint;
    if (ctx != nullptr) {
      try {
        handshake(c, e.host, attempt_deadline_s);
      } catch (...) {
        close_conn(c);
        throw;
      }
    }
    return c;
  }

  void give_back(Conn c) {
    std::lock_guard<std::mutex> lock(mu);
    idle.push_back(std::move(c));
  }

  // Sends one POST on `c` and reads the answer's head.
  std::string request_text(const Conn& c, const std::string& path, const std::string& body) {
    std::string req =
        "POST " + path + " HTTP/1.1\r\nHost: " + where(c.endpoint) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n";
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!token.empty()) req += "Authorization: " + token + "\r\n";
    }
    return req + "\r\n" + body;
  }

  // One request on one endpoint: (HTTP status, JSON answer, streamed results unwrapped). The
  // connection goes back to the pool after a complete answer, and is closed otherwise.
  std::pair<int, json> exchange(Conn c, const std::string& path, const std::string& body,
                                double deadline_s) {
    std::string text;
    int status = 0;
    try {
      send_to(c, request_text(c, path, body), deadline_s);
      HttpAnswer answer = answer_on(c, deadline_s);
      while (answer.next(text, deadline_s)) {
      }
      status = answer.status;
      if (answer.close) {
        close_conn(c);
      } else {
        give_back(std::move(c));
      }
    } catch (...) {
      close_conn(c);
      throw;
    }
    return unary_answer(status, text, where(c.endpoint) + " " + path);
  }

  // A unary call with failover (see etcd_store.h); returns etcd's answer.
  json call(const std::string& path, const json& request, double deadline_s) {
    const std::string body = request.dump();
    std::string last = "no endpoint tried";
    double backoff_s = 0.02;
    std::size_t tries = 0;
    bool reauthenticated = false;
    for (;;) {
      const std::size_t endpoint = current_endpoint();
      bool fresh_retry = false;
      try {
        Conn c = take(endpoint, deadline_s);
        const bool reused = c.reused;
        try {
          auto [status, answer] =
              exchange(std::move(c), path, body, std::min(deadline_s, now_s() + kAttemptS));
          const std::string message = status == 200 ? std::string() : error_message(answer);
          if (!unavailable(status, message)) note_reachable();  // a member with a leader answered
          if (status == 200) return answer;
          if (auth_failure(status, message) && !options.user.empty() && !reauthenticated &&
              path != "/v3/auth/authenticate") {
            reauthenticated = true;
            authenticate(deadline_s);
            continue;
          }
          if (!unavailable(status, message)) {
            throw Declined(status, message,
                           "etcd " + where(endpoint) + " " + path + ": " + message);
          }
          last = where(endpoint) + ": " + message;
        } catch (const PeerLostError&) {
          if (!reused) throw;
          fresh_retry = true;  // the member closed an idle connection: retry on a new one
        }
      } catch (const PeerLostError& e) {
        last = e.what();
      } catch (const TimeoutError& e) {
        last = where(endpoint) + ": " + e.what();
      }
      if (fresh_retry) continue;
      move_on_from(endpoint);
      if (++tries % options.endpoints.size() == 0) {
        note_unreachable(path, last);
        const double left_s = deadline_s - now_s();
        if (left_s > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(std::min(backoff_s, left_s)));
        backoff_s = std::min(backoff_s * 2, 0.5);
      }
      if (now_s() >= deadline_s)
        throw PeerLostError(-1, "etcd store: no endpoint of " + endpoint_list() + " answered " +
                                    path + " in time (last: " + last + ")");
    }
  }

  json rpc(const std::string& path, const json& request) {
    return call(path, request, now_s() + options.io_timeout_s);
  }

  void authenticate(double deadline_s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      token.clear();
    }
    json answer;
    try {
      answer = call("/v3/auth/authenticate",
                    {{"name", options.user}, {"password", options.password}}, deadline_s);
    } catch (const Declined& d) {
      throw ConfigError("etcd store: user '" + options.user + "' could not log in: " + d.message);
    }
    std::lock_guard<std::mutex> lock(mu);
    token = text_of(answer, "token");
  }

  std::string full(const std::string& key) const { return options.prefix + kDataSpace + key; }

  // (value if present, the store's revision).
  std::pair<std::optional<std::string>, std::uint64_t> range_one(const std::string& etcd_key) {
    const json answer = rpc("/v3/kv/range", {{"key", base64_encode(etcd_key)}});
    return {first_value(answer), header_revision(answer)};
  }

  std::vector<std::pair<std::string, std::string>> range_prefix(const std::string& prefix,
                                                                bool keys_only) {
    const std::string p = full(prefix);
    json request = {{"key", base64_encode(p)}, {"range_end", base64_encode(prefix_end(p))}};
    if (keys_only) request["keys_only"] = true;
    return range_entries(rpc("/v3/kv/range", request), p, full("").size(), keys_only);
  }

  std::uint64_t revision() {
    const json answer =
        rpc("/v3/kv/range", {{"key", base64_encode(options.prefix + "run")}, {"count_only", true}});
    return header_revision(answer);
  }

  // compare_set as one transaction; `lease` 0 = none.
  std::optional<std::string> compare_set(const std::string& etcd_key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired, std::int64_t lease) {
    const std::string k = base64_encode(etcd_key);
    json compare = {{"key", k}, {"result", "EQUAL"}};
    if (expected) {
      compare["target"] = "VALUE";
      compare["value"] = base64_encode(*expected);
    } else {
      compare["target"] = "CREATE";
      compare["create_revision"] = "0";
    }
    json put = {{"key", k}, {"value", base64_encode(desired)}};
    if (lease > 0) put["lease"] = std::to_string(lease);
    const json txn = {{"compare", json::array({compare})},
                      {"success", json::array({{{"request_put", put}}})},
                      {"failure", json::array({{{"request_range", {{"key", k}}}}})}};
    return compare_set_result(rpc("/v3/kv/txn", txn), desired);
  }

  // Follows a watch stream from `after_revision` until an event under one of `prefixes` (full
  // etcd keys) or the deadline; returns the revision then (see Store::watch).
  std::uint64_t watch(const std::vector<std::string>& prefixes, std::uint64_t after_revision,
                      double deadline_s) {
    std::string common = prefixes[0];
    for (const std::string& p : prefixes) {
      std::size_t n = 0;
      while (n < common.size() && n < p.size() && common[n] == p[n]) ++n;
      common.resize(n);
    }
    const json request = {{"create_request",
                           {{"key", base64_encode(common)},
                            {"range_end", base64_encode(prefix_end(common))},
                            {"start_revision", std::to_string(after_revision + 1)}}}};
    const std::string body = request.dump();
    const double connect_deadline_s = now_s() + options.io_timeout_s;
    std::string last = "no endpoint tried";
    std::size_t tries = 0;
    for (;;) {
      const std::size_t endpoint = current_endpoint();
      std::optional<Conn> conn;
      try {
        conn = take(endpoint, connect_deadline_s, /*pooled=*/false);
        const double first_deadline_s = std::min(connect_deadline_s, now_s() + kAttemptS);
        send_to(*conn, request_text(*conn, "/v3/watch", body), first_deadline_s);
        HttpAnswer answer = answer_on(*conn, first_deadline_s);
        if (answer.status != 200) {
          std::string text;
          while (answer.next(text, first_deadline_s)) {
          }
          const std::string message = error_message(parse_json(text, where(endpoint)));
          if (!unavailable(answer.status, message))
            throw Declined(answer.status, message,
                           "etcd " + where(endpoint) + " watch: " + message);
          throw PeerLostError(-1, where(endpoint) + ": " + message);
        }
        // No note_reachable() here: a member without a leader may still accept a watch; the
        // linearizable unary calls tell when the quorum is back.
        WatchState state{after_revision, false};
        std::string pending;
        for (;;) {
          // Whole lines are whole messages (the gateway ends each with a newline).
          for (auto eol = pending.find('\n'); eol != std::string::npos; eol = pending.find('\n')) {
            const std::string line = pending.substr(0, eol);
            pending.erase(0, eol + 1);
            if (watch_message(line, prefixes, after_revision, state, where(endpoint))) {
              close_conn(*conn);
              return state.revision;
            }
          }
          bool more = false;
          try {
            // The first message (the watch created, with the revision now) is waited for
            // whatever the timeout, so that even a zero-length wait answers the revision.
            more = answer.next(pending, state.created ? deadline_s
                                                      : std::max(deadline_s, first_deadline_s));
          } catch (const TimeoutError&) {
            close_conn(*conn);
            return state.revision;  // the wait ran out: no change under the prefixes
          }
          if (!more) {
            // The member ended the stream (it is stopping): the caller re-checks and comes back.
            close_conn(*conn);
            move_on_from(endpoint);
            return state.revision;
          }
        }
      } catch (const PeerLostError& e) {
        last = e.what();
      } catch (const TimeoutError& e) {
        last = where(endpoint) + ": " + e.what();
      } catch (...) {
        if (conn) close_conn(*conn);
        throw;
      }
      if (conn) close_conn(*conn);
      move_on_from(endpoint);
      if (++tries % options.endpoints.size() == 0) {
        note_unreachable("a watch", last);
        if (now_s() >= std::min(deadline_s, connect_deadline_s)) {
          if (now_s() < connect_deadline_s) return after_revision;  // the wait ran out
          throw PeerLostError(-1, "etcd store: no endpoint of " + endpoint_list() +
                                      " answered a watch in time (last: " + last + ")");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  void check_run_record() {
    const StoreIdentity& id = options.identity;
    const std::string key = options.prefix + "run";
    std::optional<std::string> record = range_one(key).first;
    if (!record) {
      const store_wire::Nonce nonce = store_wire::random_nonce();
      const std::string nonce_bytes(reinterpret_cast<const char*>(nonce.data()), nonce.size());
      const Sha256Digest proof = hmac_sha256(id.secret, run_record_transcript(nonce_bytes, id));
      const json mine = {
          {"version", id.version},
          {"config_hash", id.config_hash},
          {"nonce", hex(nonce_bytes)},
          {"proof", hex(std::string(reinterpret_cast<const char*>(proof.data()), proof.size()))}};
      record = compare_set(key, std::nullopt, mine.dump(), 0);
    }
    const std::string here = "etcd store " + endpoint_list() + " prefix " + options.prefix;
    const std::optional<RunRecord> r = parse_run_record(record.value_or(""));
    if (!r)
      throw ConfigError(here + ": '" + key + "' is not a meridian run record; give the run its " +
                        "own prefix (etcd://HOSTS/PREFIX)");
    const std::string& version = r->version;
    const std::string& config_hash = r->config_hash;
    if (version != id.version)
      throw ConfigError(here + " refused node '" + options.client_id + "': the run uses meridian " +
                        version + ", this node is " + id.version);
    if (config_hash != id.config_hash)
      throw ConfigError(here + " refused node '" + options.client_id +
                        "': the run there has a different configuration (hash " + config_hash +
                        "); give this run its own prefix or remove the old one (etcdctl del " +
                        "--prefix " + options.prefix + ")");
    const Sha256Digest expected = hmac_sha256(id.secret, run_record_transcript(r->nonce, id));
    if (r->proof_hex !=
        hex(std::string(reinterpret_cast<const char*>(expected.data()), expected.size())))
      throw ConfigError(here + " refused node '" + options.client_id +
                        "': the run record was not written with this node's secret (a wrong " +
                        "--secret-file, or another run under this prefix)");
  }

  EtcdStoreOptions options;
  SSL_CTX* ctx = nullptr;   // etcds:// only
  std::mutex mu;            // guards idle, current, token
  std::vector<Conn> idle;   // keep-alive connections, any endpoint
  std::size_t current = 0;  // the endpoint that answered last
  std::string token;        // etcd auth token ("" = none)
  double outage_since_s = -1;   // when the quorum loss was first seen; < 0: none (guarded by mu)
  double outage_logged_s = 0;   // its last line (guarded by mu)
};

EtcdStore::EtcdStore(EtcdStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  if (s.options.endpoints.empty()) throw ConfigError("etcd store: no endpoint given");
  if (s.options.identity.secret.empty())
    throw ConfigError("etcd store: the shared secret is empty (give a non-empty secret file)");
  if (s.options.prefix.empty() || s.options.prefix.back() != '/')
    throw ConfigError("etcd store: the prefix '" + s.options.prefix + "' must end with '/'");
  const double deadline_s = now_s() + s.options.connect_timeout_s;
  if (!s.options.user.empty()) s.authenticate(deadline_s);
  // The first contact may wait for the cluster (members starting, electing a leader).
  s.call("/v3/kv/range", {{"key", base64_encode(s.options.prefix + "run")}, {"count_only", true}},
         deadline_s);
  s.check_run_record();
}

EtcdStore::~EtcdStore() = default;

void EtcdStore::set(const std::string& key, const std::string& value) {
  impl_->rpc("/v3/kv/put",
             {{"key", base64_encode(impl_->full(key))}, {"value", base64_encode(value)}});
}

std::string EtcdStore::get(const std::string& key, double timeout_s) {
  const double deadline_s = now_s() + std::max(timeout_s, 0.0);
  for (;;) {
    const auto [value, revision] = impl_->range_one(impl_->full(key));
    if (value) return *value;
    const double left_s = deadline_s - now_s();
    if (left_s <= 0)
      throw TimeoutError("store get '" + key + "': absent after " + std::to_string(timeout_s) +
                         " s");
    impl_->watch({impl_->full(key)}, revision, deadline_s);
  }
}

std::optional<std::string> EtcdStore::try_get(const std::string& key) {
  return impl_->range_one(impl_->full(key)).first;
}

void EtcdStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  const double deadline_s = now_s() + std::max(timeout_s, 0.0);
  for (const std::string& key : keys) get(key, std::max(deadline_s - now_s(), 0.0));
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta) {
  // Read the value and its mod_revision, write value + delta if nobody wrote in between.
  const std::string k = base64_encode(impl_->full(key));
  for (;;) {
    const json read = impl_->rpc("/v3/kv/range", {{"key", k}});
    const json& kvs = member(read, "kvs");
    std::int64_t value = 0;
    std::int64_t mod_revision = 0;  // 0: absent
    if (kvs.is_array() && !kvs.empty()) {
      const std::string current = bytes_of(kvs[0], "value");
      mod_revision = i64_of(kvs[0], "mod_revision");
      std::size_t used = 0;
      try {
        value = std::stoll(current, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != current.size())
        throw ProtocolError("store add '" + key + "': the value '" + current.substr(0, 40) +
                            "' is not an integer");
    }
    const std::string next = std::to_string(value + delta);
    const json txn = {
        {"compare", json::array({{{"key", k},
                                  {"target", "MOD"},
                                  {"result", "EQUAL"},
                                  {"mod_revision", std::to_string(mod_revision)}}})},
        {"success",
         json::array({{{"request_put", {{"key", k}, {"value", base64_encode(next)}}}}})}};
    if (bool_of(impl_->rpc("/v3/kv/txn", txn), "succeeded")) return value + delta;
  }
}

std::optional<std::string> EtcdStore::compare_set(const std::string& key,
                                                  const std::optional<std::string>& expected,
                                                  const std::string& desired) {
  return impl_->compare_set(impl_->full(key), expected, desired, 0);
}

bool EtcdStore::erase(const std::string& key) {
  const json answer = impl_->rpc("/v3/kv/deleterange", {{"key", base64_encode(impl_->full(key))}});
  return i64_of(answer, "deleted") > 0;
}

std::vector<std::string> EtcdStore::list(const std::string& prefix) {
  std::vector<std::string> keys;
  for (auto& kv : impl_->range_prefix(prefix, true)) keys.push_back(std::move(kv.first));
  return keys;
}

std::vector<std::pair<std::string, std::string>> EtcdStore::read_prefix(const std::string& prefix) {
  return impl_->range_prefix(prefix, false);
}

std::int64_t EtcdStore::lease_grant(double ttl_s) {
  // etcd counts whole seconds: round up, so a lease never ends before ttl_s.
  const auto ttl = static_cast<std::int64_t>(std::max(1.0, std::ceil(ttl_s)));
  const json answer = impl_->rpc("/v3/lease/grant", {{"TTL", std::to_string(ttl)}});
  const std::int64_t id = i64_of(answer, "ID");
  if (id <= 0) throw ProtocolError("etcd store: lease grant answered no lease: " + answer.dump());
  return id;
}

double EtcdStore::keepalive(std::int64_t lease, double interval_s) {
  const json answer = impl_->rpc("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
  return i64_of(answer, "TTL") > 0 ? interval_s : -1.0;
}

bool EtcdStore::lease_revoke(std::int64_t lease) {
  try {
    impl_->rpc("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    return true;
  } catch (const Declined& d) {
    if (!lease_not_found(d)) throw;
    return false;
  }
}

std::optional<std::string> EtcdStore::compare_set_leased(const std::string& key,
                                                         const std::optional<std::string>& expected,
                                                         const std::string& desired,
                                                         std::int64_t lease) {
  try {
    return impl_->compare_set(impl_->full(key), expected, desired, lease);
  } catch (const Declined& d) {
    if (!lease_not_found(d)) throw;
    return try_get(key);  // the lease has ended: nothing stored
  }
}

std::uint64_t EtcdStore::watch(const std::vector<std::string>& prefixes,
                               std::uint64_t after_revision, double timeout_s) {
  if (prefixes.empty() || !(timeout_s > 0)) {
    const std::uint64_t now = impl_->revision();
    if (prefixes.empty() && timeout_s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s));
    return prefixes.empty() ? now : std::max(now, after_revision);
  }
  std::vector<std::string> full;
  for (const std::string& p : prefixes) full.push_back(impl_->full(p));
  return impl_->watch(full, after_revision, now_s() + timeout_s);
}

}  // namespace meridian
