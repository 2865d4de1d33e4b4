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
//  40     8   payload_bytes  == codec.encoded_bytes(count), or what ChunkId::payload_bytes says
//  48     4   checksum       CRC-32C over bytes [0, 48) and the payload
//  52     4   reserved       0
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "engine/core/codec/codec.h"

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
  // The payload's size when it is not the codec's one encoding of `count` values: a sparse
  // all-gather piece carries several encodings back to back (engine/core/collective/README.md,
  // "Sparse pieces"). None: codec.encoded_bytes(count).
  std::optional<std::uint64_t> payload_bytes;
};

// Size of a whole message (header + payload) for `count` elements under `codec`.
std::size_t chunk_message_bytes(const Codec& codec, std::uint64_t count);

// Writes the header into message[0, 56) for a payload already written at message[56, ...).
// message.size() must equal chunk_message_bytes(codec, id.count) (or 56 + id.payload_bytes).
void seal_chunk(const ChunkId& id, const Codec& codec, std::span<std::byte> message);

// Validates `message` against `expected` (every header field, the size and the checksum) and
// returns the payload. Throws ProtocolError naming the first field that is wrong.
std::span<const std::byte> open_chunk(std::span<const std::byte> message, const ChunkId& expected,
                                      const Codec& codec);

// The same two steps split around the payload, for callers that checksum the payload in the
// pass that writes or reads it (the ring's fp32 path: copy or add and CRC in one cache-sized
// walk). Each returns the CRC-32C over header bytes [0, 48), which the caller extends over the
// payload (crc32c(payload, that)) and hands to the matching finishing call.
//  - begin_seal writes every header field but the checksum (message sized as for seal_chunk);
//    end_seal writes the checksum.
//  - check_chunk_header validates every field and the size, like open_chunk, but not the
//    checksum; verify_chunk_checksum throws ProtocolError when the stored one differs.
std::uint32_t begin_seal(const ChunkId& id, const Codec& codec, std::span<std::byte> message);
void end_seal(std::span<std::byte> message, std::uint32_t crc);
// What begin_seal returns for `id`, without a message: a sender that checksums a payload before
// its header is written (the ring's fp32 sums, checksummed as they are added) starts from it.
std::uint32_t header_seed(const ChunkId& id, const Codec& codec);
std::uint32_t check_chunk_header(std::span<const std::byte> message, const ChunkId& expected,
                                 const Codec& codec);
void verify_chunk_checksum(std::span<const std::byte> message, std::uint32_t crc);

// Writes the checksum of a whole message (header and payload) again after its payload was
// changed: fault injection (engine/backends/faults) makes a valid chunk carry a lie with it.
void reseal_chunk(std::span<std::byte> message);

}  // namespace meridian
