// Ring all-reduce under injected faults (FaultyTransport around in-process endpoints): a rank
// lost during the reduce-scatter or the all-gather makes every other rank raise PeerLostError
// (not TimeoutError: nobody waits out the timeout), leaves every input buffer unchanged, and the
// round succeeds when retried in a new epoch without the lost rank. A corrupted or truncated
// message raises ProtocolError at its receiver.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/backends/faults/faulty_transport.h"
#include "engine/backends/inproc/inproc_transport.h"
#include "engine/core/codec/fp32_codec.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"
#include "tests/collective/ring_harness.h"

namespace meridian {
namespace {

using testing::describe;
using testing::exact_sum;
using testing::holds;
using testing::InProcRing;
using testing::integer_inputs;
using testing::run_round;

const Fp32Codec kFp32;

constexpr int kWorld = 5;
constexpr int kFaultyRank = 2;
constexpr std::size_t kCount = 1000;
// 1000 values over 5 ranks = 200 per share; 40 values (160 bytes) per piece = 5 pieces.
constexpr std::size_t kMaxChunkBytes = 160;
constexpr std::uint64_t kPieces = 5;
// Each rank sends (world-1) * pieces messages per phase.
constexpr std::uint64_t kMessagesPerPhase = (kWorld - 1) * kPieces;

RingOptions options() {
  RingOptions o;
  o.max_chunk_bytes = kMaxChunkBytes;
  // Generous: a rank that waited it out would raise TimeoutError, which the tests reject.
  o.timeout_s = 60;
  return o;
}

// Runs one round on a ring of inputs.size() ranks (5 unless a test says otherwise) in which
// rank 2's endpoint is wrapped with `fault`.
testing::RoundResult round_with_fault(const FaultOptions& fault,
                                      const std::vector<std::vector<float>>& inputs,
                                      const RingOptions& ring_options = options()) {
  InProcRing ring(static_cast<int>(inputs.size()), 1);
  ThreadRuntime runtime;
  FaultyTransport faulty(*ring.owned[kFaultyRank], runtime, fault);
  auto transports = ring.transports();
  transports[kFaultyRank] = &faulty;
  return run_round(transports, inputs, ring_options);
}

// Every rank failed with PeerLostError (except `protocol_rank`, which must see ProtocolError),
// and every buffer still holds its input.
void expect_failed_cleanly(const testing::RoundResult& round,
                           const std::vector<std::vector<float>>& inputs, int protocol_rank) {
  for (int r = 0; r < static_cast<int>(inputs.size()); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (r == protocol_rank) {
      EXPECT_TRUE(holds<ProtocolError>(round.errors[r])) << describe(round.errors[r]);
    } else {
      EXPECT_TRUE(holds<PeerLostError>(round.errors[r])) << describe(round.errors[r]);
    }
    EXPECT_EQ(round.buffers[r], inputs[r]) << "input buffer changed";
  }
}

// The survivors retry in epoch 2 without the lost rank and get the exact sum of their inputs.
void expect_retry_succeeds(const std::vector<std::vector<float>>& inputs,
                           const RingOptions& ring_options = options()) {
  const int world = static_cast<int>(inputs.size());
  std::vector<std::vector<float>> survivors;
  for (int r = 0; r < world; ++r)
    if (r != kFaultyRank) survivors.push_back(inputs[r]);
  InProcRing ring(world - 1, 2);
  const auto retry = run_round(ring.transports(), survivors, ring_options);
  const auto want = exact_sum(survivors);
  for (int r = 0; r < world - 1; ++r) {
    ASSERT_FALSE(retry.errors[r]) << describe(retry.errors[r]);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(static_cast<double>(retry.buffers[r][i]), want[i]) << "rank " << r << " at " << i;
  }
}

TEST(RingFaults, PeerLostDuringReduceScatter) {
  const auto inputs = integer_inputs(kWorld, kCount);
  for (std::uint64_t k : {std::uint64_t{1}, std::uint64_t{7}, kMessagesPerPhase}) {
    SCOPED_TRACE("dies at message " + std::to_string(k));
    FaultOptions fault;
    fault.die_at_message = k;
    expect_failed_cleanly(round_with_fault(fault, inputs), inputs, -1);
  }
  expect_retry_succeeds(inputs);
}

TEST(RingFaults, PeerLostDuringAllGather) {
  const auto inputs = integer_inputs(kWorld, kCount);
  // The first all-gather message carries the lost rank's own reduced share: nobody else has it.
  FaultOptions fault;
  fault.die_at_message = kMessagesPerPhase + 1;
  expect_failed_cleanly(round_with_fault(fault, inputs), inputs, -1);
  expect_retry_succeeds(inputs);
}

// Without restore_on_failure a lost peer still fails every rank fast (PeerLostError, nobody
// waits out the timeout); the buffers then hold partial sums, which the caller rebuilds.
TEST(RingFaults, PeerLostWithoutRestoreStillFailsEveryoneFast) {
  const auto inputs = integer_inputs(kWorld, kCount);
  RingOptions o = options();
  o.restore_on_failure = false;
  for (std::uint64_t k : {std::uint64_t{7}, kMessagesPerPhase + 1}) {
    SCOPED_TRACE("dies at message " + std::to_string(k));
    FaultOptions fault;
    fault.die_at_message = k;
    const auto round = round_with_fault(fault, inputs, o);
    int changed = 0;
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(holds<PeerLostError>(round.errors[r]))
          << "rank " << r << ": " << describe(round.errors[r]);
      changed += round.buffers[r] != inputs[r];
    }
    // Partial sums stay: the copies (and the restore) were skipped.
    EXPECT_GT(changed, 0);
  }
  expect_retry_succeeds(inputs);
}

TEST(RingFaults, CorruptedMessageIsAProtocolErrorAtItsReceiver) {
  const auto inputs = integer_inputs(kWorld, kCount);
  // One byte in the header, one in the payload, in each phase.
  for (std::uint64_t k : {std::uint64_t{1}, kMessagesPerPhase + 2}) {
    for (std::size_t offset : {std::size_t{9}, kChunkHeaderBytes + 17}) {
      SCOPED_TRACE("message " + std::to_string(k) + ", byte " + std::to_string(offset));
      FaultOptions fault;
      fault.flip_byte_at_message = k;
      fault.flip_byte_offset = offset;
      expect_failed_cleanly(round_with_fault(fault, inputs), inputs, kFaultyRank + 1);
    }
  }
}

TEST(RingFaults, TruncatedMessageIsAProtocolErrorAtItsReceiver) {
  const auto inputs = integer_inputs(kWorld, kCount);
  for (std::size_t keep : {std::size_t{0}, std::size_t{20}, kChunkHeaderBytes + 8}) {
    SCOPED_TRACE("kept " + std::to_string(keep) + " bytes");
    FaultOptions fault;
    fault.truncate_at_message = 3;
    fault.truncate_to_bytes = keep;
    expect_failed_cleanly(round_with_fault(fault, inputs), inputs, kFaultyRank + 1);
  }
}

// Split messages: fp32 pieces of split_min_payload_bytes and more (256 KiB here, to keep the
// test small) travel as two messages, the 56-byte header and the payload sent straight from
// the buffer. 3 ranks, 2 pieces of 264000 bytes per share:
// each rank sends (3 - 1) * 2 = 4 messages per phase, each in two parts (outgoing messages
// 1, 3, 5, 7 are headers, 2, 4, 6, 8 payloads of the reduce-scatter).
constexpr std::size_t kSplitPiece = 66000;
std::vector<std::vector<float>> split_inputs() { return integer_inputs(3, 3 * 2 * kSplitPiece); }
RingOptions split_options() {
  RingOptions o = options();
  o.max_chunk_bytes = kChunkHeaderBytes + kSplitPiece * sizeof(float);
  o.split_min_payload_bytes = 256 << 10;
  return o;
}

// Cutting the first outgoing message to 56 bytes changes nothing: it is a header part. With
// pieces below the threshold it is a whole message, and the cut is a ProtocolError.
TEST(RingFaults, SplitMessagesSendTheHeaderAlone) {
  const auto inputs = split_inputs();
  FaultOptions fault;
  fault.truncate_at_message = 1;
  fault.truncate_to_bytes = kChunkHeaderBytes;
  RingOptions whole = split_options();
  whole.split_min_payload_bytes = kSplitPiece * sizeof(float) + 1;
  expect_failed_cleanly(round_with_fault(fault, inputs, whole), inputs, (kFaultyRank + 1) % 3);
  const auto round = round_with_fault(fault, inputs, split_options());
  const auto want = exact_sum(inputs);
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(round.errors[r]) << "rank " << r << ": " << describe(round.errors[r]);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(static_cast<double>(round.buffers[r][i]), want[i]) << "rank " << r << " at " << i;
  }
}

TEST(RingFaults, SplitMessagesPeerLostLeavesInputsAndRetrySucceeds) {
  const auto inputs = split_inputs();
  // A header and a payload part in the reduce-scatter, a payload part in the all-gather.
  for (std::uint64_t k : {std::uint64_t{3}, std::uint64_t{4}, std::uint64_t{10}}) {
    SCOPED_TRACE("dies at message " + std::to_string(k));
    FaultOptions fault;
    fault.die_at_message = k;
    expect_failed_cleanly(round_with_fault(fault, inputs, split_options()), inputs, -1);
  }
  expect_retry_succeeds(inputs, split_options());
}

FaultOptions flip_at(std::uint64_t message, std::size_t offset) {
  FaultOptions f;
  f.flip_byte_at_message = message;
  f.flip_byte_offset = offset;
  return f;
}

FaultOptions truncate_at(std::uint64_t message, std::size_t keep) {
  FaultOptions f;
  f.truncate_at_message = message;
  f.truncate_to_bytes = keep;
  return f;
}

// A rank that skipped its own non-finite guard sends a NaN in a split reduce-scatter payload
// (rank 2's share 2, which rank 0 sums at the first step): rank 0's fused add finds it in the sum
// (NonFiniteError naming rank 2) and every buffer is restored.
TEST(RingFaults, SplitMessagesNaNInASumIsANonFiniteErrorNamingItsSender) {
  std::vector<std::vector<float>> inputs = split_inputs();
  inputs[2][2 * 2 * kSplitPiece + 5] = std::nanf("");
  InProcRing ring(3, 1);
  const auto round = run_round(ring.transports(), inputs, split_options());
  for (int r = 0; r < 3; ++r) {  // expect_failed_cleanly's checks, bit for bit (NaN != NaN)
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(r == 0 || holds<PeerLostError>(round.errors[r])) << describe(round.errors[r]);
    ASSERT_EQ(round.buffers[r].size(), inputs[r].size());
    EXPECT_EQ(
        std::memcmp(round.buffers[r].data(), inputs[r].data(), inputs[r].size() * sizeof(float)), 0)
        << "input buffer changed";
  }
  ASSERT_TRUE(holds<NonFiniteError>(round.errors[0])) << describe(round.errors[0]);
  try {
    std::rethrow_exception(round.errors[0]);
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(e.peer(), 2);
    EXPECT_NE(std::string(e.what()).find("1 non-finite"), std::string::npos) << e.what();
  }
}

// A bad part in the reduce-scatter: its receiver raises ProtocolError, and since the share it
// was summing never completes, everyone else fails too.
TEST(RingFaults, SplitMessagesCorruptOrTruncatedPartIsAProtocolError) {
  const auto inputs = split_inputs();
  const std::pair<const char*, FaultOptions> cases[] = {
      {"header byte flipped", flip_at(1, 9)},
      {"payload byte flipped", flip_at(4, 100003)},
      {"header part truncated", truncate_at(3, 20)},
      {"payload part truncated", truncate_at(2, 1000)},
  };
  for (const auto& [what, fault] : cases) {
    SCOPED_TRACE(what);
    expect_failed_cleanly(round_with_fault(fault, inputs, split_options()), inputs,
                          (kFaultyRank + 1) % 3);
  }
}

// A bad payload part in the all-gather (rank 2's own share, to rank 0): rank 0 raises
// ProtocolError and rank 1 never gets that share from it. Rank 2 itself may already hold every
// share it needs (in a ring of 3 they reach it through rank 1, possibly before the abort): it
// then finishes with the exact sum; otherwise it fails with PeerLostError. With the restore
// copy every failed rank's input is intact; without it the all-gather's payloads land straight
// in the buffer (and are checked there), so a failed buffer holds whatever arrived.
TEST(RingFaults, SplitMessagesCorruptPartInTheAllGather) {
  const auto inputs = split_inputs();
  const auto want = exact_sum(inputs);
  for (const bool restore : {true, false}) {
    for (const FaultOptions& fault : {flip_at(10, 5), truncate_at(10, 4096)}) {
      SCOPED_TRACE(std::string(restore ? "restore" : "no restore") +
                   (fault.truncate_at_message != 0 ? ", truncated" : ", flipped"));
      RingOptions o = split_options();
      o.restore_on_failure = restore;
      const auto round = round_with_fault(fault, inputs, o);
      EXPECT_TRUE(holds<ProtocolError>(round.errors[0])) << describe(round.errors[0]);
      EXPECT_TRUE(holds<PeerLostError>(round.errors[1])) << describe(round.errors[1]);
      if (round.errors[2]) {
        EXPECT_TRUE(holds<PeerLostError>(round.errors[2])) << describe(round.errors[2]);
      } else {
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(static_cast<double>(round.buffers[2][i]), want[i]) << "at " << i;
      }
      if (!restore) continue;
      for (int r = 0; r < 3; ++r) {
        if (round.errors[r]) {
          EXPECT_EQ(round.buffers[r], inputs[r]) << "rank " << r;
        }
      }
    }
  }
}

TEST(RingFaults, DelayedMessagesStillSumExactly) {
  const auto inputs = integer_inputs(kWorld, kCount);
  FaultOptions fault;
  fault.delay_s = 0.001;
  const auto round = round_with_fault(fault, inputs);
  const auto want = exact_sum(inputs);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_FALSE(round.errors[r]) << describe(round.errors[r]);
    for (std::size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(static_cast<double>(round.buffers[r][i]), want[i]);
  }
}

// The mesh's view: nodes connect through a factory; node 30 dies mid-round in epoch 1 (the
// factory wraps only that member of that epoch), the survivors retry as epoch 2 and succeed.
TEST(RingFaults, RetryInTheNextEpochThroughTheFactory) {
  InProcNetwork network;
  ThreadRuntime runtime;
  FaultyTransportFactory factory(network, runtime, [](const EpochSpec& spec) {
    FaultOptions o;
    if (spec.epoch == 1 && spec.members[spec.rank] == 30) o.die_at_message = 3;
    return o;
  });
  const std::vector<std::int64_t> nodes = {10, 20, 30, 40};
  const auto inputs = integer_inputs(4, kCount);
  std::vector<std::vector<float>> buffers = inputs;
  std::vector<int> attempts(4, 0);
  auto errors = testing::run_ranks(4, [&](int me) {
    std::vector<std::int64_t> members = nodes;
    for (std::uint64_t epoch = 1; epoch <= 2; ++epoch) {
      const auto it = std::find(members.begin(), members.end(), nodes[me]);
      if (it == members.end()) return;  // this node is gone
      EpochSpec spec{epoch, static_cast<int>(it - members.begin()), members, 5.0};
      auto transport = factory.connect(spec);
      ++attempts[me];
      try {
        ring_all_reduce(*transport, runtime, kFp32, ReduceBuffer::of(buffers[me]), options());
        return;
      } catch (const PeerLostError&) {
        // Every rank learns who failed out of band (the mesh's job); here: node 30.
        members.erase(std::find(members.begin(), members.end(), 30));
        if (nodes[me] == 30) return;
      }
    }
  });
  std::vector<std::vector<float>> survivors = {inputs[0], inputs[1], inputs[3]};
  const auto want = exact_sum(survivors);
  for (int me : {0, 1, 3}) {
    ASSERT_FALSE(errors[me]) << describe(errors[me]);
    EXPECT_EQ(attempts[me], 2);
    for (std::size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(static_cast<double>(buffers[me][i]), want[i]) << "node " << nodes[me];
  }
  EXPECT_EQ(attempts[2], 1);
  EXPECT_EQ(buffers[2], inputs[2]);  // the dead node's buffer was left as it was
}

TEST(RingFaults, NodeKilledBeforeTheRoundFailsEveryone) {
  InProcNetwork network;
  network.kill_node(2);
  ThreadRuntime runtime;
  const auto inputs = integer_inputs(3, kCount);
  std::vector<std::vector<float>> buffers = inputs;
  auto errors = testing::run_ranks(3, [&](int r) {
    auto transport = network.connect(EpochSpec{7, r, {0, 1, 2}, 5.0});
    ring_all_reduce(*transport, runtime, kFp32, ReduceBuffer::of(buffers[r]), options());
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(holds<PeerLostError>(errors[r])) << describe(errors[r]);
    EXPECT_EQ(buffers[r], inputs[r]);
  }
}

TEST(RingFaults, SilentRankEndsInTimeoutOrPeerLostNotAHang) {
  // Rank 4 never shows up. Its neighbours time out (short timeout) and abort, the rest learn of it
  // as a lost peer.
  InProcRing ring(3, 1);
  auto transports = ring.transports();
  const auto inputs = integer_inputs(3, 100);
  RingOptions o;
  o.timeout_s = 0.2;
  std::vector<std::vector<float>> buffers = inputs;
  ThreadRuntime runtime;
  auto errors = testing::run_ranks(2, [&](int r) {
    ring_all_reduce(*transports[r], runtime, kFp32, ReduceBuffer::of(buffers[r]), o);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(holds<TimeoutError>(errors[r]) || holds<PeerLostError>(errors[r]))
        << describe(errors[r]);
    EXPECT_EQ(buffers[r], inputs[r]);
  }
}

}  // namespace
}  // namespace meridian
