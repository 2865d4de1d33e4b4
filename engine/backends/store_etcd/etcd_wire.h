// What EtcdStore reads from etcd's v3 JSON gateway, parsed from bytes alone: HTTP/1.1 answers
// (Content-Length, chunked or until close), etcd's JSON fields (int64 as strings, base64 bytes),
// the answers of ranges, transactions and leases, and the lines of a streamed watch. No sockets
// and no TLS here (etcd_store.cc), so that the fuzz target (tests/fuzz/etcd_answer_fuzz.cc)
// reaches every parser of the client. Errors: ProtocolError for a malformed answer, PeerLostError
// when the stream ends mid-answer or a watch reports an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meridian::etcd_wire {

using json = nlohmann::json;

inline constexpr std::size_t kMaxHeadBytes = 64 << 10;
inline constexpr std::size_t kMaxBodyBytes = 256u << 20;

// etcd's int64 fields arrive as JSON strings (proto3 JSON) and are omitted when zero.
std::int64_t i64_of(const json& j, const char* field);
// A base64 bytes field; "" when absent.
std::string bytes_of(const json& j, const char* field);
// A bool field; false when absent (proto3 JSON omits false).
bool bool_of(const json& j, const char* field);
// A text field; "" when absent.
std::string text_of(const json& j, const char* field);
// j[field], or an empty object when absent or when j is no object.
const json& member(const json& j, const char* field);
// The range_end that makes [p, end) every key starting with p (etcd's prefix convention).
std::string prefix_end(std::string p);
// etcd's error message in an answer (its whole text when it has none).
std::string error_message(const json& answer);
// etcd's "try another member or later" answers: the request may succeed elsewhere or soon.
bool unavailable(int status, const std::string& message);
bool auth_failure(int status, const std::string& message);
// ProtocolError naming `where` for text that is not JSON.
json parse_json(const std::string& text, const std::string& where);

// An HTTP/1.1 answer read piece by piece (a watch is an endless chunked body) from `buf`, the
// bytes received and not yet consumed; `fill` appends more to it and returns false at the end
// of the stream (it may throw TimeoutError or PeerLostError at `deadline_s`).
class HttpAnswer {
 public:
  using Fill = std::function<bool(double deadline_s)>;
  HttpAnswer(std::string& buf, Fill fill, double deadline_s);
  // Appends the next piece of the body to `out`; false once the body has ended.
  bool next(std::string& out, double deadline_s);

  int status = 0;
  bool close = false;  // the server closes the connection after this answer

 private:
  std::string take_line(double deadline_s);
  std::string take_bytes(std::size_t n, double deadline_s);

  std::string& buf_;
  Fill fill_;
  std::optional<std::size_t> length_;
  bool chunked_ = false;
  bool done_ = false;
};

// A unary call's answer: (status, etcd's answer), the gateway's {"result": ...} unwrapped and
// an {"error": {"http_code": ..}} turned into that status.
std::pair<int, json> unary_answer(int http_status, const std::string& body, const std::string& where);

// The revision in an answer's header.
std::uint64_t header_revision(const json& answer);
// The first value of a range answer; nullopt when it found nothing.
std::optional<std::string> first_value(const json& range_answer);
// A range answer's (key less `strip` characters, value) pairs; every key must start with
// `prefix` (ProtocolError otherwise).
std::vector<std::pair<std::string, std::string>> range_entries(const json& range_answer,
                                                               const std::string& prefix,
                                                               std::size_t strip, bool keys_only);
// A compare-and-set transaction's answer (success: a put; failure: a range of the key): the
// value after it, `desired` when it succeeded.
std::optional<std::string> compare_set_result(const json& txn_answer, const std::string& desired);

// A watch stream, message by message (one JSON object per line).
struct WatchState {
  std::uint64_t revision = 0;  // the newest revision seen; starts at the caller's
  bool created = false;        // the first message (the watch created) has come
};
// Applies one line; true when the watch is over: a change under one of `prefixes` (full keys),
// a creation when etcd's revision had already moved past `after_revision`, or a cancellation
// (compacted). PeerLostError for an error message.
bool watch_message(const std::string& line, const std::vector<std::string>& prefixes,
                   std::uint64_t after_revision, WatchState& state, const std::string& where);

// The run record (`<prefix>run`, etcd_store.h): JSON {version, config_hash, nonce (hex),
// proof (hex)}. nullopt when the text is not one: not JSON, a field missing or not text, a
// nonce that is not whole bytes of hex.
struct RunRecord {
  std::string version;
  std::string config_hash;
  std::string nonce;      // bytes
  std::string proof_hex;  // HMAC-SHA256 in hex, compared as text
};
std::optional<RunRecord> parse_run_record(const std::string& text);

}  // namespace meridian::etcd_wire
