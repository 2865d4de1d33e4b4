// ring_all_gather_sum, the collective of sparse codecs (topk): against a reference written out
// plainly (every rank's encoding decoded and added in rank order), bit-identical on every rank,
// the bytes it moves, and its errors (a lying author named, a lost peer, the buffers unchanged).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/codec/topk_codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/collective/rank_threads.h"
#include "tests/collective/ring_harness.h"
#include "tests/unit/codec_test_util.h"

namespace meridian {
namespace {

using testing::holds;
using testing::InProcRing;
using testing::run_ranks;

struct GatherResult {
  std::vector<std::vector<float>> sums, owns;
  std::vector<RingStats> stats;
  std::vector<std::exception_ptr> errors;
};

// `segments`: as ring_all_gather_sum's (empty: the buffer is one).
GatherResult gather(std::vector<Transport*> transports,
                    const std::vector<std::vector<float>>& inputs, const Codec& codec,
                    const RingOptions& options, std::span<const std::size_t> segments = {}) {
  const int world = static_cast<int>(transports.size());
  GatherResult out;
  out.sums = inputs;
  out.owns.assign(world, std::vector<float>(inputs[0].size(), -1.0f));
  out.stats.resize(world);
  ThreadRuntime runtime;
  out.errors = run_ranks(world, [&](int r) {
    out.stats[r] =
        ring_all_gather_sum(*transports[r], runtime, codec, ReduceBuffer::of(out.sums[r]),
                            out.owns[r], options, nullptr, segments);
  });
  return out;
}

// The values per piece the collective picks: the most whole 4096-value chunks whose encoding
// fits, at least one.
std::size_t piece_values_for(const Codec& codec, std::size_t n, std::size_t max_bytes) {
  std::size_t chunks = (n + 4095) / 4096;
  while (chunks > 1 && codec.encoded_bytes(std::min(n, chunks * 4096)) > max_bytes) --chunks;
  return chunks * 4096;
}

std::vector<std::vector<float>> inputs(int world, std::size_t n) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < world; ++r) in.push_back(codec_test::gaussian(n, 1000 + r));
  return in;
}

TEST(RingGather, SumsEveryRanksDecodedEncodingInRankOrderOnEveryRank) {
  const TopkCodec codec(0.02, 2);
  for (int world : {1, 2, 3, 5}) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{5000}, std::size_t{3 * 4096 + 7}}) {
      // 300 bytes: one 4096-value chunk per piece (its 164 bytes fit, two do not).
      for (std::size_t max_bytes : {std::size_t{300}, std::size_t{4} << 20}) {
        const auto in = inputs(world, n);
        InProcRing ring(world, 7);
        RingOptions o;
        o.max_chunk_bytes = max_bytes;
        o.timeout_s = 10;
        const GatherResult g = gather(ring.transports(), in, codec, o);
        // Reference: the same units encoded and decoded one by one, added in rank order; the
        // units packed into messages of at most max_bytes of encodings, in order.
        const std::size_t unit = n == 0 ? 1 : piece_values_for(codec, n, max_bytes);
        const std::size_t units = (n + unit - 1) / unit;
        std::vector<float> want(n, 0.0f);
        std::vector<std::vector<float>> own(world, std::vector<float>(n));
        std::uint64_t message_bytes = 0, in_message = 0;
        for (int r = 0; r < world; ++r) {
          for (std::size_t u = 0; u < units && n > 0; ++u) {
            const std::size_t begin = u * unit, len = std::min(unit, n - begin);
            const auto values = std::span(in[r]).subspan(begin, len);
            const auto bytes = codec_test::encode(codec, values);
            codec.decode(bytes, std::span(own[r]).subspan(begin, len));
            if (r != 0) continue;
            if (u == 0 || in_message + bytes.size() > max_bytes) {
              message_bytes += kChunkHeaderBytes;
              in_message = 0;
            }
            message_bytes += bytes.size();
            in_message += bytes.size();
          }
          for (std::size_t i = 0; i < n; ++i) want[i] += own[r][i];
        }
        const std::string at = "world " + std::to_string(world) + ", n " + std::to_string(n) +
                               ", max_chunk_bytes " + std::to_string(max_bytes);
        for (int r = 0; r < world; ++r) {
          ASSERT_FALSE(g.errors[r]) << at << ", rank " << r;
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(g.sums[r][i]),
                      std::bit_cast<std::uint32_t>(want[i]))
                << at << ", rank " << r << ", element " << i;
            ASSERT_EQ(g.owns[r][i], own[r][i]) << at << ", rank " << r << ", element " << i;
          }
          EXPECT_EQ(g.stats[r].bytes_sent, static_cast<std::uint64_t>(world - 1) * message_bytes)
              << at;
          EXPECT_EQ(g.stats[r].bytes_received, g.stats[r].bytes_sent) << at;
        }
      }
    }
  }
}

// Segments (a shard's buckets): one schedule, each segment encoded as a call of its own would.
TEST(RingGather, SegmentsAreEncodedEachOnItsOwnInOneGather) {
  const TopkCodec codec(0.02, 2);
  const int world = 3;
  const std::vector<std::size_t> segments = {100, 0, 5000, 4096};
  const std::size_t n = 9196;
  const auto in = inputs(world, n);
  InProcRing ring(world, 9);
  RingOptions o;
  o.timeout_s = 10;
  o.max_chunk_bytes = 300;  // one 4096-value chunk per piece
  const GatherResult g = gather(ring.transports(), in, codec, o, segments);
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < world; ++r) {
    std::vector<float> own(n);
    std::size_t at = 0;
    for (std::size_t len : segments) {
      for (std::size_t piece = 0; piece < len; piece += 4096) {
        const std::size_t m = std::min<std::size_t>(4096, len - piece);
        codec.decode(codec_test::encode(codec, std::span(in[r]).subspan(at + piece, m)),
                     std::span(own).subspan(at + piece, m));
      }
      at += len;
    }
    for (std::size_t i = 0; i < n; ++i) want[i] += own[i];
    ASSERT_FALSE(g.errors[r]) << "rank " << r;
    EXPECT_EQ(g.owns[r], own) << "rank " << r;
  }
  for (int r = 0; r < world; ++r) EXPECT_EQ(g.sums[r], want) << "rank " << r;
  // Segments that do not add up to the buffer are a ConfigError.
  ThreadRuntime runtime;
  InProcRing one(1, 1);
  std::vector<float> x(10);
  const std::vector<std::size_t> wrong = {4, 5};
  EXPECT_THROW(ring_all_gather_sum(*one.transports()[0], runtime, codec, ReduceBuffer::of(x), {}, o,
                                   nullptr, wrong),
               ConfigError);
}

// Small segments share a message: a piece takes the next segment's encoding while they fit
// max_chunk_bytes together, one header for all (the bytes say how many messages went).
TEST(RingGather, SmallSegmentsShareAMessageAndSumAsIfSentOneByOne) {
  const TopkCodec codec(0.02, 2);
  const int world = 3;
  const std::vector<std::size_t> segments(8, 4096);
  const std::size_t n = 8 * 4096, each = codec.encoded_bytes(4096);
  const auto in = inputs(world, n);
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < world; ++r)
    for (std::size_t at = 0; at < n; at += 4096) {
      std::vector<float> own(4096);
      codec.decode(codec_test::encode(codec, std::span(in[r]).subspan(at, 4096)), own);
      for (std::size_t i = 0; i < 4096; ++i) want[at + i] += own[i];
    }
  // Messages of 8, 2 and 1 segments.
  for (const auto& [max_bytes, messages] :
       {std::pair<std::size_t, std::uint64_t>{4 << 20, 1}, {2 * each, 4}, {2 * each - 1, 8}}) {
    InProcRing ring(world, 11);
    RingOptions o;
    o.timeout_s = 10;
    o.max_chunk_bytes = max_bytes;
    const GatherResult g = gather(ring.transports(), in, codec, o, segments);
    for (int r = 0; r < world; ++r) {
      ASSERT_FALSE(g.errors[r]) << "max_chunk_bytes " << max_bytes << ", rank " << r;
      EXPECT_EQ(g.sums[r], want) << "max_chunk_bytes " << max_bytes << ", rank " << r;
      EXPECT_EQ(g.stats[r].bytes_sent, (world - 1) * (messages * kChunkHeaderBytes + 8 * each))
          << "max_chunk_bytes " << max_bytes << ", rank " << r;
    }
  }
}

TEST(RingGather, ThePlainRingRefusesASparseCodec) {
  const TopkCodec codec;
  InProcRing ring(1, 1);
  std::vector<float> x(10, 1.0f);
  ThreadRuntime runtime;
  EXPECT_THROW(ring_all_reduce(*ring.transports()[0], runtime, codec, ReduceBuffer::of(x), {}),
               ConfigError);
}

// Sends every message of its own (all-gather step 0) with a NaN in the first table, re-sealed
// so that its checksum holds: only decoding it finds the lie.
class LyingAuthor final : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    if (((tag >> 16) & 0x7FFF) == 0 && !out.bytes.empty()) {
      auto& copy = copies_.emplace_back(out.bytes.begin(), out.bytes.end());
      const float nan = NAN;
      std::memcpy(copy.data() + kChunkHeaderBytes + TopkCodec::kPrefixBytes, &nan, sizeof nan);
      reseal_chunk(copy);
      out = Payload::of(copy);
    }
    return ForwardingTransport::start_exchange(to, out, from, into, tag);
  }

 private:
  std::deque<std::vector<std::byte>> copies_;
};

TEST(RingGather, AnEncodingThatDoesNotDecodeIsItsAuthorsProtocolErrorAndChangesNothing) {
  const TopkCodec codec;
  const int world = 4, liar = 2;
  InProcRing ring(world, 3);
  LyingAuthor lying(*ring.owned[liar]);
  std::vector<Transport*> t = ring.transports();
  t[liar] = &lying;
  RingOptions o;
  o.timeout_s = 10;
  const auto in = inputs(world, 9000);
  const GatherResult g = gather(t, in, codec, o);
  for (int r = 0; r < world; ++r) {
    if (r == liar) continue;  // it decodes its own true encoding: no error of its own
    ASSERT_TRUE(holds<ProtocolError>(g.errors[r])) << "rank " << r;
    try {
      std::rethrow_exception(g.errors[r]);
    } catch (const ProtocolError& e) {
      EXPECT_EQ(e.peer(), liar) << e.what();
      EXPECT_NE(std::string(e.what()).find("non-finite table value"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(g.sums[r], in[r]) << "rank " << r << ": the buffer changed";
    EXPECT_EQ(g.owns[r], std::vector<float>(9000, -1.0f)) << "rank " << r;
  }
}

TEST(RingGather, ALostPeerFailsEveryRankWithinTheTimeoutAndChangesNothing) {
  const TopkCodec codec;
  const int world = 3;
  InProcRing ring(world, 5);
  RingOptions o;
  o.timeout_s = 1.0;
  const auto in = inputs(world, 5000);
  GatherResult g;
  g.sums = in;
  g.owns.assign(world, std::vector<float>(5000, -1.0f));
  g.stats.resize(world);
  ThreadRuntime runtime;
  g.errors = run_ranks(world, [&](int r) {
    if (r == 1) return ring.owned[1]->abort();  // rank 1 never takes part
    ring_all_gather_sum(*ring.owned[r], runtime, codec, ReduceBuffer::of(g.sums[r]), g.owns[r], o);
  });
  for (int r : {0, 2}) {
    EXPECT_TRUE(holds<PeerLostError>(g.errors[r]) || holds<TimeoutError>(g.errors[r]))
        << "rank " << r;
    EXPECT_EQ(g.sums[r], in[r]) << "rank " << r;
    EXPECT_EQ(g.owns[r], std::vector<float>(5000, -1.0f)) << "rank " << r;
  }
}

}  // namespace
}  // namespace meridian
