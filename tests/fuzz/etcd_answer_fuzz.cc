// Fuzz target: what the etcd store's client reads from etcd
// (engine/backends/store_etcd/etcd_wire.h): an HTTP/1.1 answer (status line, headers, a
// Content-Length, chunked or until-close body) delivered in pieces, then its body as each of the
// client's parsers reads it (a unary answer unwrapped, a range's values and entries, a
// compare-and-set's result, a lease's fields, the run record, and the body's lines as a watch
// stream). Each returns a result or throws ProtocolError / PeerLostError (the stream ended
// mid-answer, a watch's error message); anything else is a finding. Input: byte 0 = the size of the
// pieces the stream arrives in (1..256); the rest is the stream.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backends/store_etcd/etcd_wire.h"
#include "engine/core/error.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace meridian;
using namespace meridian::etcd_wire;

template <typename F>
void tolerate(F&& f) {
  try {
    f();
  } catch (const ProtocolError&) {
  } catch (const PeerLostError&) {
  }
}

void parse_body(const std::string& body) {
  const std::string prefix = "/meridian/kv/";
  tolerate([&] {
    const auto unwrapped = unary_answer(200, body, "fuzz");
    const int status = unwrapped.first;
    const json& answer = unwrapped.second;
    MERIDIAN_CHECK(status >= 0 && status < 1000);
    tolerate([&] { (void)header_revision(answer); });
    tolerate([&] { (void)first_value(answer); });
    tolerate([&] { (void)range_entries(answer, prefix, prefix.size(), false); });
    tolerate([&] { (void)compare_set_result(answer, "desired"); });
    tolerate([&] { (void)bool_of(answer, "succeeded"); });
    tolerate([&] { (void)text_of(answer, "token"); });
    for (const char* field : {"ID", "TTL", "deleted"})
      tolerate([&] { (void)i64_of(answer, field); });
    (void)unavailable(status, error_message(answer));
    (void)auth_failure(status, error_message(answer));
  });
  if (const auto record = parse_run_record(body)) MERIDIAN_CHECK(record->nonce.size() <= body.size());
  WatchState state{7, false};
  const std::vector<std::string> prefixes = {prefix + "mesh/", prefix + "gloo/"};
  tolerate([&] {
    for (std::size_t start = 0; start < body.size();) {
      const std::size_t eol = std::min(body.find('\n', start), body.size());
      const std::uint64_t before = state.revision;
      if (watch_message(body.substr(start, eol - start), prefixes, 7, state, "fuzz")) break;
      MERIDIAN_CHECK(state.revision >= before);
      start = eol + 1;
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::size_t piece = std::size_t{in.u8()} + 1;
  const std::string stream = in.rest();
  std::size_t delivered = 0;
  std::string buf;
  const auto fill = [&](double) {
    if (delivered >= stream.size()) return false;
    const std::size_t n = std::min(piece, stream.size() - delivered);
    buf.append(stream, delivered, n);
    delivered += n;
    return true;
  };
  std::string body;
  tolerate([&] {
    HttpAnswer answer(buf, fill, 0.0);
    MERIDIAN_CHECK(answer.status >= 0 && answer.status < 1000);
    while (answer.next(body, 0.0)) MERIDIAN_CHECK(body.size() <= kMaxBodyBytes);
  });
  parse_body(body.empty() ? stream : body);
  return 0;
}
