// etcd's answers parsed from bytes (etcd_wire.h).
#include "engine/backends/store_etcd/etcd_wire.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/core/util/base64.h"

namespace meridian::etcd_wire {
namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// A whole decimal (or, base 16, hexadecimal) number; nullopt for anything else or an overflow.
std::optional<std::uint64_t> whole_number(const std::string& text, int base) {
  if (text.empty() || !std::isxdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, base);
  if (errno == ERANGE || end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

std::int64_t i64_of(const json& j, const char* field) {
  if (!j.is_object()) return 0;
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  const json& v = *it;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    throw ProtocolError(std::string("etcd: field '") + field + "' is out of range");
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const bool negative = !s.empty() && s[0] == '-';
    const auto magnitude = whole_number(negative ? s.substr(1) : s, 10);
    if (magnitude && *magnitude <= static_cast<std::uint64_t>(INT64_MAX))
      return negative ? -static_cast<std::int64_t>(*magnitude)
                      : static_cast<std::int64_t>(*magnitude);
  }
  throw ProtocolError(std::string("etcd: field '") + field + "' is not an integer");
}

std::string bytes_of(const json& j, const char* field) {
  if (!j.is_object()) return {};
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw ProtocolError(std::string("etcd: field '") + field + "' is not text");
  return base64_decode(it->get<std::string>());
}

bool bool_of(const json& j, const char* field) {
  if (!j.is_object()) return false;
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean())
    throw ProtocolError(std::string("etcd: field '") + field + "' is not true or false");
  return it->get<bool>();
}

std::string text_of(const json& j, const char* field) {
  if (!j.is_object()) return {};
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw ProtocolError(std::string("etcd: field '") + field + "' is not text");
  return it->get<std::string>();
}

const json& member(const json& j, const char* field) {
  static const json kEmpty = json::object();
  if (!j.is_object()) return kEmpty;
  const auto it = j.find(field);
  return it == j.end() ? kEmpty : *it;
}

std::string prefix_end(std::string p) {
  while (!p.empty() && static_cast<unsigned char>(p.back()) == 0xff) p.pop_back();
  if (p.empty()) return std::string(1, '\0');
  p.back() = static_cast<char>(static_cast<unsigned char>(p.back()) + 1);
  return p;
}

std::string error_message(const json& answer) {
  const json& e = member(answer, "error");
  if (e.is_string()) return e.get<std::string>();
  const json& inner = member(e, "message");
  if (inner.is_string()) return inner.get<std::string>();
  const json& outer = member(answer, "message");
  if (outer.is_string()) return outer.get<std::string>();
  return answer.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool unavailable(int status, const std::string& message) {
  if (status == 503 || status == 504 || status == 429) return true;
  for (const char* needle : {"no leader", "leader changed", "timed out", "not capable", "stopped",
                             "unhealthy", "too many requests", "not leader", "Unavailable"})
    if (message.find(needle) != std::string::npos) return true;
  return false;
}

bool auth_failure(int status, const std::string& message) {
  return status == 401 || message.find("invalid auth token") != std::string::npos ||
         message.find("user name is empty") != std::string::npos;
}

json parse_json(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw ProtocolError("etcd " + where + ": malformed JSON answer: '" + text.substr(0, 120) + "'");
  return j;
}

// --- HTTP ---------------------------------------------------------------------------------------

HttpAnswer::HttpAnswer(std::string& buf, Fill fill, double deadline_s)
    : buf_(buf), fill_(std::move(fill)) {
  const std::string status_line = take_line(deadline_s);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
    throw ProtocolError("etcd: not an HTTP answer: '" + status_line.substr(0, 80) + "'");
  const auto code = whole_number(status_line.substr(9, 3), 10);
  if (!code || status_line[8] != ' ' || (status_line.size() > 12 && status_line[12] != ' '))
    throw ProtocolError("etcd: no status code in '" + status_line.substr(0, 80) + "'");
  status = static_cast<int>(*code);
  std::size_t head_bytes = 0;
  for (;;) {
    const std::string line = take_line(deadline_s);
    if (line.empty()) break;
    head_bytes += line.size();
    if (head_bytes > kMaxHeadBytes) throw ProtocolError("etcd: answer headers too long");
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (name == "content-length") {
      length_ = whole_number(value, 10);
      if (!length_) throw ProtocolError("etcd: Content-Length '" + value.substr(0, 40) + "'");
      if (*length_ > kMaxBodyBytes) throw ProtocolError("etcd: answer body too large");
    } else if (name == "transfer-encoding") {
      chunked_ = lower(value).find("chunked") != std::string::npos;
    } else if (name == "connection") {
      close = lower(value).find("close") != std::string::npos;
    }
  }
  if (!chunked_ && !length_) close = true;  // the body ends with the connection
}

bool HttpAnswer::next(std::string& out, double deadline_s) {
  if (done_) return false;
  if (chunked_) {
    const std::string size_line = take_line(deadline_s);
    // A chunk size may carry extensions after ';' (RFC 9112 7.1.1).
    const auto n = whole_number(size_line.substr(0, size_line.find(';')), 16);
    if (!n) throw ProtocolError("etcd: chunk size '" + size_line.substr(0, 40) + "'");
    if (*n > kMaxBodyBytes || out.size() + *n > kMaxBodyBytes)
      throw ProtocolError("etcd: chunk too large");
    if (*n == 0) {
      while (!take_line(deadline_s).empty()) {
      }
      done_ = true;
      return false;
    }
    out += take_bytes(*n, deadline_s);
    if (!take_line(deadline_s).empty()) throw ProtocolError("etcd: a chunk longer than its size");
    return true;
  }
  done_ = true;
  if (length_) {
    out += take_bytes(*length_, deadline_s);
    return true;
  }
  while (buf_.size() <= kMaxBodyBytes && fill_(deadline_s)) {
  }
  if (buf_.size() > kMaxBodyBytes) throw ProtocolError("etcd: answer body too large");
  out += buf_;
  buf_.clear();
  return true;
}

std::string HttpAnswer::take_line(double deadline_s) {
  for (;;) {
    if (const auto eol = buf_.find("\r\n"); eol != std::string::npos) {
      std::string line = buf_.substr(0, eol);
      buf_.erase(0, eol + 2);
      return line;
    }
    if (buf_.size() > kMaxHeadBytes) throw ProtocolError("etcd: answer line too long");
    if (!fill_(deadline_s)) throw PeerLostError(-1, "etcd: connection closed mid-answer");
  }
}

std::string HttpAnswer::take_bytes(std::size_t n, double deadline_s) {
  while (buf_.size() < n)
    if (!fill_(deadline_s)) throw PeerLostError(-1, "etcd: connection closed mid-answer");
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

// --- etcd's answers -----------------------------------------------------------------------------

std::pair<int, json> unary_answer(int http_status, const std::string& body,
                                  const std::string& where) {
  json j = parse_json(body, where);
  if (j.is_object() && j.contains("result")) return {http_status, j["result"]};
  const json& error = member(j, "error");
  if (j.is_object() && j.contains("error") && error.is_object() && http_status == 200) {
    const std::int64_t code = i64_of(error, "http_code");
    http_status = code > 0 && code < 1000 ? static_cast<int>(code) : 500;
  }
  return {http_status, j};
}

std::uint64_t header_revision(const json& answer) {
  const std::int64_t revision = i64_of(member(answer, "header"), "revision");
  if (revision < 0) throw ProtocolError("etcd: negative revision " + std::to_string(revision));
  return static_cast<std::uint64_t>(revision);
}

std::optional<std::string> first_value(const json& range_answer) {
  const json& kvs = member(range_answer, "kvs");
  if (!kvs.is_array() || kvs.empty()) return std::nullopt;
  return bytes_of(kvs[0], "value");
}

std::vector<std::pair<std::string, std::string>> range_entries(const json& range_answer,
                                                               const std::string& prefix,
                                                               std::size_t strip, bool keys_only) {
  std::vector<std::pair<std::string, std::string>> out;
  const json& kvs = member(range_answer, "kvs");
  if (!kvs.is_array()) return out;
  for (const json& kv : kvs) {
    std::string key = bytes_of(kv, "key");
    if (key.rfind(prefix, 0) != 0 || key.size() < strip)
      throw ProtocolError("etcd store: range answered key '" + key + "' outside '" + prefix + "'");
    out.emplace_back(key.substr(strip), keys_only ? std::string() : bytes_of(kv, "value"));
  }
  return out;
}

std::optional<std::string> compare_set_result(const json& txn_answer, const std::string& desired) {
  if (bool_of(txn_answer, "succeeded")) return desired;
  const json& responses = member(txn_answer, "responses");
  if (!responses.is_array() || responses.empty())
    throw ProtocolError("etcd store: a failed transaction without its range answer");
  return first_value(member(responses[0], "response_range"));
}

bool watch_message(const std::string& line, const std::vector<std::string>& prefixes,
                   std::uint64_t after_revision, WatchState& state, const std::string& where) {
  const json message = parse_json(line, where + " watch");
  if (message.is_object() && message.contains("error"))
    throw PeerLostError(-1, error_message(message));
  const json& result = member(message, "result");
  state.created = true;
  state.revision = std::max(state.revision, header_revision(result));
  // etcd sends the history of a watch that starts in the past from a loop that runs every
  // 100 ms. When anything changed since after_revision, the revision now is the answer at once:
  // the caller's re-check reads at least that state (Store::watch).
  if (bool_of(result, "created") && state.revision > after_revision) return true;
  if (bool_of(result, "canceled") || i64_of(result, "compact_revision") > 0)
    return true;  // compacted past after_revision: the caller re-checks
  bool changed = false;
  const json& events = member(result, "events");
  if (events.is_array()) {
    for (const json& event : events) {
      const json& kv = member(event, "kv");
      const std::string key = bytes_of(kv, "key");
      const std::int64_t mod = i64_of(kv, "mod_revision");
      if (mod < 0) throw ProtocolError("etcd: negative mod_revision " + std::to_string(mod));
      state.revision = std::max(state.revision, static_cast<std::uint64_t>(mod));
      for (const std::string& p : prefixes) changed = changed || key.rfind(p, 0) == 0;
    }
  }
  return changed;
}

std::optional<RunRecord> parse_run_record(const std::string& text) {
  const json r = json::parse(text, nullptr, false);
  if (r.is_discarded() || !r.is_object()) return std::nullopt;
  RunRecord out;
  for (auto [field, into] : {std::pair{"version", &out.version},
                             std::pair{"config_hash", &out.config_hash},
                             std::pair{"nonce", &out.nonce}, std::pair{"proof", &out.proof_hex}}) {
    const auto it = r.find(field);
    if (it == r.end() || !it->is_string()) return std::nullopt;
    *into = it->get<std::string>();
  }
  if (out.nonce.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  for (std::size_t i = 0; i < out.nonce.size(); i += 2) {
    const auto byte = whole_number(out.nonce.substr(i, 2), 16);
    if (!byte) return std::nullopt;
    bytes += static_cast<char>(*byte);
  }
  out.nonce = std::move(bytes);
  return out;
}

}  // namespace meridian::etcd_wire
