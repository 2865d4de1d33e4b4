// The wire format of one chunk of a collective: a fixed 56-byte little-endian header followed by
// the codec's payload. Decoding validates every field against what the receiver expects before
// the payload is used; nothing is allocated from a size the sender claims.
//
//  offset size field
//   0     4   magic          "MRDN" (0x4E44524D little-endian)
//   4     2   version        kWireVersion
//   6     1   codec          CodecId
//   7     1   reserved       0
//   8     8   epoch          membership epoch of the sender's Transport
//  16     8   outer_step     DiLoCo outer step (0 outside DiLoCo)
//  24     4   bucket         bucket index within the outer step
//  28     4   chunk          chunk index within the bucket's ring schedule
//  32     8   count          number of fp32 elements encoded
//  40     8   payload_bytes  == codec.encoded_bytes(count)
//  48     4   checksum       CRC-32C over bytes [0, 48) and the payload
//  52     4   reserved       0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/codec/codec.h"

namespace meridian {

inline constexpr std::uint32_t kWireMagic = 0x4E44524Du;  // "MRDN"
inline constexpr std::uint16_t kWireVersion = 1;
inline constexpr std::size_t kChunkHeaderBytes = 56;

// Identifies a chunk: the receiver knows all of it in advance and checks it.
struct ChunkId {
  std::uint64_t epoch = 0;
  std::uint64_t outer_step = 0;
  std::uint32_t bucket = 0;
  std::uint32_t chunk = 0;
  CodecId codec = CodecId::kFp32;
  std::uint64_t count = 0;
};

// Size of a whole message (header + payload) for `count` elements under `codec`.
std::size_t chunk_message_bytes(const Codec& codec, std::uint64_t count);

// Writes the header into message[0, 56) for a payload already written at message[56, ...).
// message.size() must equal chunk_message_bytes(codec, id.count).
void seal_chunk(const ChunkId& id, const Codec& codec, std::span<std::byte> message);

// Validates `message` against `expected` (every header field, the size and the checksum) and
// returns the payload. Throws ProtocolError naming the first field that is wrong.
std::span<const std::byte> open_chunk(std::span<const std::byte> message, const ChunkId& expected,
                                      const Codec& codec);

}  // namespace meridian
