// Fuzz target: every codec's decoder on arbitrary payloads. The checksum would stop almost every
// mutated payload before a decoder sees it, so this target seals the fuzzed payload itself
// (a valid header and CRC-32C over it, as a peer that lies on purpose would) and then runs the
// receive path: open_chunk, decode and decode_add. Input: byte 0 picks the codec, bytes 1-2 the
// element count (at most 4095, trimmed to what the payload can hold), the rest is the payload.
// Each decodes or throws ProtocolError; int8 and fp4 payloads that decode give finite values.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian;
  fuzz::Input in(data, size);
  const auto codec = make_codec(kAllCodecIds[in.u8() % std::size(kAllCodecIds)]);
  std::size_t count = in.u16() % 4096;
  const std::string payload = in.rest();
  while (count > 0 && codec->encoded_bytes(count) > payload.size()) --count;
  if (codec->encoded_bytes(count) > payload.size()) return 0;  // not even an empty encoding

  const ChunkId id{1, 2, 3, 4, codec->id(), count};
  std::vector<std::byte> message(chunk_message_bytes(*codec, count));
  std::memcpy(message.data() + kChunkHeaderBytes, payload.data(),
              message.size() - kChunkHeaderBytes);
  seal_chunk(id, *codec, message);
  try {
    const auto p = open_chunk(message, id, *codec);
    std::vector<float> out(count);
    codec->decode(p, out);
    std::vector<float> acc(count, 1.0f);
    codec->decode_add(p, acc);
    if (codec->id() == CodecId::kInt8Prime || codec->id() == CodecId::kInt8MinMax ||
        codec->id() == CodecId::kFp4) {
      for (std::size_t i = 0; i < count; ++i) {
        MERIDIAN_CHECK(std::isfinite(out[i]));
        MERIDIAN_CHECK(std::isfinite(acc[i]));
      }
    }
  } catch (const ProtocolError&) {
  }
  return 0;
}
