// Ring all-reduce conformance over the in-process transport: world 1..8 x element counts
// {0, 1, 7, 1000, 2^20+3} x every codec built into the engine. fp32 is exact (integer-valued
// inputs); every rank's result is bit-identical; stats add up. Plus the schedule's edges:
// many small pieces, phantom buffers, back-to-back and concurrent buckets on one transport.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/core/codec/fp32_codec.h"
#include "engine/core/codec/int8_prime_codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/collective/ring_harness.h"

namespace meridian {
namespace {

using testing::describe;
using testing::exact_sum;
using testing::InProcRing;
using testing::integer_inputs;
using testing::run_round;

// The codecs the conformance sweep covers: every codec the ring carries (topk, sparse, is
// all-gathered instead: ring_gather_test.cc).
const std::vector<CodecId> kCodecs(std::begin(kRingCodecIds), std::end(kRingCodecIds));
const Fp32Codec kFp32;
const Int8PrimeCodec kInt8;

// Error bound for lossy codecs, per element, for the non-negative integer inputs of
// ring_harness.h. Derivation: with N ranks a value is quantized N times — once per
// reduce-scatter step (the partial sum S_k of k inputs, k = 1..N-1) and once when its owner
// re-codes the full sum S_N before the all-gather; forwarding adds nothing. With non-negative
// inputs every partial sum satisfies 0 <= S_k <= s (the exact sum), so with M = max_i s_i:
//   bf16  (round to nearest, 8-bit significand): |e| <= 2^-8 |S_k| <= 2^-8 s_i per quantization.
//   int8 PRIME: x and its bin's mean lie in the same bin of width scale = 6 sigma / 256, so
//     |e| <= scale as long as x is inside +-3 sigma (true here: a chunk of non-negative ramp
//     values has max < 2 RMS < 3 sigma). sigma = sqrt(sum x^2 / (n-1)) <= sqrt(2) RMS <= sqrt(2) M.
//   int8 min-max: |e| <= scale / 2 = (max - min) / 510 <= M / 510 (min >= 0).
// The result's error is the sum of the N quantization errors; the factor 1.05 covers the
// second-order terms (a quantized partial sum feeds the next one) and fp32 rounding of the
// accumulation and of the codecs' arithmetic; 1e-6 M covers the latter near zero.
//   fp4 (E3M0): |q(T) - T| <= |T| / 3 + a, a = amax / 128 of T's block. With relative errors
//     this large the second-order terms dominate: D_k, the error of the k-th quantized value,
//     obeys |D_k+1| <= (4/3) |D_k| + s / 3 + a (|T_k| <= s + |D_k|), so after N quantizations
//     |D| <= ((4/3)^N - 1) (s + 3a). The same recursion keeps every quantized |T| below
//     2 (4/3)^N M for N <= 8, so a <= 2 (4/3)^N M / 128.
double error_bound(CodecId codec, int world, double exact, double max_exact) {
  if (codec == CodecId::kFp4 && world > 1) {
    const double growth = std::pow(4.0 / 3.0, world);
    const double a = 2 * growth * max_exact / 128;
    return 1.05 * (growth - 1) * (exact + 3 * a) + 1e-6 * max_exact;
  }
  double per_step = 0;
  switch (codec) {
    case CodecId::kFp32:
      return 0;
    case CodecId::kBf16:
      per_step = std::ldexp(1.0, -8) * exact;
      break;
    case CodecId::kInt8Prime:
      per_step = 6.0 / 256.0 * std::sqrt(2.0) * max_exact;
      break;
    case CodecId::kInt8MinMax:
      per_step = max_exact / 510.0;
      break;
    case CodecId::kFp4:  // above
      break;
    case CodecId::kTopk:  // sparse: not carried by the ring (kCodecs leaves it out)
      return std::numeric_limits<double>::infinity();
  }
  return world == 1 ? 0 : 1.05 * world * per_step + 1e-6 * max_exact;
}

void expect_within_bound(const std::vector<float>& got, const std::vector<double>& want,
                         CodecId codec, int world) {
  ASSERT_EQ(got.size(), want.size());
  double max_exact = 0;
  for (double w : want) max_exact = std::max(max_exact, std::abs(w));
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= error_bound(codec, world, want[i], max_exact)) && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << wrong << " values out of bound; first at " << first << ": got "
                       << got[first] << ", want " << want[first] << " +- "
                       << error_bound(codec, world, want[first], max_exact);
}

// Pieces per share for fp32, computed independently of the implementation: a share of
// ceil(n / world) values cut into pieces of at most max_chunk_bytes / 4 values.
std::size_t fp32_pieces(std::size_t n, int world, std::size_t max_chunk_bytes) {
  const std::size_t max_share = (n + world - 1) / world;
  const std::size_t per_piece = max_chunk_bytes / 4;
  return (max_share + per_piece - 1) / per_piece;
}

// Values of share i when n values are cut into `world` near-equal shares.
std::size_t share_len(std::size_t n, int world, int i) {
  return n / world + (static_cast<std::size_t>(i) < n % world ? 1 : 0);
}

void expect_bit_identical(const testing::RoundResult& round) {
  for (std::size_t r = 1; r < round.buffers.size(); ++r) {
    ASSERT_EQ(round.buffers[r].size(), round.buffers[0].size());
    if (round.buffers[0].empty()) continue;  // memcmp must not see null pointers
    EXPECT_EQ(std::memcmp(round.buffers[r].data(), round.buffers[0].data(),
                          round.buffers[0].size() * sizeof(float)),
              0)
        << "rank " << r << " differs from rank 0";
  }
}

void expect_exact(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (static_cast<double>(got[i]) != want[i] && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << "first wrong element " << first << ": got " << got[first] << ", want "
                       << want[first];
}

using Case = std::tuple<int, std::size_t, CodecId>;

class RingConformance : public ::testing::TestWithParam<Case> {};

TEST_P(RingConformance, SumsOnEveryRank) {
  const auto [world, count, codec] = GetParam();
  RingOptions options;
  options.max_chunk_bytes = 64 << 10;  // 2^20+3 values become several pieces per share
  options.outer_step = 11;
  options.bucket = 3;
  options.timeout_s = 60;
  InProcRing ring(world, 4);
  const auto inputs = integer_inputs(world, count);
  const auto round = run_round(ring.transports(), inputs, options, codec);
  for (int r = 0; r < world; ++r) ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);

  expect_bit_identical(round);
  const auto want = exact_sum(inputs);
  if (codec == CodecId::kFp32) {
    expect_exact(round.buffers[0], want);
  } else {
    expect_within_bound(round.buffers[0], want, codec, world);
  }

  std::uint64_t sent = 0, received = 0;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(round.stats[r].participants, world);
    EXPECT_GE(round.stats[r].elapsed_s, 0.0);
    sent += round.stats[r].bytes_sent;
    received += round.stats[r].bytes_received;
    if (codec != CodecId::kFp32) continue;
    // Rank r sends every share but (r+1) in the reduce-scatter and every share but (r+2) in the
    // all-gather, P pieces per share, one header per piece.
    const std::size_t pieces = fp32_pieces(count, world, options.max_chunk_bytes);
    const std::uint64_t values = world == 1 ? 0
                                            : 2 * count - share_len(count, world, (r + 1) % world) -
                                                  share_len(count, world, (r + 2) % world);
    const std::uint64_t headers = count == 0 ? 0 : 2 * (world - 1) * pieces * kChunkHeaderBytes;
    EXPECT_EQ(round.stats[r].bytes_sent, 4 * values + headers) << "rank " << r;
  }
  EXPECT_EQ(sent, received);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [world, count, codec] = info.param;
  std::string name(codec_name(codec));
  for (char& c : name)
    if (c == '-') c = '_';
  return "world" + std::to_string(world) + "_n" + std::to_string(count) + "_" + name;
}

INSTANTIATE_TEST_SUITE_P(Sweep, RingConformance,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(std::size_t{0}, std::size_t{1},
                                                              std::size_t{7}, std::size_t{1000},
                                                              (std::size_t{1} << 20) + 3),
                                            ::testing::ValuesIn(kCodecs)),
                         case_name);

// Many tiny pieces (down to one value per message) and piece counts that do not divide.
TEST(RingSchedule, SmallPiecesStayExact) {
  for (int world : {2, 3, 5, 8}) {
    for (std::size_t chunk :
         {std::size_t{4}, std::size_t{12}, std::size_t{100}, std::size_t{4096}}) {
      RingOptions options;
      options.max_chunk_bytes = chunk;
      InProcRing ring(world, 1);
      const auto inputs = integer_inputs(world, 1009);
      const auto round = run_round(ring.transports(), inputs, options);
      for (int r = 0; r < world; ++r) ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
      SCOPED_TRACE("world " + std::to_string(world) + ", max_chunk_bytes " + std::to_string(chunk));
      expect_bit_identical(round);
      expect_exact(round.buffers[0], exact_sum(inputs));
    }
  }
}

// One to four pieces per share: the ring encodes a transfer ahead of posting it only from three
// pieces on (engine/core/collective/README.md), and with one piece keeps one transfer in flight, so
// each count takes another path through the schedule.
TEST(RingSchedule, OneToFourPiecesPerShareStayExact) {
  constexpr std::size_t kShare = 60;  // values per share: 60, 30, 20, 15 values per piece
  for (int world : {2, 3, 4}) {
    for (std::size_t pieces : {1, 2, 3, 4}) {
      RingOptions options;
      options.max_chunk_bytes = kShare / pieces * sizeof(float);
      const std::size_t n = kShare * world;
      ASSERT_EQ(fp32_pieces(n, world, options.max_chunk_bytes), pieces);
      SCOPED_TRACE("world " + std::to_string(world) + ", " + std::to_string(pieces) + " pieces");
      InProcRing ring(world, 1);
      const auto inputs = integer_inputs(world, n);
      const auto round = run_round(ring.transports(), inputs, options);
      for (int r = 0; r < world; ++r) ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
      expect_bit_identical(round);
      expect_exact(round.buffers[0], exact_sum(inputs));
    }
  }
}

TEST(RingSchedule, WorldOfOneLeavesTheBufferAndSendsNothing) {
  InProcRing ring(1, 0);
  const auto inputs = integer_inputs(1, 5);
  const auto round = run_round(ring.transports(), inputs, RingOptions{});
  ASSERT_FALSE(round.errors[0]) << describe(round.errors[0]);
  EXPECT_EQ(round.buffers[0], inputs[0]);
  EXPECT_EQ(round.stats[0].bytes_sent, 0u);
  EXPECT_EQ(round.stats[0].participants, 1);
}

TEST(RingSchedule, PhantomBufferChargesTheSameWireBytes) {
  constexpr int kWorld = 4;
  constexpr std::size_t kCount = 100003;
  RingOptions options;
  options.max_chunk_bytes = 16 << 10;
  InProcRing real(kWorld, 1);
  const auto round = run_round(real.transports(), integer_inputs(kWorld, kCount), options);
  InProcRing phantom(kWorld, 2);
  std::vector<RingStats> stats(kWorld);
  ThreadRuntime runtime;
  auto transports = phantom.transports();
  auto errors = testing::run_ranks(kWorld, [&](int r) {
    stats[r] =
        ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::phantom(kCount), options);
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
    ASSERT_FALSE(errors[r]) << describe(errors[r]);
    EXPECT_EQ(stats[r].bytes_sent, round.stats[r].bytes_sent);
    EXPECT_EQ(stats[r].bytes_received, round.stats[r].bytes_received);
    EXPECT_EQ(stats[r].participants, kWorld);
  }
}

// A transport that counts how often it is asked to time phantom rounds whole, and declines.
class DecliningTransport final : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  bool run_phantom_rings(std::span<const PhantomRing>, std::span<PhantomRingTimes>) override {
    ++asked;
    return false;
  }
  int asked = 0;
};

TEST(RingSchedule, PhantomRoundsTellADecliningTransportFromABucketOfSeveralPieces) {
  // phantom_ring_rounds: nullopt when the transport cannot time rounds whole (the caller stops
  // asking), an empty list without asking it when the first bucket has several pieces per
  // share (the caller runs that one message by message and may ask again).
  InProcRing ring(3, 1);
  ThreadRuntime runtime;
  const std::vector<std::size_t> counts = {30000, 3000};
  std::vector<RingOptions> options(2);
  for (std::uint32_t b = 0; b < 2; ++b) options[b].bucket = b;
  options[0].max_chunk_bytes = std::size_t{1} << 30;  // one piece per share
  options[1].max_chunk_bytes = std::size_t{1} << 30;
  DecliningTransport declining(*ring.transports()[0]);
  EXPECT_FALSE(phantom_ring_rounds(declining, runtime, kFp32, counts, options).has_value());
  EXPECT_EQ(declining.asked, 1);
  // The in-process transport does not time rounds whole either.
  EXPECT_FALSE(phantom_ring_rounds(*ring.transports()[1], runtime, kFp32, counts, options));

  options[0].max_chunk_bytes = 4096;  // 10,000 fp32 values per share: several pieces
  const auto several = phantom_ring_rounds(declining, runtime, kFp32, counts, options);
  ASSERT_TRUE(several.has_value());
  EXPECT_TRUE(several->empty());
  EXPECT_EQ(declining.asked, 1);
}

TEST(RingSchedule, BackToBackAndConcurrentBucketsOnOneTransport) {
  constexpr int kWorld = 3;
  InProcRing ring(kWorld, 9);
  auto transports = ring.transports();
  const auto a = integer_inputs(kWorld, 5000);
  auto b = integer_inputs(kWorld, 777);
  for (auto& v : b)
    for (float& x : v) x = -x;
  std::vector<std::vector<float>> out_a = a, out_b = b;
  ThreadRuntime runtime;
  auto errors = testing::run_ranks(kWorld, [&](int r) {
    RingOptions oa;
    oa.max_chunk_bytes = 256;
    oa.bucket = 0;
    RingOptions ob = oa;
    ob.bucket = 1;
    // Bucket 0 on a second thread of this rank while bucket 1 runs here (distinct tags).
    std::exception_ptr other;
    std::thread t([&] {
      try {
        ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(out_a[r]), oa);
      } catch (...) {
        other = std::current_exception();
      }
    });
    std::exception_ptr here;
    try {
      ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(out_b[r]), ob);
    } catch (...) {
      here = std::current_exception();
    }
    t.join();
    if (here) std::rethrow_exception(here);
    if (other) std::rethrow_exception(other);
    // And a second outer step on the same transport afterwards.
    RingOptions next = oa;
    next.outer_step = 1;
    std::vector<float> again = a[r];
    ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(again), next);
    EXPECT_EQ(again, out_a[r]);
  });
  for (int r = 0; r < kWorld; ++r) ASSERT_FALSE(errors[r]) << describe(errors[r]);
  expect_exact(out_a[0], exact_sum(a));
  expect_exact(out_b[2], exact_sum(b));
}

TEST(RingSchedule, WorkspaceIsReusedAcrossSizesAndCodecs) {
  constexpr int kWorld = 3;
  InProcRing ring(kWorld, 2);
  auto transports = ring.transports();
  std::vector<RingWorkspace> workspaces(kWorld);
  ThreadRuntime runtime;
  const auto big = integer_inputs(kWorld, 3000);
  const auto small = integer_inputs(kWorld, 10);
  std::vector<std::vector<float>> out_big = big, out_small = small, out_lossy = big;
  auto errors = testing::run_ranks(kWorld, [&](int r) {
    RingOptions o;
    o.max_chunk_bytes = 1024;
    ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(out_big[r]), o,
                    &workspaces[r]);
    o.outer_step = 1;
    ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(out_small[r]), o,
                    &workspaces[r]);
    o.outer_step = 2;
    o.max_chunk_bytes = 2048;  // the int8 payload alone carries a 1 KiB table
    o.measure_error = true;
    ring_all_reduce(*transports[r], runtime, kInt8, ReduceBuffer::of(out_lossy[r]), o,
                    &workspaces[r]);
  });
  for (int r = 0; r < kWorld; ++r) ASSERT_FALSE(errors[r]) << describe(errors[r]);
  expect_exact(out_big[1], exact_sum(big));
  expect_exact(out_small[2], exact_sum(small));
  expect_within_bound(out_lossy[0], exact_sum(big), CodecId::kInt8Prime, kWorld);
}

// Without restore_on_failure the ring keeps no copy of the input (the workspace's backup is
// never allocated), and every codec's result is the same bytes as with it.
TEST(RingSchedule, WithoutRestoreTheSameBytesAndNoBackup) {
  constexpr int kWorld = 4;
  const auto inputs = integer_inputs(kWorld, 5003);
  for (const CodecId codec : kCodecs) {
    SCOPED_TRACE(codec_name(codec));
    InProcRing ring(kWorld, 3);
    auto transports = ring.transports();
    std::vector<RingWorkspace> workspaces(kWorld);
    ThreadRuntime runtime;
    std::vector<std::vector<float>> kept = inputs, not_kept = inputs;
    const auto c = make_codec(codec);
    auto errors = testing::run_ranks(kWorld, [&](int r) {
      RingOptions o;
      o.max_chunk_bytes = 2048;  // several pieces per share
      ring_all_reduce(*transports[r], runtime, *c, ReduceBuffer::of(kept[r]), o);
      o.outer_step = 1;
      o.restore_on_failure = false;
      ring_all_reduce(*transports[r], runtime, *c, ReduceBuffer::of(not_kept[r]), o,
                      &workspaces[r]);
    });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_FALSE(errors[r]) << describe(errors[r]);
      EXPECT_EQ(std::memcmp(kept[r].data(), not_kept[r].data(), kept[r].size() * sizeof(float)), 0)
          << "rank " << r;
      EXPECT_TRUE(workspaces[r].work.empty()) << "rank " << r << " kept a copy of its input";
      EXPECT_FALSE(workspaces[r].slots.empty()) << "rank " << r;
    }
  }
}

// fp32 pieces of split_min_payload_bytes (256 KiB here) and more travel as split messages (header,
// then the payload straight from the buffer): sums stay exact and identical on every rank, shares
// of unequal size included, and the wire bytes are those of whole messages. Every share is sent 2
// (world - 1) times in all, each of its P pieces with a 56-byte header.
TEST(RingSchedule, SplitMessagesStayExactAndCountTheSameBytes) {
  constexpr std::size_t kPiece = 66002;  // values: 264008 payload bytes
  for (int world = 2; world <= 4; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::size_t count = static_cast<std::size_t>(world) * 2 * (kPiece - 1) + 3;
    const auto inputs = integer_inputs(world, count);
    RingOptions o;
    o.max_chunk_bytes = kChunkHeaderBytes + kPiece * sizeof(float);
    o.split_min_payload_bytes = 256 << 10;
    o.timeout_s = 60;
    for (const bool restore : {true, false}) {
      o.restore_on_failure = restore;
      InProcRing ring(world, restore ? 1 : 2);
      const auto round = run_round(ring.transports(), inputs, o);
      std::uint64_t sent = 0, received = 0;
      for (int r = 0; r < world; ++r) {
        ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
        sent += round.stats[r].bytes_sent;
        received += round.stats[r].bytes_received;
      }
      expect_exact(round.buffers[world - 1], exact_sum(inputs));
      for (int r = 0; r + 1 < world; ++r) EXPECT_EQ(round.buffers[r], round.buffers[world - 1]);
      const std::uint64_t pieces_per_share = 2;
      const std::uint64_t want = 2 * static_cast<std::uint64_t>(world - 1) *
                                 (kChunkHeaderBytes * world * pieces_per_share + 4 * count);
      EXPECT_EQ(sent, want);
      EXPECT_EQ(received, want);
    }
  }
}

TEST(RingSchedule, MeasureErrorIsZeroForFp32) {
  RingOptions options;
  options.measure_error = true;
  InProcRing ring(3, 0);
  const auto round = run_round(ring.transports(), integer_inputs(3, 100), options);
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
    EXPECT_EQ(round.stats[r].relative_error, 0.0);
  }
}

TEST(RingSchedule, BadOptionsAreConfigErrorsAndLeaveTheBuffer) {
  InProcRing ring(2, 0);
  const auto inputs = integer_inputs(2, 10);
  RingOptions tiny;
  tiny.max_chunk_bytes = 3;  // less than one fp32 value
  auto round = run_round(ring.transports(), inputs, tiny);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(testing::holds<ConfigError>(round.errors[r])) << describe(round.errors[r]);
    EXPECT_EQ(round.buffers[r], inputs[r]);
  }
  InProcRing other(1, 0);
  ThreadRuntime runtime;
  std::vector<float> data(4);
  EXPECT_THROW(
      ring_all_reduce(*other.owned[0], runtime, kFp32, ReduceBuffer{data, 5}, RingOptions{}),
      ConfigError);
}

}  // namespace
}  // namespace meridian
