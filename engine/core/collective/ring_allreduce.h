// Ring all-reduce (sum) over any Transport and Codec: reduce-scatter then all-gather, two
// chunks in flight per rank so coding overlaps transfer, fp32 accumulation, and results that are
// bit-identical on every rank (each rank re-codes its own reduced chunks before the all-gather,
// and forwarded chunks travel unchanged). Not an average: DiLoCo pre-divides by the world size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/runtime.h"
#include "engine/core/transport.h"

namespace meridian {

// Whether a ring all-reduce message's tag (TagKind::kCollective) is one of the all-gather phase
// (otherwise of the reduce-scatter), for tools that act on a phase
// (engine/backends/faults/fault_point.h) without knowing the tag layout.
bool ring_tag_is_all_gather(Tag tag);

struct RingOptions {
  // Upper bound on one message's encoded payload; larger rank shares are cut into pieces.
  std::size_t max_chunk_bytes = std::size_t{4} << 20;
  // Bound on every wait. A lost peer surfaces within this time on every rank.
  double timeout_s = 30.0;
  // Identify the round on the wire (chunk header, tags).
  std::uint64_t outer_step = 0;
  std::uint32_t bucket = 0;
  // For lossy codecs: also compute the exact fp32 sum (one extra fp32 pass) and report this
  // rank's relative error. Costs time and bytes; for studies and tests.
  bool measure_error = false;
  // Keep a copy of each piece of the buffer before it first changes, so that a failed round
  // leaves the buffer as it was (see ring_all_reduce()). Costs one streaming write of the whole
  // buffer per round. A caller that rebuilds its input before every attempt anyway (DiLoCo
  // recomputes its pre-divided pseudo-gradient) sets false: a failed round then leaves partial
  // sums, or data received for the round, in the buffer. Results of a round that succeeds are
  // the same either way.
  bool restore_on_failure = true;
  // fp32 only: a round whose pieces carry at least this many payload bytes sends every message
  // as two (header, then the payload straight from the buffer, saving a copy into a send slot;
  // see engine/core/collective/README.md, "Split messages"). Over Gloo on loopback that was 4-7 %
  // faster with 4 MiB pieces, no different with 2 MiB and slower with 1 MiB and less (the
  // second message costs more than the copy saved).
  std::size_t split_min_payload_bytes = std::size_t{2} << 20;
};

struct RingStats {
  int participants = 0;
  std::uint64_t bytes_sent = 0;      // wire bytes this rank sent (headers included)
  std::uint64_t bytes_received = 0;  // wire bytes this rank received
  double elapsed_s = 0.0;            // on the Runtime clock
  // ||result - exact|| / ||exact|| over this rank's result (NaN when not measured; 0 for fp32).
  double relative_error = std::numeric_limits<double>::quiet_NaN();
};

// The buffer to reduce. `data` empty with `count` > 0 is a phantom buffer: the ring runs and
// charges the wire bytes of `count` encoded values, but nothing is encoded (timing-only
// simulation of models too large to hold).
struct ReduceBuffer {
  std::span<float> data;
  std::size_t count = 0;
  static ReduceBuffer of(std::span<float> d) { return {d, d.size()}; }
  static ReduceBuffer phantom(std::size_t n) { return {{}, n}; }
};

// Scratch memory of the ring (a copy of the input, which restores the buffer after a failed
// round, and the message slots), kept by a caller that all-reduces repeatedly so that
// steady-state rounds allocate nothing and touch no fresh pages. Grows to the largest round it
// served. One per concurrent call: not thread-safe. Its contents are the ring's business.
struct RingWorkspace {
  std::vector<float> work;
  std::vector<std::vector<std::byte>> slots;
};

// In place: on return every rank's buffer holds the (codec-rounded) sum. On PeerLostError /
// TimeoutError / ProtocolError (or ConfigError for bad options) the transport is aborted (so
// peers fail fast too) and `buf` is unchanged, so the round can be retried in a new epoch. A
// ProtocolError about a received chunk names the sender (its peer(): this rank's predecessor).
// While the call runs `buf` holds partial sums (nobody may read it concurrently).
// `codec` encodes every message (the ring uses its fused paths where it has them); a sparse
// codec is a ConfigError (use ring_all_gather_sum).
// `workspace` may be null (a temporary one is used).
RingStats ring_all_reduce(Transport& transport, Runtime& runtime, const Codec& codec,
                          ReduceBuffer buf, const RingOptions& options,
                          RingWorkspace* workspace = nullptr);

// For a sparse codec (Codec::sparse(), e.g. topk): on return every rank's buffer holds the sum,
// over ranks in rank order, of decode(encode(that rank's buffer)) -- bit-identical on every
// rank -- and `own`, when not empty (same size as the buffer), this rank's own term
// decode(encode(buffer)), which its error feedback subtracts. Each rank's encoding travels whole
// around the ring (world - 1 steps, two transfers in flight, pieces of whole codec blocks that
// encode into at most max_chunk_bytes, or one block where a block alone is larger, so that the
// cut changes no top-k selection)
// and is decoded only once all are here; why this and not a reduce-scatter is in
// engine/core/collective/README.md, "Sparse pieces". One rank alone still gets decode(encode(x)).
// Errors as ring_all_reduce (transport aborted; `buf` and `own` unchanged); an encoding that
// does not decode, or whose terms make the sum non-finite, is the ProtocolError /
// NonFiniteError of its author (peer()), a message that fails its checks the predecessor's.
// restore_on_failure and measure_error do not apply. `segments`, when not empty, are the lengths
// of consecutive runs of the buffer (summing to its count) encoded each on its own, as separate
// calls would, but gathered in one schedule: the N - 1 hops' latency is paid once, not per run
// (a shard's buckets: on a WAN ring that latency, not the bytes, bounds a per-bucket gather).
RingStats ring_all_gather_sum(Transport& transport, Runtime& runtime, const Codec& codec,
                              ReduceBuffer buf, std::span<float> own, const RingOptions& options,
                              RingWorkspace* workspace = nullptr,
                              std::span<const std::size_t> segments = {});

// How DiLoCo sums a sparse codec's terms (engine/core/collective/README.md, "Sparse pieces"): the
// all-gather of the encodings above (exact: each rank's term as it selected it), or each rank's
// decoded term all-reduced by the dense ring with a dense codec (its rounding of partial sums
// on top); auto picks the one whose messages carry fewer bytes per rank.
enum class SparseCollective : std::uint8_t { kAuto, kGather, kRing };
inline constexpr SparseCollective kAllSparseCollectives[] = {
    SparseCollective::kAuto, SparseCollective::kGather, SparseCollective::kRing};
// Parses "auto", "gather", "ring"; throws ConfigError naming the choices.
SparseCollective parse_sparse_collective(std::string_view name);
std::string_view sparse_collective_name(SparseCollective c);
// What `choice` is for `world` ranks summing runs of `counts` values (a shard's buckets), terms
// encoded by `sparse` and the ring's shares by `dense`: kGather or kRing. kAuto compares the
// bytes one rank sends, (world - 1) encodings of every run against the ring's 2 (world - 1)
// shares of every run (one piece's header each), and keeps the gather on a tie (one rank).
SparseCollective resolve_sparse_collective(SparseCollective choice, const Codec& sparse,
                                           const Codec& dense, std::span<const std::size_t> counts,
                                           int world);

// Phantom buffers of `counts[i]` values all-reduced one after another with `options[i]` (the
// buckets of a timing-only simulation), handed to the transport whole when it can time them so
// (Transport::run_phantom_rings; for a sparse codec, rounds of ring_all_gather_sum): the
// leading rounds that have one piece per share, each with
// its stats and start time on the Runtime clock; empty when the first has more (the caller
// runs it with ring_all_reduce and may try again after it); nullopt when the transport cannot
// time rounds whole (it will not for the rest of the run: run every bucket with
// ring_all_reduce). On an error the transport is aborted, as by ring_all_reduce.
struct PhantomRoundStats {
  RingStats stats;
  double start_s = 0;
};
std::optional<std::vector<PhantomRoundStats>> phantom_ring_rounds(
    Transport& transport, Runtime& runtime, const Codec& codec,
    std::span<const std::size_t> counts, std::span<const RingOptions> options);

}  // namespace meridian
