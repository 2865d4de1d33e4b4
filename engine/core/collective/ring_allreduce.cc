// Ring all-reduce: the schedule (shares, pieces, tags, chunk ids), the double-buffered pipeline
// over Transport::start_exchange, and the error path (abort, input untouched). Written only
// against Transport, Runtime and Codec; no backend is named here.
//
// Schedule. The buffer of n values is cut into `world` shares (sizes differ by at most one);
// every share is cut into the same number P of pieces, P chosen so that one piece encodes into
// at most max_chunk_bytes. A transfer sends one piece to rank+1 while receiving one from
// rank-1; transfer t belongs to global step t / P and carries piece t % P.
//   reduce-scatter step s (0..world-2): send share (r-s), receive share (r-s-1), add it in.
//     Afterwards rank r owns the full sum of share (r+1).
//   all-gather step s (0..world-2): send share (r+1-s), receive share (r-s). Step 0 encodes the
//     owned share and decodes that very encoding in place; later steps forward the bytes
//     received one step earlier unchanged. Every rank therefore decodes identical bytes.
// Two transfers are in flight. Transfer t is posted as soon as t-2 has completed on the wire
// (its receive buffer and exchange are reused); its message was made beforehand, once t-P (the
// piece it sends) was decoded. After posting t, a rank decodes t-2 and encodes t+1 while t-1
// and t are on the wire, so the predecessor's data never waits for this rank's coding (with
// fewer than 3 pieces per share, t+1 is encoded only after t-1 is decoded).
//
// Split messages. With fp32 and pieces of at least RingOptions::split_min_payload_bytes, every
// message of the round travels as two, with one tag each: its 56-byte header, then its payload. The
// sender then sends a piece straight from the buffer (no copy into a send slot; the checksum is
// taken over the buffer), and the receiver lands both parts next to each other in one receive slot,
// so the rest of the ring sees one contiguous message as before. Whether a round splits is
// decided from the largest piece, which every rank computes alike. The all-gather's payloads go
// further: they land straight in the buffer, are checked there, and are forwarded from there
// (a piece the all-gather is the first to change is backed up before its receive is posted).
#include "engine/core/collective/ring_allreduce.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/codec/fp32_codec.h"
#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/util/finite.h"
#include "engine/core/wire/chunk.h"

namespace meridian {
namespace {

enum Phase : std::uint64_t { kReduceScatter = 0, kAllGather = 1 };

// The measuring pass of `measure_error` uses its own tags so it never meets the codec pass.
enum Pass : std::uint64_t { kCodecPass = 0, kExactPass = 1 };

constexpr std::uint64_t kMaxBucket = (std::uint64_t{1} << 23) - 1;
constexpr int kMaxWorld = (1 << 15);

// The part of a split message a tag carries (see "Split messages" above); whole messages are
// kHeader.
enum Part : std::uint64_t { kHeader = 0, kPayload = 1 };

// Tag layout (56 bits): bucket [33, 56), pass bit 32, phase bit 31, step [16, 31), part bit 15,
// piece mod 2^15 [0, 15). Pieces of one step, and the two parts of a message, differ in their
// tag so that transports whose matching is not FIFO per tag (several receives posted at once)
// cannot swap them.
Tag ring_tag(std::uint32_t bucket, Pass pass, Phase phase, int step, std::size_t piece, Part part) {
  return make_tag(TagKind::kCollective,
                  (std::uint64_t{bucket} << 33) | (std::uint64_t{pass} << 32) |
                      (std::uint64_t{phase} << 31) | (static_cast<std::uint64_t>(step) << 16) |
                      (std::uint64_t{part} << 15) | (static_cast<std::uint64_t>(piece) & 0x7FFF));
}

// A prepared message: whole (`payload` empty), or split into header and payload.
struct Outgoing {
  Payload header;   // the whole message when not split
  Payload payload;  // the payload of a split message
};

// The two exchanges of a split message, completed together within one timeout. What it
// reports is the header's bytes when that part came short (so the message reads as truncated),
// else the sum of both parts.
class SplitExchange final : public PendingExchange {
 public:
  SplitExchange(std::unique_ptr<PendingExchange> header, std::unique_ptr<PendingExchange> payload,
                std::size_t header_bytes, Runtime& runtime)
      : header_(std::move(header)),
        payload_(std::move(payload)),
        header_bytes_(header_bytes),
        runtime_(runtime) {}

  Received wait(double timeout_s) override {
    const double deadline = runtime_.now_s() + timeout_s;
    const Received h = header_->wait(timeout_s);
    // The payload gets what is left of the timeout (at least a token amount, so that a
    // payload already here is still collected).
    const Received p = payload_->wait(std::max(deadline - runtime_.now_s(), 1e-3));
    if (h.bytes != header_bytes_) return {h.bytes, h.wire_bytes + p.wire_bytes};
    return {h.bytes + p.bytes, h.wire_bytes + p.wire_bytes};
  }

 private:
  std::unique_ptr<PendingExchange> header_;
  std::unique_ptr<PendingExchange> payload_;
  const std::size_t header_bytes_;
  Runtime& runtime_;
};

struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// Part i of `total` cut into `parts` near-equal consecutive parts (the first total % parts
// parts are one longer).
Range split(std::size_t total, std::size_t parts, std::size_t i) {
  const std::size_t base = total / parts, extra = total % parts;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// Largest element count whose encoding fits `max_bytes`, searched in [1, limit].
std::size_t max_piece_elements(const Codec& codec, std::size_t max_bytes, std::size_t limit) {
  if (codec.encoded_bytes(limit) <= max_bytes) return limit;
  std::size_t lo = 1, hi = limit;  // encoded_bytes(lo) <= max_bytes < encoded_bytes(hi)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (codec.encoded_bytes(mid) <= max_bytes ? lo : hi) = mid;
  }
  return lo;
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// One pass of the ring over `work` (empty for a phantom buffer of `count` values).
class RingPass {
 public:
  RingPass(Transport& transport, Runtime& runtime, const Codec& codec, const RingOptions& options,
           std::size_t count, Pass pass)
      : transport_(transport),
        runtime_(runtime),
        codec_(codec),
        options_(options),
        count_(count),
        pass_(pass),
        world_(transport.size()),
        rank_(transport.rank()) {
    if (count_ == 0 || world_ == 1) return;
    const std::size_t max_share = split(count_, world_, 0).count;
    if (codec_.encoded_bytes(1) > options_.max_chunk_bytes)
      throw ConfigError(
          "ring all-reduce: max_chunk_bytes " + std::to_string(options_.max_chunk_bytes) +
          " is smaller than one encoded value of codec " + std::string(codec_.name()) + " (" +
          std::to_string(codec_.encoded_bytes(1)) + " bytes)");
    const std::size_t k = max_piece_elements(codec_, options_.max_chunk_bytes, max_share);
    pieces_ = (max_share + k - 1) / k;
    if (2 * static_cast<std::uint64_t>(world_) * pieces_ > 0xFFFFFFFFull)
      throw ConfigError("ring all-reduce: " + std::to_string(count_) + " values in pieces of " +
                        std::to_string(options_.max_chunk_bytes) +
                        " bytes need more chunk ids than the wire format has; raise "
                        "max_chunk_bytes");
    transfers_ = 2 * static_cast<std::size_t>(world_ - 1) * pieces_;
    slot_bytes_ = chunk_message_bytes(codec_, (max_share + pieces_ - 1) / pieces_);
  }

  // Runs the pass; on return `work` holds the sum. Message slots come from `slots` (grown as
  // needed, reused across calls). Before a piece of `work` first changes, its values are copied
  // to the same place in `backup` (same size as `work`, or empty for no copies), so restore()
  // can undo the pass; once the pass completes, `backup` holds all of the input. Throws on any
  // error (the caller aborts and restores).
  void run(std::span<float> work, std::span<float> backup,
           std::vector<std::vector<std::byte>>& slots, RingStats& stats) {
    if (transfers_ == 0) return;
    work_ = work;
    backup_ = backup;
    phantom_ = work.empty();
    split_ = !phantom_ && codec_.encodes_in_place() &&
             slot_bytes_ - kChunkHeaderBytes >= options_.split_min_payload_bytes;
    saved_.assign(backup_.empty() ? 0 : transfers_, 0);
    forward_.assign(split_ ? pieces_ : 0, Forward{});
    if (!phantom_) {
      recv_slots_ = std::min(transfers_, pieces_ + 2);
      if (slots.size() < kSendSlots + recv_slots_) slots.resize(kSendSlots + recv_slots_);
      for (std::size_t i = 0; i < kSendSlots + recv_slots_; ++i) {
        if (slots[i].size() < slot_bytes_) slots[i].resize(slot_bytes_);
        slots_.push_back(std::span(slots[i]).first(slot_bytes_));
      }
    }
    // Transfers [0, waited) have completed on the wire; [0, consumed) have also been decoded
    // (checked, added or copied into `work`); [0, prepared) have their message ready to post.
    // Each advances in transfer order.
    std::size_t waited = 0, consumed = 0, prepared = 0;
    auto consume_through = [&](std::size_t end) {
      for (; consumed < end; ++consumed) {
        if (consumed == waited) wait(waited++, stats);
        consume(consumed);
      }
    };
    // Transfer u sends the piece that transfer u - P received: transfers [0, this) must have
    // been decoded (and so validated) before u is prepared.
    auto consumed_before_preparing = [&](std::size_t u) {
      return u + 1 >= pieces_ ? u + 1 - pieces_ : 0;
    };
    for (std::size_t t = 0; t < transfers_; ++t) {
      if (prepared == t) {  // not prepared ahead (P < 3, or the first transfers)
        consume_through(consumed_before_preparing(t));
        prepare(prepared++);
      }
      // Transfer t reuses the receive buffer and the exchange of transfer t - 2.
      for (const std::size_t free = t >= 1 ? t - 1 : 0; waited < free;) wait(waited++, stats);
      post(t, stats);
      // Only now decode what has arrived, and encode transfer t + 1 when its piece is ready (its
      // send slot was transfer t - 2's): the predecessor can send into transfer t's receive while
      // this rank works, and transfer t + 1 is posted right after t - 1 completes.
      consume_through(waited);
      if (t + 1 < transfers_ && consumed >= consumed_before_preparing(t + 1)) prepare(prepared++);
    }
    consume_through(transfers_);
  }

  // The pass as a phantom round the transport may time whole (Transport::run_phantom_rings):
  // only with one piece per share (one transfer in flight, which is what it times), else
  // nothing (it runs message by message).
  std::optional<PhantomRing> phantom_round() const {
    if (pieces_ != 1 || transfers_ == 0) return std::nullopt;
    PhantomRing round;
    round.outer_step = options_.outer_step;
    round.tag = ring_tag(options_.bucket, pass_, kReduceScatter, 0, 0, kHeader);
    round.transfers = transfers_;
    round.timeout_s = options_.timeout_s;
    for (std::size_t t = 0; t < transfers_; ++t) {
      const Where w = locate(t);
      const std::size_t out = chunk_message_bytes(codec_, piece_range(w.send_share, 0).count);
      if (t == 0) round.first_send_bytes = out;
      round.send_bytes += out;
      round.recv_bytes += chunk_message_bytes(codec_, piece_range(w.recv_share, 0).count);
    }
    return round;
  }

  // Puts back every piece of `work` that the pass changed (from `backup`).
  void restore() const {
    if (work_.empty()) return;  // phantom, or never ran
    for (std::size_t t = 0; t < saved_.size(); ++t) {
      if (!saved_[t]) continue;
      const Where w = locate(t);
      const Range r = piece_range(w.recv_share, w.piece);
      std::copy_n(backup_.begin() + r.offset, r.count, work_.begin() + r.offset);
    }
  }

  std::size_t transfers() const { return transfers_; }

  // Drops unfinished exchanges (after the transport was aborted) before the buffers go.
  ~RingPass() {
    for (auto& p : pending_) p.reset();
  }

 private:
  struct Where {
    Phase phase;
    int step;  // within the phase
    std::size_t piece;
    int send_share;
    int recv_share;
  };

  Where locate(std::size_t t) const {
    const std::size_t global = t / pieces_;
    const int steps = world_ - 1;
    Where w{};
    w.phase = global < static_cast<std::size_t>(steps) ? kReduceScatter : kAllGather;
    w.step = static_cast<int>(global % steps);
    w.piece = t % pieces_;
    if (w.phase == kReduceScatter) {
      w.send_share = mod(rank_ - w.step, world_);
      w.recv_share = mod(rank_ - w.step - 1, world_);
    } else {
      w.send_share = mod(rank_ + 1 - w.step, world_);
      w.recv_share = mod(rank_ - w.step, world_);
    }
    return w;
  }

  // Whether transfer `w`'s receive is the first change to its piece: every reduce-scatter
  // receive (each share but the rank's own is added into once), and all-gather step 0 (the
  // rank's own share, untouched until then). Later all-gather steps overwrite sums, and the
  // owner's re-decode at all-gather step 0 changes a share summed in the reduce-scatter.
  static bool first_change(const Where& w) { return w.phase == kReduceScatter || w.step == 0; }

  // Whether transfer `w`'s receive is summed by decode_add_crc_forward (split messages, the
  // reduce-scatter), which checksums the sums for the message that forwards them and counts
  // their non-finite values.
  bool forwards_sums(const Where& w) const { return split_ && w.phase == kReduceScatter; }

  Range piece_range(int share, std::size_t piece) const {
    const Range s = split(count_, world_, share);
    const Range p = split(s.count, pieces_, piece);
    return {s.offset + p.offset, p.count};
  }

  ChunkId chunk_id(Phase phase, int share, std::size_t piece, std::size_t count) const {
    ChunkId id;
    id.epoch = transport_.epoch();
    id.outer_step = options_.outer_step;
    id.bucket = options_.bucket;
    id.chunk = static_cast<std::uint32_t>((phase * world_ + share) * pieces_ + piece);
    id.codec = codec_.id();
    id.count = count;
    return id;
  }

  std::span<float> values(Range r) const { return work_.subspan(r.offset, r.count); }
  // Three send slots (transfer t is encoded while t - 1 and t - 2 may still be sending) and P+2
  // receive slots (the all-gather forwards from the slot of t-P, which must survive until
  // transfer t completes).
  static constexpr std::size_t kSendSlots = 3;
  std::span<std::byte> send_slot(std::size_t t) const { return slots_[t % kSendSlots]; }
  std::span<std::byte> recv_slot(std::size_t t) const {
    return slots_[kSendSlots + t % recv_slots_];
  }

  // Makes transfer t's message: encodes its piece into a send slot, or picks the bytes it
  // forwards. Needs transfer t - P consumed and transfer t - 3 (the slot's last user) waited.
  void prepare(std::size_t t) {
    const Where w = locate(t);
    const Range r = piece_range(w.send_share, w.piece);
    const std::size_t bytes = chunk_message_bytes(codec_, r.count);
    Payload out = Payload::phantom(bytes);
    if (split_ && w.phase == kAllGather && w.step > 0) {
      // Forward the header that arrived one step earlier and the piece it landed in the buffer
      // (both validated when they arrived; the piece is final, nothing writes it again).
      outgoing_[t % 2] = {
          Payload::of(std::span<const std::byte>(recv_slot(t - pieces_)).first(kChunkHeaderBytes)),
          Payload::of(std::as_bytes(values(r)))};
      return;
    }
    if (!phantom_ && w.phase == kAllGather && w.step > 0) {
      // Forward what arrived one step earlier, byte for byte (validated when it arrived).
      out = Payload::of(std::span<const std::byte>(recv_slot(t - pieces_)).first(bytes));
    } else if (split_) {
      // The header in the send slot; the payload is the piece itself, sent from the buffer. It
      // stays unchanged until the exchange completes: the piece is next written by a receive
      // that is consumed after this transfer was waited for.
      const std::span<std::byte> message = send_slot(t).first(bytes);
      const auto piece = std::as_bytes(values(r));
      const std::uint32_t seed =
          begin_seal(chunk_id(w.phase, w.send_share, w.piece, r.count), codec_, message);
      Forward& f = forward_[w.piece];
      if (f.ready) {  // checksummed as the reduce-scatter summed it (consume_message)
        MERIDIAN_CHECK_EQ(f.seed, seed);
        f.ready = false;
        end_seal(message, f.crc);
      } else {
        end_seal(message, crc32c(piece, seed));
      }
      outgoing_[t % 2] = {Payload::of(message.first(kChunkHeaderBytes)), Payload::of(piece)};
      return;
    } else if (!phantom_) {
      std::span<std::byte> message = send_slot(t).first(bytes);
      std::span<std::byte> payload = message.subspan(kChunkHeaderBytes);
      const ChunkId id = chunk_id(w.phase, w.send_share, w.piece, r.count);
      end_seal(message, codec_.encode_crc(values(r), payload, begin_seal(id, codec_, message)));
      // The owner keeps exactly what the others will decode (for a lossless codec, that is
      // what it already holds).
      if (w.phase == kAllGather && !codec_.lossless()) codec_.decode(payload, values(r));
      out = Payload::of(message);
    }
    outgoing_[t % 2] = {out, {}};
  }

  // Posts transfer t (prepared): its message to rank + 1 and its receive from rank - 1.
  void post(std::size_t t, RingStats& stats) {
    const Where w = locate(t);
    const Outgoing out = outgoing_[t % 2];
    // Receives are posted with exactly the expected message size (transports such as NCCL
    // need matching sizes); a longer message is the transport's ProtocolError, a shorter one
    // fails open_chunk.
    std::span<std::byte> into, into_payload;
    if (!phantom_) {
      const Range in = piece_range(w.recv_share, w.piece);
      into = recv_slot(t).first(chunk_message_bytes(codec_, in.count));
      // In place: the transport may write the piece as soon as this is posted, possibly while
      // this rank's reduce-scatter send of the same piece has not been waited for (world 2, one
      // piece). Safe all the same: what arrives here is a sum that needed that send's bytes
      // delivered first, so the transport has read them by then.
      const bool in_place = split_ && w.phase == kAllGather;
      into_payload =
          in_place ? std::as_writable_bytes(values(in)) : into.subspan(kChunkHeaderBytes);
      if (in_place && !backup_.empty() && first_change(w)) {
        // The transport may write the piece from now on: back it up first.
        std::copy_n(values(in).begin(), in.count, backup_.begin() + in.offset);
        saved_[t] = 1;
      }
    }
    stats.bytes_sent += out.header.wire_bytes + out.payload.wire_bytes;
    const int to = mod(rank_ + 1, world_), from = mod(rank_ - 1, world_);
    auto tag = [&](Part part) {
      return ring_tag(options_.bucket, pass_, w.phase, w.step, w.piece, part);
    };
    if (!split_) {
      pending_[t % 2] = transport_.start_exchange(to, out.header, from, into, tag(kHeader));
      return;
    }
    // Both parts land next to each other in the receive slot.
    auto header = transport_.start_exchange(to, out.header, from, into.first(kChunkHeaderBytes),
                                            tag(kHeader));
    auto payload = transport_.start_exchange(to, out.payload, from, into_payload, tag(kPayload));
    pending_[t % 2] = std::make_unique<SplitExchange>(std::move(header), std::move(payload),
                                                      kChunkHeaderBytes, runtime_);
  }

  // Completes transfer t on the wire (its receive slot stays untouched until consume(t)).
  void wait(std::size_t t, RingStats& stats) {
    got_[t % 2] = pending_[t % 2]->wait(options_.timeout_s);
    pending_[t % 2].reset();
    stats.bytes_received += got_[t % 2].wire_bytes;
  }

  // Checks transfer t's message and adds (reduce-scatter) or copies (all-gather) it into `work`,
  // then that the values it produced are finite. A rank's own contribution was checked before
  // it was sent (the outer loop's guard), so a NaN or Inf here came from the predecessor, or
  // from a sum that overflowed (its doing too: no honest pseudo-gradient gets near 3e38).
  void consume(std::size_t t) {
    consume_message(t);
    if (phantom_) return;
    const Where w = locate(t);
    const std::uint64_t bad = forwards_sums(w)
                                  ? counted_non_finite_
                                  : count_non_finite(values(piece_range(w.recv_share, w.piece)));
    if (bad > 0)
      throw NonFiniteError("ring all-reduce: the chunk from rank " +
                               std::to_string(mod(rank_ - 1, world_)) + " holds " +
                               std::to_string(bad) + " non-finite values (NaN or Inf)",
                           mod(rank_ - 1, world_));
  }

  void consume_message(std::size_t t) {
    const Where w = locate(t);
    const Received got = got_[t % 2];
    const Range r = piece_range(w.recv_share, w.piece);
    const std::size_t want = chunk_message_bytes(codec_, r.count);
    if (phantom_) {
      if (got.wire_bytes != want || got.bytes != 0)
        throw ProtocolError("ring all-reduce: phantom message of " +
                            std::to_string(got.wire_bytes) + " wire bytes (" +
                            std::to_string(got.bytes) + " content bytes) from rank " +
                            std::to_string(mod(rank_ - 1, world_)) + ", expected " +
                            std::to_string(want) + " wire bytes and no content");
      return;
    }
    const auto message = std::span<const std::byte>(recv_slot(t)).first(got.bytes);
    try {
      const ChunkId id = chunk_id(w.phase, w.recv_share, w.piece, r.count);
      const std::span<float> backup = !backup_.empty() && first_change(w)
                                          ? backup_.subspan(r.offset, r.count)
                                          : std::span<float>();
      if (split_ && w.phase == kAllGather) {
        // The payload is already in place: check it there. (Only the header is in the slot;
        // the slot's span of the message's size stands for the message in the size check.)
        const std::uint32_t header = check_chunk_header(message, id, codec_);
        verify_chunk_checksum(message, crc32c(std::as_bytes(values(r)), header));
        return;
      }
      // Check the header, then back up, decode and checksum (one walk where the codec fuses
      // them); a bad checksum is found after the values changed, which restore() undoes like
      // any other failure.
      const std::uint32_t header = check_chunk_header(message, id, codec_);
      const auto payload = message.subspan(kChunkHeaderBytes);
      if (!backup.empty()) saved_[t] = 1;
      std::uint32_t crc;
      if (forwards_sums(w)) {
        // Transfer t + P forwards these sums (the next step's send of this share, or the
        // all-gather's first) with them as its payload: checksum them for it, and count what is
        // not finite, while each block is still in cache (results/bench/gloo.md).
        const Where next = locate(t + pieces_);
        MERIDIAN_CHECK_EQ(next.send_share, w.recv_share);
        Forward& f = forward_[w.piece];
        f.seed = header_seed(chunk_id(next.phase, next.send_share, next.piece, r.count), codec_);
        f.crc = f.seed;
        crc = codec_.decode_add_crc_forward(payload, values(r), backup, header, f.crc,
                                            counted_non_finite_);
        f.ready = true;
      } else {
        crc = w.phase == kReduceScatter ? codec_.decode_add_crc(payload, values(r), backup, header)
                                        : codec_.decode_crc(payload, values(r), backup, header);
      }
      verify_chunk_checksum(message, crc);
    } catch (const ProtocolError& e) {
      // Every message comes from the predecessor, which validated anything it forwards: a bad
      // chunk is its doing (what the mesh evicts it for).
      throw ProtocolError(e.what(), mod(rank_ - 1, world_));
    }
  }

  Transport& transport_;
  Runtime& runtime_;
  const Codec& codec_;
  const RingOptions& options_;
  const std::size_t count_;
  const Pass pass_;
  const int world_;
  const int rank_;
  // Split messages: the checksum of the message that forwards a reduce-scatter sum, taken as
  // the sum was added (per piece index: that message, transfer t + P, is prepared before the
  // next receive of the same index is consumed), and the header seed it started from.
  struct Forward {
    std::uint32_t seed = 0, crc = 0;
    bool ready = false;
  };
  std::vector<Forward> forward_;
  // The non-finite count of the transfer being consumed, when its decode counted it
  // (forwards_sums).
  std::uint64_t counted_non_finite_ = 0;
  std::size_t pieces_ = 0;      // P: pieces per share
  std::size_t transfers_ = 0;   // 2 (world - 1) P
  std::size_t slot_bytes_ = 0;  // largest message
  std::span<float> work_;
  std::span<float> backup_;
  // Per transfer, with a backup: whether its piece was copied to `backup` (before it first
  // changed), so restore() puts it back.
  std::vector<char> saved_;
  bool phantom_ = false;
  // Messages travel as header + payload, and all-gather payloads land in the buffer (see
  // "Split messages").
  bool split_ = false;
  std::size_t recv_slots_ = 0;
  std::vector<std::span<std::byte>> slots_;      // into the workspace: send, then receive slots
  Outgoing outgoing_[2];                         // prepared messages of the next transfers
  Received got_[2];                              // of the last two transfers waited for
  std::unique_ptr<PendingExchange> pending_[2];  // declared last: destroyed before the buffers
};

// The all-gather of a sparse codec's encodings (ring_all_gather_sum). Each segment of the buffer
// (a bucket) is cut into units of whole codec blocks (Codec::block_values), as many blocks each
// as encode into max_chunk_bytes and at least one; each unit is encoded on its own. A piece is a
// run of consecutive units whose encodings, back to back, fit max_chunk_bytes (at least one
// unit): a shard's small buckets travel in one message. The P pieces form one schedule, and each
// rank encodes its pieces once. Transfer t (of (world-1)P) is step s = t / P, piece p = t % P:
// send rank (r-s)'s piece p to rank+1, receive rank (r-s-1)'s piece p from rank-1 (step 0 sends
// the rank's own; later steps forward, byte for byte, what arrived one step earlier, checked on
// arrival). Two transfers in flight. Nothing is decoded until every encoding is here; then each
// rank adds all of them in rank order, so the sum is bit-identical on every rank.
class GatherPass {
 public:
  // `segments`: the lengths of consecutive runs of the buffer, each encoded on its own (the
  // buckets of a shard); empty = one run of `count`.
  GatherPass(Transport& transport, Runtime& runtime, const Codec& codec, const RingOptions& options,
             std::size_t count, std::span<const std::size_t> segments = {})
      : transport_(transport),
        runtime_(runtime),
        codec_(codec),
        options_(options),
        count_(count),
        world_(transport.size()),
        rank_(transport.rank()) {
    std::size_t offset = 0;
    for (const std::size_t n : segments) cut_segment(offset, n), offset += n;
    if (segments.empty()) cut_segment(0, count_), offset = count_;
    if (offset != count_)
      throw ConfigError("ring all-gather: segments of " + std::to_string(offset) +
                        " values for a buffer of " + std::to_string(count_));
    pack_units();
    if (2 * static_cast<std::uint64_t>(world_) * pieces_ > 0xFFFFFFFFull)
      throw ConfigError("ring all-gather: " + std::to_string(count_) + " values in pieces of " +
                        std::to_string(options_.max_chunk_bytes) +
                        " bytes need more chunk ids than the wire format has; raise "
                        "max_chunk_bytes");
    transfers_ = static_cast<std::size_t>(world_ - 1) * pieces_;
  }

  // Gathers every rank's encoding of `values` (empty: phantom) into `messages` (grown as
  // needed: world * P slots, reused across calls). Throws on any error; nothing of the caller's
  // changes.
  void run(std::span<const float> values, std::vector<std::vector<std::byte>>& messages,
           RingStats& stats) {
    messages_ = &messages;
    if (count_ == 0) return;
    phantom_ = values.empty();
    if (!phantom_) {
      if (messages.size() < static_cast<std::size_t>(world_) * pieces_)
        messages.resize(static_cast<std::size_t>(world_) * pieces_);
      for (std::size_t p = 0; p < pieces_; ++p) {
        for (int src = 0; src < world_; ++src) message(src, p).resize(message_bytes(p));
        const std::span<std::byte> m = message(rank_, p);
        std::uint32_t crc = begin_seal(chunk_id(rank_, p), codec_, m);
        std::size_t at = kChunkHeaderBytes;
        for (std::size_t u = first_[p]; u < first_[p + 1]; ++u) {
          const std::size_t bytes = codec_.encoded_bytes(units_[u].count);
          crc = codec_.encode_crc(values.subspan(units_[u].offset, units_[u].count),
                                  m.subspan(at, bytes), crc);
          at += bytes;
        }
        end_seal(m, crc);
      }
    }
    std::size_t waited = 0;
    for (std::size_t t = 0; t < transfers_; ++t) {
      // Transfer t forwards what t - P received (checked when waited for) and reuses the
      // exchange of t - 2.
      const std::size_t need = std::max(t >= pieces_ ? t - pieces_ + 1 : 0, t >= 2 ? t - 1 : 0);
      while (waited < need) wait(waited++, stats);
      post(t, stats);
    }
    while (waited < transfers_) wait(waited++, stats);
  }

  // Decodes every gathered encoding, in rank order, into `sum` (zeroed first), and this rank's
  // own into `own` when not empty. Throws ProtocolError / NonFiniteError naming the rank whose
  // encoding is invalid or makes the sum non-finite (its author: forwarders only check the
  // checksum).
  void decode(std::span<float> sum, std::span<float> own) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int src = 0; src < world_; ++src) {
      for (std::size_t p = 0; p < pieces_; ++p) {
        const Range r = piece_range(p);
        const auto payload = std::span<const std::byte>(message(src, p)).subspan(kChunkHeaderBytes);
        try {
          std::size_t at = 0;
          for (std::size_t u = first_[p]; u < first_[p + 1]; ++u) {
            const Range v = units_[u];
            const auto encoding = payload.subspan(at, codec_.encoded_bytes(v.count));
            codec_.decode_add(encoding, sum.subspan(v.offset, v.count));
            if (src == rank_ && !own.empty())
              codec_.decode(encoding, own.subspan(v.offset, v.count));
            at += encoding.size();
          }
        } catch (const ProtocolError& e) {
          throw ProtocolError(std::string(e.what()) + " (the encoding of rank " +
                                  std::to_string(src) + ")",
                              src);
        }
        const std::uint64_t bad = count_non_finite(sum.subspan(r.offset, r.count));
        if (bad > 0)
          throw NonFiniteError("ring all-gather: adding the encoding of rank " +
                                   std::to_string(src) + " made " + std::to_string(bad) +
                                   " values non-finite (NaN or Inf)",
                               src);
      }
    }
  }

  // The pass as one phantom round (Transport::run_phantom_rings), with one piece only.
  std::optional<PhantomRing> phantom_round() const {
    if (pieces_ != 1 || transfers_ == 0) return std::nullopt;
    PhantomRing round;
    round.outer_step = options_.outer_step;
    round.tag = tag(0, 0);
    round.transfers = transfers_;
    round.timeout_s = options_.timeout_s;
    round.first_send_bytes = message_bytes(0);
    round.send_bytes = round.recv_bytes = transfers_ * message_bytes(0);
    return round;
  }

  ~GatherPass() {
    for (auto& p : pending_) p.reset();
  }

 private:
  // Cuts [offset, offset + n) into pieces of whole codec blocks (topk's selection chunks), as
  // many as encode into max_chunk_bytes and at least one, so that the cut changes no selection.
  void cut_segment(std::size_t offset, std::size_t n) {
    if (n == 0) return;
    const std::size_t block = std::max<std::size_t>(1, codec_.block_values());
    const std::size_t blocks = (n + block - 1) / block;
    std::size_t lo = 1, hi = blocks;  // blocks per piece: the most that fit, at least 1
    if (codec_.encoded_bytes(std::min(n, hi * block)) <= options_.max_chunk_bytes) lo = hi;
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (codec_.encoded_bytes(mid * block) <= options_.max_chunk_bytes ? lo : hi) = mid;
    }
    for (std::size_t at = 0; at < n; at += lo * block)
      units_.push_back({offset + at, std::min(lo * block, n - at)});
  }
  // Groups the units into pieces, greedily in order: a piece takes the next unit while their
  // encodings fit max_chunk_bytes together (a unit that fills a piece alone stays alone).
  void pack_units() {
    first_.assign(1, 0);
    payload_.clear();
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const std::size_t b = codec_.encoded_bytes(units_[u].count);
      if (payload_.empty() || payload_.back() + b > options_.max_chunk_bytes) {
        if (!payload_.empty()) first_.push_back(u);
        payload_.push_back(0);
      }
      payload_.back() += b;
    }
    if (!units_.empty()) first_.push_back(units_.size());
    pieces_ = payload_.size();
  }
  // The values of piece p: its units lie back to back.
  Range piece_range(std::size_t p) const {
    const Range& last = units_[first_[p + 1] - 1];
    return {units_[first_[p]].offset, last.offset + last.count - units_[first_[p]].offset};
  }
  std::size_t message_bytes(std::size_t p) const { return kChunkHeaderBytes + payload_[p]; }
  std::vector<std::byte>& message(int src, std::size_t p) { return (*messages_)[src * pieces_ + p]; }
  // Chunk ids as the ring's all-gather numbers them, with the author's rank as the share.
  ChunkId chunk_id(int src, std::size_t p) const {
    ChunkId id;
    id.epoch = transport_.epoch();
    id.outer_step = options_.outer_step;
    id.bucket = options_.bucket;
    id.chunk = static_cast<std::uint32_t>((kAllGather * world_ + src) * pieces_ + p);
    id.codec = codec_.id();
    id.count = piece_range(p).count;
    id.payload_bytes = payload_[p];
    return id;
  }
  Tag tag(int step, std::size_t p) const {
    return ring_tag(options_.bucket, kCodecPass, kAllGather, step, p, kHeader);
  }
  int sent_by(std::size_t t) const { return mod(rank_ - static_cast<int>(t / pieces_), world_); }
  int received_from(std::size_t t) const { return mod(sent_by(t) - 1, world_); }

  void post(std::size_t t, RingStats& stats) {
    const std::size_t p = t % pieces_;
    const std::size_t bytes = message_bytes(p);
    Payload out = Payload::phantom(bytes);
    std::span<std::byte> into;
    if (!phantom_) {
      out = Payload::of(std::span<const std::byte>(message(sent_by(t), p)));
      into = message(received_from(t), p);
    }
    stats.bytes_sent += out.wire_bytes;
    pending_[t % 2] = transport_.start_exchange(mod(rank_ + 1, world_), out,
                                                mod(rank_ - 1, world_), into,
                                                tag(static_cast<int>(t / pieces_), p));
  }

  void wait(std::size_t t, RingStats& stats) {
    const Received got = pending_[t % 2]->wait(options_.timeout_s);
    pending_[t % 2].reset();
    stats.bytes_received += got.wire_bytes;
    const std::size_t p = t % pieces_;
    const int predecessor = mod(rank_ - 1, world_);
    if (phantom_) {
      if (got.wire_bytes != message_bytes(p) || got.bytes != 0)
        throw ProtocolError("ring all-gather: phantom message of " +
                                std::to_string(got.wire_bytes) + " wire bytes from rank " +
                                std::to_string(predecessor) + ", expected " +
                                std::to_string(message_bytes(p)),
                            predecessor);
      return;
    }
    try {
      open_chunk(std::span<const std::byte>(message(received_from(t), p)).first(got.bytes),
                 chunk_id(received_from(t), p), codec_);
    } catch (const ProtocolError& e) {
      throw ProtocolError(e.what(), predecessor);  // a bad message is the sender's doing
    }
  }

  Transport& transport_;
  Runtime& runtime_;
  const Codec& codec_;
  const RingOptions& options_;
  const std::size_t count_;
  const int world_;
  const int rank_;
  std::vector<Range> units_;          // runs of whole blocks, each encoded on its own
  std::vector<std::size_t> first_;    // piece p holds units [first_[p], first_[p + 1])
  std::vector<std::size_t> payload_;  // piece p's payload: its units' encodings
  std::size_t pieces_ = 0;
  std::size_t transfers_ = 0;
  bool phantom_ = false;
  std::vector<std::vector<std::byte>>* messages_ = nullptr;
  std::unique_ptr<PendingExchange> pending_[2];  // declared last: destroyed before the buffers
};

double relative_error(std::span<const float> result, std::span<const float> exact) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double d = static_cast<double>(result[i]) - exact[i];
    diff += d * d;
    norm += static_cast<double>(exact[i]) * exact[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

void check_options(const Transport& transport, const RingOptions& options) {
  if (options.max_chunk_bytes == 0)
    throw ConfigError("ring all-reduce: max_chunk_bytes must be positive");
  if (!(options.timeout_s > 0))
    throw ConfigError("ring all-reduce: timeout_s must be positive, got " +
                      std::to_string(options.timeout_s));
  if (options.bucket > kMaxBucket)
    throw ConfigError("ring all-reduce: bucket " + std::to_string(options.bucket) +
                      " exceeds the tag space (at most " + std::to_string(kMaxBucket) + ")");
  if (transport.size() > kMaxWorld)
    throw ConfigError("ring all-reduce: world " + std::to_string(transport.size()) +
                      " exceeds the tag space (at most " + std::to_string(kMaxWorld) + ")");
}

}  // namespace

std::optional<std::vector<PhantomRoundStats>> phantom_ring_rounds(
    Transport& transport, Runtime& runtime, const Codec& codec,
    std::span<const std::size_t> counts, std::span<const RingOptions> options) {
  MERIDIAN_CHECK_EQ(counts.size(), options.size());
  std::vector<PhantomRing> rounds;  // the leading rounds with one piece per share
  for (std::size_t i = 0; i < counts.size(); ++i) {
    check_options(transport, options[i]);
    std::optional<PhantomRing> round =
        codec.sparse()
            ? GatherPass(transport, runtime, codec, options[i], counts[i]).phantom_round()
            : RingPass(transport, runtime, codec, options[i], counts[i], kCodecPass)
                  .phantom_round();
    if (!round) break;
    rounds.push_back(*round);
  }
  if (rounds.empty()) return std::vector<PhantomRoundStats>();
  std::vector<PhantomRingTimes> times(rounds.size());
  try {
    if (!transport.run_phantom_rings(rounds, times)) return std::nullopt;
  } catch (...) {
    transport.abort();
    throw;
  }
  std::vector<PhantomRoundStats> out(rounds.size());
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    out[i].start_s = times[i].start_s;
    out[i].stats.participants = transport.size();
    out[i].stats.bytes_sent = rounds[i].send_bytes;
    out[i].stats.bytes_received = rounds[i].recv_bytes;
    out[i].stats.elapsed_s = times[i].end_s - times[i].start_s;
  }
  return out;
}

RingStats ring_all_reduce(Transport& transport, Runtime& runtime, const Codec& codec,
                          ReduceBuffer buf, const RingOptions& options, RingWorkspace* workspace) {
  const double start_s = runtime.now_s();
  RingStats stats;
  stats.participants = transport.size();
  RingWorkspace local;
  RingWorkspace& ws = workspace != nullptr ? *workspace : local;
  std::optional<RingPass> pass;  // the codec pass, which restores `buf` if the round fails
  try {
    const bool phantom = buf.data.empty();
    if (!phantom && buf.count != buf.data.size())
      throw ConfigError("ring all-reduce: buffer count " + std::to_string(buf.count) +
                        " does not match its data size " + std::to_string(buf.data.size()));
    check_options(transport, options);
    if (codec.sparse())
      throw ConfigError("ring all-reduce: codec " + std::string(codec.name()) +
                        " is sparse (a sum of its encodings is not one): all-gather it "
                        "(ring_all_gather_sum)");

    // Work in place on `buf`; each piece is copied to ws.work just before it first changes
    // (inside the pass that changes it), so `buf` can be restored if the round fails. The
    // error measurement needs that copy of the input too.
    const bool keep_input = options.restore_on_failure || options.measure_error;
    const std::size_t backup_size = keep_input ? buf.data.size() : 0;
    if (ws.work.size() < backup_size) ws.work.resize(backup_size);
    const std::span<float> backup = std::span(ws.work).first(backup_size);
    pass.emplace(transport, runtime, codec, options, buf.count, kCodecPass);
    pass->run(buf.data, backup, ws.slots, stats);
    stats.elapsed_s = runtime.now_s() - start_s;

    if (options.measure_error && !phantom) {
      if (codec.lossless()) {
        stats.relative_error = 0.0;
      } else {
        static const Fp32Codec exact_codec;
        // The input: the pass backed up all of it, unless it sent nothing (one rank).
        std::vector<float> exact = pass->transfers() > 0
                                       ? std::vector<float>(backup.begin(), backup.end())
                                       : std::vector<float>(buf.data.begin(), buf.data.end());
        std::vector<float> unused(exact.size());
        RingStats ignored;  // the measuring pass's bytes are not the all-reduce's
        RingPass(transport, runtime, exact_codec, options, buf.count, kExactPass)
            .run(exact, unused, ws.slots, ignored);
        stats.relative_error = relative_error(buf.data, exact);
      }
    }
  } catch (...) {
    transport.abort();
    if (pass) pass->restore();
    throw;
  }
  return stats;
}

RingStats ring_all_gather_sum(Transport& transport, Runtime& runtime, const Codec& codec,
                              ReduceBuffer buf, std::span<float> own, const RingOptions& options,
                              RingWorkspace* workspace, std::span<const std::size_t> segments) {
  const double start_s = runtime.now_s();
  RingStats stats;
  stats.participants = transport.size();
  RingWorkspace local;
  RingWorkspace& ws = workspace != nullptr ? *workspace : local;
  try {
    const bool phantom = buf.data.empty();
    if (!phantom && buf.count != buf.data.size())
      throw ConfigError("ring all-gather: buffer count " + std::to_string(buf.count) +
                        " does not match its data size " + std::to_string(buf.data.size()));
    if (!own.empty() && own.size() != buf.data.size())
      throw ConfigError("ring all-gather: own contribution of " + std::to_string(own.size()) +
                        " values for a buffer of " + std::to_string(buf.data.size()));
    check_options(transport, options);
    GatherPass pass(transport, runtime, codec, options, buf.count, segments);
    pass.run(buf.data, ws.slots, stats);
    if (!phantom && buf.count > 0) {
      // Sum into the workspace and copy back only when every encoding decoded: a failure leaves
      // `buf` and `own` as they were.
      if (ws.work.size() < 2 * buf.count) ws.work.resize(2 * buf.count);
      const std::span<float> sum = std::span(ws.work).first(buf.count);
      const std::span<float> mine =
          own.empty() ? std::span<float>() : std::span(ws.work).subspan(buf.count, buf.count);
      pass.decode(sum, mine);
      std::copy(sum.begin(), sum.end(), buf.data.begin());
      std::copy(mine.begin(), mine.end(), own.begin());
    }
    stats.elapsed_s = runtime.now_s() - start_s;
  } catch (...) {
    transport.abort();
    throw;
  }
  return stats;
}

bool ring_tag_is_all_gather(Tag tag) { return ((tag >> 31) & 1) == kAllGather; }

std::string_view sparse_collective_name(SparseCollective c) {
  switch (c) {
    case SparseCollective::kAuto:
      return "auto";
    case SparseCollective::kGather:
      return "gather";
    case SparseCollective::kRing:
      return "ring";
  }
  return "?";
}

SparseCollective parse_sparse_collective(std::string_view name) {
  for (SparseCollective c : kAllSparseCollectives)
    if (name == sparse_collective_name(c)) return c;
  throw ConfigError("diloco.sparse_collective: '" + std::string(name) +
                    "' is not one of auto, gather, ring");
}

SparseCollective resolve_sparse_collective(SparseCollective choice, const Codec& sparse,
                                           const Codec& dense, std::span<const std::size_t> counts,
                                           int world) {
  if (choice != SparseCollective::kAuto) return choice;
  const auto hops = static_cast<std::uint64_t>(std::max(world, 1) - 1);
  const auto n = static_cast<std::uint64_t>(std::max(world, 1));
  std::uint64_t gather = 0, ring = 0;
  for (const std::size_t count : counts) {
    gather += hops * chunk_message_bytes(sparse, count);
    ring += 2 * hops * chunk_message_bytes(dense, (count + n - 1) / n);
  }
  return ring < gather ? SparseCollective::kRing : SparseCollective::kGather;
}

}  // namespace meridian
