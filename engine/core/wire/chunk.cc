// Chunk header encode/validate. Explicit little-endian byte packing (no struct punning).
#include "engine/core/wire/chunk.h"

#include <array>
#include <cstring>
#include <string>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"

namespace meridian {
namespace {

template <typename T>
void put(std::span<std::byte> m, std::size_t off, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    m[off + i] = static_cast<std::byte>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xFF);
}

template <typename T>
T get(std::span<const std::byte> m, std::size_t off) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(m[off + i])) << (8 * i);
  return static_cast<T>(v);
}

constexpr std::size_t kChecksumOffset = 48;

std::uint32_t header_crc(std::span<const std::byte> message) {
  return crc32c(message.first(kChecksumOffset));
}

[[noreturn]] void bad(const std::string& field, std::uint64_t got, std::uint64_t want) {
  throw ProtocolError("bad chunk: " + field + " is " + std::to_string(got) + ", expected " +
                      std::to_string(want));
}

}  // namespace

std::size_t chunk_message_bytes(const Codec& codec, std::uint64_t count) {
  return kChunkHeaderBytes + codec.encoded_bytes(count);
}

namespace {

// The payload's size for `id`.
std::uint64_t payload_of(const ChunkId& id, const Codec& codec) {
  return id.payload_bytes ? *id.payload_bytes : codec.encoded_bytes(id.count);
}

// Every header field but the checksum, into m[0, 56).
void write_header(const ChunkId& id, std::uint64_t payload_bytes, std::span<std::byte> m) {
  put<std::uint32_t>(m, 0, kWireMagic);
  put<std::uint16_t>(m, 4, kWireVersion);
  put<std::uint8_t>(m, 6, static_cast<std::uint8_t>(id.codec));
  put<std::uint8_t>(m, 7, 0);
  put<std::uint64_t>(m, 8, id.epoch);
  put<std::uint64_t>(m, 16, id.outer_step);
  put<std::uint32_t>(m, 24, id.bucket);
  put<std::uint32_t>(m, 28, id.chunk);
  put<std::uint64_t>(m, 32, id.count);
  put<std::uint64_t>(m, 40, payload_bytes);
  put<std::uint32_t>(m, 52, 0);
}

}  // namespace

std::uint32_t begin_seal(const ChunkId& id, const Codec& codec, std::span<std::byte> message) {
  MERIDIAN_CHECK_EQ(message.size(), kChunkHeaderBytes + payload_of(id, codec));
  MERIDIAN_CHECK(codec.id() == id.codec);
  write_header(id, message.size() - kChunkHeaderBytes, message);
  return header_crc(message);
}

std::uint32_t header_seed(const ChunkId& id, const Codec& codec) {
  MERIDIAN_CHECK(codec.id() == id.codec);
  std::array<std::byte, kChunkHeaderBytes> header{};
  write_header(id, payload_of(id, codec), header);
  return header_crc(header);
}

void end_seal(std::span<std::byte> message, std::uint32_t crc) {
  MERIDIAN_CHECK(message.size() >= kChunkHeaderBytes);
  put<std::uint32_t>(message, kChecksumOffset, crc);
}

void seal_chunk(const ChunkId& id, const Codec& codec, std::span<std::byte> message) {
  const std::uint32_t c = begin_seal(id, codec, message);
  end_seal(message, crc32c(message.subspan(kChunkHeaderBytes), c));
}

void reseal_chunk(std::span<std::byte> message) {
  MERIDIAN_CHECK(message.size() >= kChunkHeaderBytes);
  end_seal(message, crc32c(message.subspan(kChunkHeaderBytes), header_crc(message)));
}

std::uint32_t check_chunk_header(std::span<const std::byte> message, const ChunkId& expected,
                                 const Codec& codec) {
  if (message.size() < kChunkHeaderBytes)
    bad("message size (truncated header)", message.size(), kChunkHeaderBytes);
  if (get<std::uint32_t>(message, 0) != kWireMagic)
    bad("magic", get<std::uint32_t>(message, 0), kWireMagic);
  if (get<std::uint16_t>(message, 4) != kWireVersion)
    bad("version", get<std::uint16_t>(message, 4), kWireVersion);
  if (get<std::uint8_t>(message, 6) != static_cast<std::uint8_t>(expected.codec))
    bad("codec", get<std::uint8_t>(message, 6), static_cast<std::uint8_t>(expected.codec));
  if (get<std::uint8_t>(message, 7) != 0) bad("reserved byte 7", get<std::uint8_t>(message, 7), 0);
  if (get<std::uint32_t>(message, 52) != 0)
    bad("reserved bytes 52..55", get<std::uint32_t>(message, 52), 0);
  if (get<std::uint64_t>(message, 8) != expected.epoch)
    bad("epoch", get<std::uint64_t>(message, 8), expected.epoch);
  if (get<std::uint64_t>(message, 16) != expected.outer_step)
    bad("outer_step", get<std::uint64_t>(message, 16), expected.outer_step);
  if (get<std::uint32_t>(message, 24) != expected.bucket)
    bad("bucket", get<std::uint32_t>(message, 24), expected.bucket);
  if (get<std::uint32_t>(message, 28) != expected.chunk)
    bad("chunk", get<std::uint32_t>(message, 28), expected.chunk);
  if (get<std::uint64_t>(message, 32) != expected.count)
    bad("element count", get<std::uint64_t>(message, 32), expected.count);
  const std::uint64_t want_payload = payload_of(expected, codec);
  if (get<std::uint64_t>(message, 40) != want_payload)
    bad("payload_bytes", get<std::uint64_t>(message, 40), want_payload);
  if (message.size() != kChunkHeaderBytes + want_payload)
    bad("message size", message.size(), kChunkHeaderBytes + want_payload);
  return header_crc(message);
}

void verify_chunk_checksum(std::span<const std::byte> message, std::uint32_t crc) {
  const std::uint32_t got = get<std::uint32_t>(message, kChecksumOffset);
  if (got != crc) bad("checksum", got, crc);
}

std::span<const std::byte> open_chunk(std::span<const std::byte> message, const ChunkId& expected,
                                      const Codec& codec) {
  const std::uint32_t c = check_chunk_header(message, expected, codec);
  const auto payload = message.subspan(kChunkHeaderBytes);
  verify_chunk_checksum(message, crc32c(payload, c));
  return payload;
}

}  // namespace meridian
