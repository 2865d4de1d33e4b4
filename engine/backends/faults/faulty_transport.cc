// FaultyTransport: counts outgoing messages and applies the configured faults to them.
// Receives pass through untouched (a fault on the wire is injected at its sender).
#include "engine/backends/faults/faulty_transport.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "engine/core/wire/chunk.h"

namespace meridian {
namespace {

// A whole fp32 chunk in one message (engine/core/wire/chunk.h): magic, codec 0, payload_bytes equal
// to the rest of the message, at least one value.
bool is_whole_fp32_chunk(std::span<const std::byte> m) {
  if (m.size() < kChunkHeaderBytes + sizeof(float)) return false;
  std::uint32_t magic = 0;
  std::uint64_t payload_bytes = 0;
  std::memcpy(&magic, m.data(), sizeof(magic));  // little-endian hosts, as the wire
  std::memcpy(&payload_bytes, m.data() + 40, sizeof(payload_bytes));
  return magic == kWireMagic && m[6] == std::byte{0} &&
         payload_bytes == m.size() - kChunkHeaderBytes;
}

// Keeps the altered copy of the outgoing bytes alive until the exchange completes.
class FaultyExchange final : public PendingExchange {
 public:
  FaultyExchange(std::unique_ptr<PendingExchange> inner, std::vector<std::byte> scratch)
      : scratch_(std::move(scratch)), inner_(std::move(inner)) {}
  Received wait(double timeout_s) override { return inner_->wait(timeout_s); }

 private:
  std::vector<std::byte> scratch_;
  std::unique_ptr<PendingExchange> inner_;  // destroyed first: it may refer to scratch_
};

}  // namespace

FaultyTransport::FaultyTransport(Transport& inner, Runtime& runtime, FaultOptions options)
    : ForwardingTransport(inner),
      runtime_(runtime),
      options_(options),
      mu_(runtime.make_mutex()) {}

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner, Runtime& runtime,
                                 FaultOptions options)
    : ForwardingTransport(std::move(inner)),
      runtime_(runtime),
      options_(options),
      mu_(runtime.make_mutex()) {}

FaultyTransport::~FaultyTransport() = default;

std::uint64_t FaultyTransport::messages_sent() const {
  LockGuard lock(*mu_);
  return count_;
}

bool FaultyTransport::dead() const {
  LockGuard lock(*mu_);
  return dead_;
}

void FaultyTransport::throw_if_dead() const {
  if (dead())
    throw PeerLostError(inner().rank(),
                        "fault injection: rank " + std::to_string(inner().rank()) + " is dead");
}

Payload FaultyTransport::prepare(Payload msg, std::vector<std::byte>& scratch) {
  std::uint64_t number = 0;
  {
    LockGuard lock(*mu_);
    if (dead_)
      throw PeerLostError(inner().rank(),
                          "fault injection: rank " + std::to_string(inner().rank()) + " is dead");
    number = ++count_;
    if (number == options_.die_at_message) dead_ = true;
  }
  if (number == options_.die_at_message) {
    inner().abort();
    throw PeerLostError(inner().rank(), "fault injection: rank " + std::to_string(inner().rank()) +
                                           " died at its outgoing message " +
                                           std::to_string(number));
  }
  if (options_.delay_s > 0 && number >= options_.delay_from_message)
    runtime_.sleep_s(options_.delay_s);
  const bool flip = number == options_.flip_byte_at_message && !msg.bytes.empty();
  const bool truncate = number == options_.truncate_at_message;
  const bool poison = options_.nan_from_message > 0 && number >= options_.nan_from_message &&
                      is_whole_fp32_chunk(msg.bytes);
  if (!flip && !truncate && !poison) return msg;
  scratch.assign(msg.bytes.begin(), msg.bytes.end());
  if (poison) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scratch.data() + kChunkHeaderBytes, &nan, sizeof(nan));
    reseal_chunk(scratch);
  }
  if (flip) scratch[options_.flip_byte_offset % scratch.size()] ^= std::byte{0xFF};
  std::uint64_t wire = msg.wire_bytes;
  if (truncate && msg.bytes.empty()) {
    wire = std::min<std::uint64_t>(wire, options_.truncate_to_bytes);
  } else if (truncate) {
    const std::size_t keep = std::min(options_.truncate_to_bytes, scratch.size());
    wire -= std::min<std::uint64_t>(wire, scratch.size() - keep);
    scratch.resize(keep);
  }
  return Payload{std::span<const std::byte>(scratch), wire};
}

void FaultyTransport::send(int to, Tag tag, Payload msg, double timeout_s) {
  std::vector<std::byte> scratch;
  inner().send(to, tag, prepare(msg, scratch), timeout_s);
}

Received FaultyTransport::recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) {
  throw_if_dead();
  return inner().recv(from, tag, into, timeout_s);
}

std::unique_ptr<PendingExchange> FaultyTransport::start_exchange(int to, Payload out, int from,
                                                                 std::span<std::byte> into,
                                                                 Tag tag) {
  std::vector<std::byte> scratch;
  const Payload sent = prepare(out, scratch);
  // Moving a vector keeps its heap buffer, so `sent` stays valid inside FaultyExchange.
  auto pending = inner().start_exchange(to, sent, from, into, tag);
  return std::make_unique<FaultyExchange>(std::move(pending), std::move(scratch));
}

FaultyTransportFactory::FaultyTransportFactory(TransportFactory& inner, Runtime& runtime,
                                               Chooser choose)
    : inner_(inner), runtime_(runtime), choose_(std::move(choose)) {}

std::unique_ptr<Transport> FaultyTransportFactory::connect(const EpochSpec& spec) {
  FaultOptions options = choose_ ? choose_(spec) : FaultOptions{};
  return std::make_unique<FaultyTransport>(inner_.connect(spec), runtime_, options);
}

}  // namespace meridian
