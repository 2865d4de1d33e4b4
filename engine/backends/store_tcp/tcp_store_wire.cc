// The TCP store's wire helpers: field encoding, bounds-checked decoding and frames. See
// tcp_store_wire.h for the format.
#include "engine/backends/store_tcp/tcp_store_wire.h"

#include <cstring>

#include "engine/core/error.h"

namespace meridian::store_wire {

Writer& Writer::u8(std::uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}
Writer& Writer::u16(std::uint16_t v) { return u8(v >> 8).u8(v & 0xff); }
Writer& Writer::u32(std::uint32_t v) { return u16(v >> 16).u16(v & 0xffff); }
Writer& Writer::i64(std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  return u32(static_cast<std::uint32_t>(u >> 32)).u32(static_cast<std::uint32_t>(u));
}
Writer& Writer::str(std::string_view s) {
  MERIDIAN_CHECK_LE(s.size(), std::size_t{0xffffffffu});
  u32(static_cast<std::uint32_t>(s.size()));
  out_.append(s);
  return *this;
}
Writer& Writer::raw(const void* data, std::size_t n) {
  out_.append(static_cast<const char*>(data), n);
  return *this;
}
std::string Writer::frame() const {
  std::string out;
  out.reserve(4 + out_.size());
  const auto n = static_cast<std::uint32_t>(out_.size());
  const char prefix[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(prefix, 4);
  out.append(out_);
  return out;
}

void Reader::need(std::size_t n, const char* what) const {
  if (in_.size() - pos_ < n) {
    throw ProtocolError(std::string("store message truncated in field '") + what + "' (needs " +
                        std::to_string(n) + " bytes, " + std::to_string(in_.size() - pos_) +
                        " left)");
  }
}
Type Reader::type() { return static_cast<Type>(u8("type")); }
std::uint8_t Reader::u8(const char* what) {
  need(1, what);
  return static_cast<std::uint8_t>(in_[pos_++]);
}
std::uint16_t Reader::u16(const char* what) {
  const std::uint16_t hi = u8(what);
  return static_cast<std::uint16_t>((hi << 8) | u8(what));
}
std::uint32_t Reader::u32(const char* what) {
  const std::uint32_t hi = u16(what);
  return (hi << 16) | u16(what);
}
std::int64_t Reader::i64(const char* what) {
  const std::uint64_t hi = u32(what);
  return static_cast<std::int64_t>((hi << 32) | u32(what));
}
std::string Reader::str(const char* what, std::uint32_t max_bytes) {
  const std::uint32_t n = u32(what);
  if (n > max_bytes) {
    throw ProtocolError(std::string("store message field '") + what + "' claims " +
                        std::to_string(n) + " bytes, limit " + std::to_string(max_bytes));
  }
  need(n, what);
  std::string out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}
void Reader::raw(void* out, std::size_t n, const char* what) {
  need(n, what);
  std::memcpy(out, in_.data() + pos_, n);
  pos_ += n;
}
void Reader::finish(const char* what) const {
  if (pos_ != in_.size()) {
    throw ProtocolError(std::string("store message '") + what + "' has " +
                        std::to_string(in_.size() - pos_) + " unexpected trailing bytes");
  }
}

std::uint32_t decode_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string recv_frame(int fd, std::uint32_t max_body_bytes, double deadline_s) {
  unsigned char prefix[4];
  recv_exact(fd, reinterpret_cast<char*>(prefix), 4, deadline_s);
  const std::uint32_t n = decode_u32(prefix);
  if (n == 0 || n > max_body_bytes) {
    throw ProtocolError("store: frame claims " + std::to_string(n) + " bytes, limit " +
                        std::to_string(max_body_bytes));
  }
  std::string body(n, '\0');
  recv_exact(fd, body.data(), n, deadline_s);
  return body;
}

}  // namespace meridian::store_wire
