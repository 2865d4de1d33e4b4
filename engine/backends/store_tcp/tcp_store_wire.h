// The TCP store's wire format, shared by server and client: length-prefixed frames of typed,
// length-prefixed fields, and bounded blocking socket I/O. Internal to
// engine/backends/store_tcp/tcp_store*; not a general serialisation library.
//
// Frame:   u32 body_bytes (big-endian), body. body[0] is the message type.
// Join:    server HELLO(magic, protocol, nonce) -> client JOIN(id, version, config hash,
//          client nonce, HMAC(secret, join_transcript)) -> server WELCOME(HMAC proof) or
//          REFUSED(reason), then close.
// Request: one at a time per connection; reply status OK (+ result), TIMEOUT or ERROR (+ text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/backends/common/store_net.h"

namespace meridian::store_wire {

inline constexpr std::uint32_t kMagic = 0x4d524453;  // "MRDS"
// 2: READ_PREFIX (every key and value under a prefix in one reply).
// 3: leases (LEASE_GRANT, KEEPALIVE, LEASE_REVOKE, COMPARE_SET_LEASED) and WATCH.
// 4: LEASE_GRANT_HELD (a lease that also ends when the connection it was granted on closes);
//    LEASE_REVOKE answers whether the lease was alive.
inline constexpr std::uint16_t kProtocolVersion = 4;
inline constexpr std::uint32_t kMaxHandshakeFrameBytes = 16 * 1024;

enum class Type : std::uint8_t {
  kHello = 1,
  kJoin = 2,
  kWelcome = 3,
  kRefused = 4,
  kSet = 16,
  kGet = 17,
  kTryGet = 18,
  kWait = 19,
  kAdd = 20,
  kCompareSet = 21,
  kErase = 22,
  kList = 23,
  kReadPrefix = 24,
  kLeaseGrant = 25,
  kKeepalive = 26,
  kLeaseRevoke = 27,
  kCompareSetLeased = 28,
  kWatch = 29,
  kLeaseGrantHeld = 30,
  kOk = 32,
  kTimeout = 33,
  kError = 34,
};
// The join transcripts (store_net.h) open with these two type bytes.
static_assert(static_cast<int>(Type::kJoin) == 2 && static_cast<int>(Type::kWelcome) == 3);

class Writer {
 public:
  explicit Writer(Type type) { out_.push_back(static_cast<char>(type)); }
  Writer& u8(std::uint8_t v);
  Writer& u16(std::uint16_t v);
  Writer& u32(std::uint32_t v);
  Writer& i64(std::int64_t v);
  Writer& str(std::string_view s);  // u32 length + bytes
  Writer& raw(const void* data, std::size_t n);
  const std::string& body() const { return out_; }
  // The whole frame: length prefix + body.
  std::string frame() const;

 private:
  std::string out_;
};

// Bounds-checked reads over one frame body (owned); every shortfall or oversize field throws
// ProtocolError naming the field.
class Reader {
 public:
  explicit Reader(std::string body) : in_(std::move(body)) {}
  Type type();
  std::uint8_t u8(const char* what);
  std::uint16_t u16(const char* what);
  std::uint32_t u32(const char* what);
  std::int64_t i64(const char* what);
  std::string str(const char* what, std::uint32_t max_bytes);
  void raw(void* out, std::size_t n, const char* what);
  std::size_t remaining() const { return in_.size() - pos_; }
  // Throws unless the body was consumed exactly.
  void finish(const char* what) const;

 private:
  void need(std::size_t n, const char* what) const;
  std::string in_;
  std::size_t pos_ = 0;
};

// Reads one frame body whose length must lie in [1, max_body_bytes] (else ProtocolError,
// before allocating). The socket I/O (dial, send_all, wait_ready, now_s) and the join transcripts
// are the stores' shared ones: engine/backends/common/store_net.h.
std::string recv_frame(int fd, std::uint32_t max_body_bytes, double deadline_s);

// Decodes a big-endian u32 length prefix.
std::uint32_t decode_u32(const unsigned char* p);

}  // namespace meridian::store_wire
