// Transport: tagged point-to-point messaging among the ranks of one membership epoch.
// One object per epoch with a fixed rank and size; membership change = a new Transport.
// Not a collective library: algorithms (engine/core/collective) are written against this alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace meridian {

using Tag = std::uint64_t;

// Tags are namespaced by traffic kind in their top byte so that collectives, recovery and
// control traffic of one epoch never match each other's messages.
enum class TagKind : std::uint8_t { kCollective = 1, kRecovery = 2, kControl = 3, kTest = 4 };
constexpr Tag make_tag(TagKind kind, std::uint64_t value) {
  return (static_cast<Tag>(kind) << 56) | (value & ((Tag{1} << 56) - 1));
}

// Transport epoch ids: the one owner of their bit layout. A membership epoch e (< 2^40) runs
// its all-reduce as one ring per shard, epoch id e | shard << 40 (shard < 2^22); live
// recovery's pairwise epochs set bit 62: 1 << 62 | round << 24 | joiner index << 12 | source
// index (round < 2^38, indices < 2^12), so they never meet a ring's.
inline constexpr std::uint64_t kMaxRecoveryIndex = (std::uint64_t{1} << 12) - 1;
inline constexpr int kRingShardShift = 40;
constexpr std::uint64_t ring_epoch_id(std::uint64_t epoch, int shard) {
  return epoch | (static_cast<std::uint64_t>(shard) << kRingShardShift);
}
// The shard back from a ring's epoch id (a simulated transport keys each ring's TCP connections
// by it); for a recovery epoch, a number no ring uses.
constexpr int ring_shard_of(std::uint64_t ring_epoch) {
  return static_cast<int>(ring_epoch >> kRingShardShift);
}
constexpr std::uint64_t recovery_epoch_id(std::uint64_t round, std::uint64_t joiner_index,
                                          std::uint64_t source_index) {
  return (std::uint64_t{1} << 62) | (round << 24) | (joiner_index << 12) | source_index;
}
constexpr bool is_recovery_epoch(std::uint64_t id) { return (id >> 62) != 0; }
// Whether a transport that connects epoch id `current` proves that no node can still need the
// rendezvous of epoch id `old` (engine/core/mesh/PROTOCOL.md, "Store size"). A ring epoch e is
// connected only once a record in epoch e exists, i.e. once every round of every earlier epoch
// was resolved: each member of those reported (its connect had returned) or was dead. So a ring
// epoch supersedes every ring epoch of a smaller membership epoch, whatever the shard. A
// recovery of round r supersedes the recoveries of rounds r - 3 and older: their joiners
// reported those rounds long ago, and a source serves from the start of its round. Ring and
// recovery epochs never supersede each other (a ring does not know its round).
constexpr bool epoch_superseded(std::uint64_t old, std::uint64_t current) {
  if (is_recovery_epoch(old) != is_recovery_epoch(current)) return false;
  if (!is_recovery_epoch(current)) {
    constexpr std::uint64_t kEpochMask = (std::uint64_t{1} << kRingShardShift) - 1;
    return (old & kEpochMask) < (current & kEpochMask);
  }
  constexpr std::uint64_t kRoundMask = (std::uint64_t{1} << 38) - 1;
  return ((old >> 24) & kRoundMask) + 3 <= ((current >> 24) & kRoundMask);
}

// An outgoing message. `bytes` is the real content (may be empty in simulation of a model too
// large to hold); `wire_bytes` is what the message costs on the network. Real transports send
// `bytes` and ignore `wire_bytes`; the simulator charges `wire_bytes` and carries `bytes` along.
struct Payload {
  std::span<const std::byte> bytes;
  std::uint64_t wire_bytes = 0;

  static Payload of(std::span<const std::byte> b) { return {b, b.size()}; }
  // A message with no content that costs `wire` bytes (timing-only simulation).
  static Payload phantom(std::uint64_t wire) { return {{}, wire}; }
};

// What arrived: `bytes` of content were written to the receive buffer; `wire_bytes` is the
// message's network size (equal to `bytes` on real transports).
struct Received {
  std::size_t bytes = 0;
  std::uint64_t wire_bytes = 0;
};

// A send to one peer and a receive from another, started together (NCCL needs them grouped;
// others overlap them). Buffers passed to start_exchange must outlive wait().
class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  // Completes both halves. Throws PeerLostError / TimeoutError / ProtocolError like recv().
  virtual Received wait(double timeout_s) = 0;
};

// A phantom ring round as this rank runs it (Transport::run_phantom_rings): `transfers`
// exchanges, each sending to rank + 1 while receiving from rank - 1, one at a time (transfer t
// starts once t - 1 has completed both ways).
struct PhantomRing {
  // The round, the same on every rank: the outer step and the ring's tag of its first transfer.
  std::uint64_t outer_step = 0;
  Tag tag = 0;
  std::uint64_t transfers = 0;
  std::uint64_t send_bytes = 0;        // wire bytes this rank sends, over all its transfers
  std::uint64_t recv_bytes = 0;        // wire bytes it expects from its predecessor
  std::uint64_t first_send_bytes = 0;  // of its first message
  double timeout_s = 30.0;             // bound on each transfer's wait, as message by message
};

// When a phantom round began and ended on this rank (Runtime clock).
struct PhantomRingTimes {
  double start_s = 0;
  double end_s = 0;
};

// Error contract, for every implementation and every call:
//  - a dead, closed or aborted peer -> PeerLostError (promptly when the transport can tell);
//  - nothing within timeout_s -> TimeoutError; no call blocks longer than its timeout;
//  - an incoming message larger than the receive buffer -> ProtocolError, or for an exchange
//    over Gloo TimeoutError (see start_exchange); a peer lying about sizes never causes an
//    allocation sized by the peer or a write past the buffer.
// Thread-safety: calls for different (peer, tag) pairs may run concurrently; one (peer, tag)
// stream is used by one caller at a time. Messages between one pair with one tag arrive in order.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The membership epoch this transport belongs to.
  virtual std::uint64_t epoch() const = 0;

  virtual void send(int to, Tag tag, Payload msg, double timeout_s) = 0;
  virtual Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) = 0;

  // Sends `out` to `to` and receives a message with the same tag from `from` into `into`.
  // The message should have exactly into.size() bytes (the ring's always do): in-process,
  // SimGrid and NCCL accept a shorter one and raise ProtocolError for a longer one, but Gloo
  // matches an exchange's messages by tag and size, so one of another size is never delivered
  // and both sides fail with TimeoutError at their deadline (never a write past `into`).
  virtual std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                          std::span<std::byte> into, Tag tag) = 0;

  // This rank gives up on the epoch (after an error): pending and future operations of its
  // peers that involve this rank fail with PeerLostError instead of waiting for their timeout.
  // Idempotent. The object stays valid until destroyed.
  virtual void abort() = 0;

  // Rounds of a ring all-reduce over phantom buffers (no content: a timing-only simulation),
  // run back to back (round i + 1 starts on a rank when its round i ends), for a transport that
  // can time them without a message per transfer. Returns false when it cannot (the default: the
  // ring then runs message by message); true once the last round is over on this rank, at the
  // time the message-level rounds would end, with each round's times in `times` (same size as
  // `rounds`). Errors as for start_exchange / wait. Decorators (ForwardingTransport) do not
  // forward it: one that watches messages gets every message.
  virtual bool run_phantom_rings(std::span<const PhantomRing> rounds,
                                 std::span<PhantomRingTimes> times);
};

inline bool Transport::run_phantom_rings(std::span<const PhantomRing>,
                                         std::span<PhantomRingTimes>) {
  return false;
}

// Passes every call to another Transport. Decorators (fault injection, counting, tests) derive
// from it and override only what they change. Owns the inner transport when given it by
// unique_ptr; otherwise the inner transport must outlive this one.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<Transport> inner)
      : owned_(std::move(inner)), inner_(*owned_) {}
  explicit ForwardingTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::uint64_t epoch() const override { return inner_.epoch(); }
  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    inner_.send(to, tag, msg, timeout_s);
  }
  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override {
    return inner_.recv(from, tag, into, timeout_s);
  }
  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    return inner_.start_exchange(to, out, from, into, tag);
  }
  void abort() override { inner_.abort(); }

 protected:
  Transport& inner() const { return inner_; }

 private:
  std::unique_ptr<Transport> owned_;
  Transport& inner_;
};

// The most TCP connections per ring neighbour a transport opens (`transport.connections_per_peer`,
// engine/backends/gloo/README.md "Connections per peer"): the run file's bound and the Gloo
// transport's.
inline constexpr int kMaxConnectionsPerPeer = 64;

// What a node needs to join the Transport of one epoch.
struct EpochSpec {
  std::uint64_t epoch = 0;
  int rank = 0;                       // this node's rank = its index in `members`
  std::vector<std::int64_t> members;  // unique node ids in ring order
  double timeout_s = 30.0;            // bound on waiting for every member to arrive
  // Bound on the connections themselves once every member has arrived (a few round trips each):
  // a stranger or a stuck peer costs the epoch at most this. <= 0: `timeout_s`.
  double connect_timeout_s = 0.0;
  // Asked between slices of the wait for the other members (at least every `poll_s`): a
  // non-empty answer (the reason) abandons the connect with PeerLostError. The mesh answers
  // when a member is dead by its lease, has left, has reported the round without connecting,
  // or the round was decided without this node: waiting longer could not succeed. Empty
  // function: wait for `timeout_s`.
  std::function<std::string()> abandon;
  double poll_s = 0.5;
};

// Builds the Transport of an epoch (in-process hub, SimGrid mailboxes, Gloo context, NCCL
// communicator). Every member calls connect() with the same epoch and members.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual std::unique_ptr<Transport> connect(const EpochSpec& spec) = 0;
};

}  // namespace meridian
