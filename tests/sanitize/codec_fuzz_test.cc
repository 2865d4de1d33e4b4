// Fuzz-style test of the receive path under ASan and UBSan: random, truncated, extended,
// bit-flipped and re-sealed messages through open_chunk() and every codec's decode/decode_add.
// Each must either give valid values or throw ProtocolError; anything else (another exception,
// a sanitizer report, a crash) fails. Seeded and bounded. Not a coverage-guided fuzzer.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/unit/codec_test_util.h"

namespace meridian {
namespace {

// Counts around the kernels' 64-element blocks and a longer chunk with a tail.
constexpr std::size_t kCounts[] = {0, 1, 2, 7, 63, 64, 65, 1000};
constexpr int kMutationsPerMessage = 3000;

ChunkId chunk_id(CodecId codec, std::size_t count) {
  return ChunkId{3, 9, 1, 2, codec, static_cast<std::uint64_t>(count)};
}

// Values with every special case the encoders must survive: random bit patterns (NaN, inf,
// subnormals, huge values) mixed with ordinary Gaussian ones.
std::vector<float> hostile_values(std::size_t n, std::mt19937_64& rng) {
  std::vector<float> x = codec_test::gaussian(n, rng());
  for (float& v : x) {
    if (rng() % 4 == 0) v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  }
  return x;
}

std::vector<std::byte> sealed_message(const Codec& codec, std::span<const float> x) {
  std::vector<std::byte> m(chunk_message_bytes(codec, x.size()));
  codec.encode(x, std::span(m).subspan(kChunkHeaderBytes));
  seal_chunk(chunk_id(codec.id(), x.size()), codec, m);
  return m;
}

struct Outcome {
  int decoded = 0;
  int rejected = 0;
};

// The receive path on one message. Returns true if it decoded, false on ProtocolError; any
// other exception propagates and fails the test.
bool receive(const Codec& codec, std::span<const std::byte> message, std::size_t count) {
  try {
    const auto payload = open_chunk(message, chunk_id(codec.id(), count), codec);
    std::vector<float> out(count);
    codec.decode(payload, out);
    std::vector<float> acc(count, 1.0f);
    codec.decode_add(payload, acc);
    if (codec.id() == CodecId::kInt8Prime || codec.id() == CodecId::kInt8MinMax ||
        codec.id() == CodecId::kFp4) {
      // A validated int8 or fp4 payload can only produce finite values.
      for (std::size_t i = 0; i < count; ++i) {
        EXPECT_TRUE(std::isfinite(out[i])) << codec.name() << " element " << i;
        EXPECT_TRUE(std::isfinite(acc[i])) << codec.name() << " element " << i;
      }
    }
    return true;
  } catch (const ProtocolError&) {
    return false;
  }
}

void mutate(std::vector<std::byte>& m, std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0: {  // flip 1..8 random bits
      if (m.empty()) break;
      for (int k = 1 + static_cast<int>(rng() % 8); k > 0; --k)
        m[rng() % m.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
      break;
    }
    case 1:  // truncate
      m.resize(m.empty() ? 0 : rng() % m.size());
      break;
    case 2:  // extend with random bytes
      for (int k = 1 + static_cast<int>(rng() % 64); k > 0; --k)
        m.push_back(static_cast<std::byte>(rng()));
      break;
    case 3:  // overwrite a random run with random bytes
      if (m.empty()) break;
      for (std::size_t i = rng() % m.size(), k = 1 + rng() % 32; k > 0 && i < m.size(); --k, ++i)
        m[i] = static_cast<std::byte>(rng());
      break;
    default:  // entirely random bytes of a random length
      m.resize(rng() % (m.size() + 128));
      for (std::byte& b : m) b = static_cast<std::byte>(rng());
      break;
  }
}

TEST(CodecFuzz, MutatedMessagesDecodeOrRaiseProtocolError) {
  std::mt19937_64 rng(20261121);
  for (CodecId id : kAllCodecIds) {
    const auto codec = make_codec(id);
    Outcome outcome;
    for (std::size_t count : kCounts) {
      const std::vector<float> x = hostile_values(count, rng);
      const std::vector<std::byte> original = sealed_message(*codec, x);
      ASSERT_TRUE(receive(*codec, original, count)) << codec->name() << " count " << count;
      for (int i = 0; i < kMutationsPerMessage; ++i) {
        std::vector<std::byte> m = original;
        mutate(m, rng);
        (receive(*codec, m, count) ? outcome.decoded : outcome.rejected) += 1;
      }
    }
    std::printf("%s: %d mutated messages decoded, %d rejected\n",
                std::string(codec->name()).c_str(), outcome.decoded, outcome.rejected);
    EXPECT_GT(outcome.rejected, 0);
  }
}

TEST(CodecFuzz, RandomPayloadsBehindAValidHeaderDecodeOrRaiseProtocolError) {
  // Re-sealing after the mutation gives a correct checksum, so the codec's own validation is
  // what stands between the bytes and the output.
  std::mt19937_64 rng(77);
  for (CodecId id : kAllCodecIds) {
    const auto codec = make_codec(id);
    Outcome outcome;
    for (std::size_t count : kCounts) {
      const std::vector<float> x = hostile_values(count, rng);
      std::vector<std::byte> m = sealed_message(*codec, x);
      const std::size_t payload_bytes = m.size() - kChunkHeaderBytes;
      for (int i = 0; i < kMutationsPerMessage && payload_bytes > 0; ++i) {
        std::vector<std::byte> bad = m;
        const int kind = static_cast<int>(rng() % 3);
        for (std::size_t k = 0, n = kind == 0 ? payload_bytes : 1 + rng() % 4; k < n; ++k) {
          const std::size_t at = kChunkHeaderBytes + rng() % payload_bytes;
          if (kind == 2) {
            bad[at] ^= static_cast<std::byte>(1u << (rng() % 8));
          } else {
            bad[at] = static_cast<std::byte>(rng());
          }
        }
        seal_chunk(chunk_id(id, count), *codec, bad);
        (receive(*codec, bad, count) ? outcome.decoded : outcome.rejected) += 1;
      }
    }
    std::printf("%s: %d re-sealed random payloads decoded, %d rejected\n",
                std::string(codec->name()).c_str(), outcome.decoded, outcome.rejected);
    EXPECT_GT(outcome.decoded, 0);
  }
}

TEST(CodecFuzz, EncodersAlwaysProduceMessagesTheirDecodersAccept) {
  std::mt19937_64 rng(5);
  for (CodecId id : kAllCodecIds) {
    const auto codec = make_codec(id);
    for (int i = 0; i < 5000; ++i) {
      const std::size_t count = rng() % 300;
      const std::vector<float> x = hostile_values(count, rng);
      ASSERT_TRUE(receive(*codec, sealed_message(*codec, x), count))
          << codec->name() << " iteration " << i;
    }
  }
}

}  // namespace
}  // namespace meridian
