// A minimal JSON object writer for events and summaries: ordered keys, shortest round-trip
// numbers (std::to_chars), so the same values always give the same bytes. Writing only:
// readers (analysis/) use a full JSON library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meridian {

class JsonObject {
 public:
  JsonObject& add(std::string_view key, double v);
  JsonObject& add(std::string_view key, std::int64_t v);
  JsonObject& add(std::string_view key, std::uint64_t v);
  JsonObject& add(std::string_view key, int v) { return add(key, static_cast<std::int64_t>(v)); }
  JsonObject& add(std::string_view key, bool v);
  JsonObject& add(std::string_view key, std::string_view v);
  JsonObject& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  JsonObject& add(std::string_view key, const JsonObject& v);
  JsonObject& add(std::string_view key, const std::vector<std::int64_t>& v);
  JsonObject& add(std::string_view key, const std::vector<double>& v);
  JsonObject& add(std::string_view key, const std::vector<std::string>& v);
  // Inserts `json` verbatim as the value (the caller guarantees it is valid JSON).
  JsonObject& add_raw(std::string_view key, std::string_view json);

  bool empty() const { return body_.empty(); }
  // The object as one line: {"k":v,...}
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

// JSON string literal with escapes, quotes included.
std::string json_quote(std::string_view s);
// Shortest text that reads back as exactly `v`; non-finite values become null.
std::string json_number(double v);

}  // namespace meridian
