// FaultyTransport: wraps any Transport and injects faults into this rank's outgoing messages —
// the rank dies at its k-th message, messages are delayed, a byte is flipped, a message is cut
// short. Faults come from outside the engine through this wrapper (never `if (testing)` in the
// algorithms). Not a network model: the wrapped transport still decides delivery and timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/runtime.h"
#include "engine/core/transport.h"

namespace meridian {

// Message numbers count this rank's outgoing messages (send() and the send half of
// start_exchange()) from 1 in call order; 0 disables a fault.
struct FaultOptions {
  // At this outgoing message the rank dies instead of sending: the call throws PeerLostError
  // (naming this rank), the wrapped transport is aborted so peers see PeerLostError, and every
  // later call throws PeerLostError. Default: never.
  std::uint64_t die_at_message = 0;
  // Every outgoing message numbered >= delay_from_message waits delay_s on the Runtime's clock
  // before it is sent. Defaults: no delay; delay_from_message 1 (all messages).
  double delay_s = 0.0;
  std::uint64_t delay_from_message = 1;
  // At this outgoing message the byte at flip_byte_offset (modulo the message size) is XORed
  // with 0xFF. Messages without content (phantom payloads) are sent unchanged. Default: never.
  std::uint64_t flip_byte_at_message = 0;
  std::size_t flip_byte_offset = 0;
  // At this outgoing message only the first truncate_to_bytes bytes are sent (wire size
  // shrinks accordingly). Default: never; 0 bytes kept.
  std::uint64_t truncate_at_message = 0;
  std::size_t truncate_to_bytes = 0;
  // From this outgoing message on, every whole fp32 chunk (engine/core/wire/chunk.h: header and
  // payload in one message) carries NaN as its first value and is sealed again with a valid
  // checksum: what a node that skips the non-finite guard sends. Other messages (split chunks,
  // other codecs, recovery) are sent unchanged. Default: never.
  std::uint64_t nan_from_message = 0;
};

class FaultyTransport final : public ForwardingTransport {
 public:
  // `inner` and `runtime` must outlive this object.
  FaultyTransport(Transport& inner, Runtime& runtime, FaultOptions options);
  // Owning form, for factories.
  FaultyTransport(std::unique_ptr<Transport> inner, Runtime& runtime, FaultOptions options);
  ~FaultyTransport() override;

  void send(int to, Tag tag, Payload msg, double timeout_s) override;
  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override;
  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override;

  // Outgoing messages attempted so far (including the one the rank died at).
  std::uint64_t messages_sent() const;
  bool dead() const;

 private:
  // Applies the faults of the next outgoing message; returns the payload to send, which may
  // point into `scratch`.
  Payload prepare(Payload msg, std::vector<std::byte>& scratch);
  void throw_if_dead() const;

  Runtime& runtime_;
  FaultOptions options_;
  std::unique_ptr<Mutex> mu_;  // guards count_ and dead_ (sends may run on several threads)
  std::uint64_t count_ = 0;
  bool dead_ = false;
};

// Wraps another factory: each connect() returns the inner transport wrapped with the options
// `choose(spec)` returns for that member (default-constructed options inject nothing).
class FaultyTransportFactory final : public TransportFactory {
 public:
  using Chooser = std::function<FaultOptions(const EpochSpec&)>;
  // `inner` and `runtime` must outlive this object; `choose` may be called from several threads.
  FaultyTransportFactory(TransportFactory& inner, Runtime& runtime, Chooser choose);
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override;

 private:
  TransportFactory& inner_;
  Runtime& runtime_;
  Chooser choose_;
};

}  // namespace meridian
