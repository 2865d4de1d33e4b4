// Fuzz target: the chunk header of a collective (engine/core/wire/chunk.h), as a receiver sees it.
// Input: byte 0 picks the codec and whether the receiver expects exactly the header's own
// fields (so the fuzzer gets past the field checks to the size and checksum checks); the rest
// is the message. open_chunk returns a payload of the expected size or throws ProtocolError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

template <typename T>
T field(const std::string& m, std::size_t off) {
  T v{};
  if (m.size() >= off + sizeof v) std::memcpy(&v, m.data() + off, sizeof v);  // little-endian
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian;
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.u8();
  const auto codec = make_codec(kAllCodecIds[mode % std::size(kAllCodecIds)]);
  const std::string m = in.rest();
  ChunkId expected{3, 9, 1, 2, codec->id(), 16};
  if (mode & 0x80) {
    expected.epoch = field<std::uint64_t>(m, 8);
    expected.outer_step = field<std::uint64_t>(m, 16);
    expected.bucket = field<std::uint32_t>(m, 24);
    expected.chunk = field<std::uint32_t>(m, 28);
    expected.count = field<std::uint64_t>(m, 32) % 4096;  // a receiver's buffer is bounded
  }
  const std::span<const std::byte> message(reinterpret_cast<const std::byte*>(m.data()), m.size());
  try {
    const auto payload = open_chunk(message, expected, *codec);
    MERIDIAN_CHECK_EQ(payload.size(), codec->encoded_bytes(expected.count));
    MERIDIAN_CHECK(payload.data() == message.data() + kChunkHeaderBytes);
  } catch (const ProtocolError&) {
  }
  return 0;
}
