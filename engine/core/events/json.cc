// JSON writer implementation.
#include "engine/core/events/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace meridian {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_.push_back(',');
  body_ += json_quote(k);
  body_.push_back(':');
}

JsonObject& JsonObject::add(std::string_view k, double v) {
  key(k);
  body_ += json_number(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, std::int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, std::uint64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, std::string_view v) {
  key(k);
  body_ += json_quote(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const JsonObject& v) {
  key(k);
  body_ += v.str();
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<std::int64_t>& v) {
  key(k);
  body_.push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) body_.push_back(',');
    body_ += std::to_string(v[i]);
  }
  body_.push_back(']');
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<double>& v) {
  key(k);
  body_.push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) body_.push_back(',');
    body_ += json_number(v[i]);
  }
  body_.push_back(']');
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<std::string>& v) {
  key(k);
  body_.push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) body_.push_back(',');
    body_ += json_quote(v[i]);
  }
  body_.push_back(']');
  return *this;
}
JsonObject& JsonObject::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace meridian
