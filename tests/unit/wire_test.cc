// Chunk header round trip and field-by-field validation.
#include <gtest/gtest.h>

#include <vector>

#include "engine/core/codec/fp32_codec.h"
#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/wire/chunk.h"

namespace meridian {
namespace {

std::vector<std::byte> make_message(const ChunkId& id, const Codec& codec) {
  std::vector<std::byte> m(chunk_message_bytes(codec, id.count));
  std::vector<float> values(id.count);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.5f;
  codec.encode(values, std::span(m).subspan(kChunkHeaderBytes));
  seal_chunk(id, codec, m);
  return m;
}

TEST(Wire, RoundTrip) {
  Fp32Codec codec;
  ChunkId id{7, 3, 2, 5, CodecId::kFp32, 10};
  auto m = make_message(id, codec);
  auto payload = open_chunk(m, id, codec);
  std::vector<float> out(10);
  codec.decode(payload, out);
  EXPECT_EQ(out[9], 9.5f);
}

// header_seed is begin_seal's checksum seed without a message: a payload checksummed from it
// and sealed with end_seal opens like seal_chunk's; another chunk's seed does not.
TEST(Wire, HeaderSeedIsBeginSealsSeed) {
  Fp32Codec codec;
  const ChunkId id{7, 3, 2, 5, CodecId::kFp32, 10};
  std::vector<std::byte> m = make_message(id, codec);
  const std::vector<std::byte> sealed = m;
  EXPECT_EQ(header_seed(id, codec), begin_seal(id, codec, m));
  end_seal(m, crc32c(std::span(m).subspan(kChunkHeaderBytes), header_seed(id, codec)));
  EXPECT_EQ(m, sealed);
  ChunkId other = id;
  other.chunk = 6;
  EXPECT_NE(header_seed(other, codec), header_seed(id, codec));
}

TEST(Wire, EveryHeaderFieldIsChecked) {
  Fp32Codec codec;
  ChunkId id{7, 3, 2, 5, CodecId::kFp32, 10};
  auto m = make_message(id, codec);
  for (auto mutate : std::vector<void (*)(ChunkId&)>{
           [](ChunkId& x) { x.epoch++; }, [](ChunkId& x) { x.outer_step++; },
           [](ChunkId& x) { x.bucket++; }, [](ChunkId& x) { x.chunk++; },
           [](ChunkId& x) { x.count++; }, [](ChunkId& x) { x.codec = CodecId::kBf16; }}) {
    ChunkId want = id;
    mutate(want);
    EXPECT_THROW(open_chunk(m, want, codec), ProtocolError);
  }
}

TEST(Wire, FlippedByteAndTruncationAreProtocolErrors) {
  Fp32Codec codec;
  ChunkId id{1, 0, 0, 0, CodecId::kFp32, 4};
  auto m = make_message(id, codec);
  for (std::size_t i = 0; i < m.size(); ++i) {
    auto bad = m;
    bad[i] ^= std::byte{0x10};
    EXPECT_THROW(open_chunk(bad, id, codec), ProtocolError) << "byte " << i;
  }
  for (std::size_t n = 0; n < m.size(); ++n)
    EXPECT_THROW(open_chunk(std::span(m).first(n), id, codec), ProtocolError) << "length " << n;
}

}  // namespace
}  // namespace meridian
