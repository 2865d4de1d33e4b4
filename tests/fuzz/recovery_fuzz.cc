// Fuzz target: live recovery's messages (engine/core/recovery/live_recovery.h) on both sides. The
// peer is scripted: its messages come from the input, in order, and when they run out it is
// gone (PeerLostError), as a dead source or joiner would be.
//  - joiner side (fetch_recovery from one or two sources): the layout reply (shared and private
//    sizes), then chunk replies; it returns a state of exactly the expected shared size and at
//    most the private bound, or throws PeerLostError / ProtocolError / TimeoutError;
//  - source side (serve_recovery of a small state): requests (op, chunk index, chunk size); it
//    serves or throws, never reads or allocates outside its state.
// Input: byte 0 = flags (bit 0 source side, bit 1 two sources, bit 2 phantom state, bit 3 the
// script seals each layout and chunk reply with a valid CRC-32C, so the checks behind the
// checksum are reached), byte 1 = chunk size - 1 (1..64 bytes), byte 2 = shared bytes, byte 3 =
// the private bound (joiner) or private bytes (source); then messages, each u8 peer index,
// u16 length, bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"
#include "engine/core/recovery/live_recovery.h"
#include "engine/core/util/crc32c.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace meridian;

// One side of a two-member recovery transport whose peer's messages are scripted.
class ScriptedTransport final : public Transport {
 public:
  ScriptedTransport(const EpochSpec& spec, std::deque<std::string> inbox)
      : spec_(spec), inbox_(std::move(inbox)) {}
  int rank() const override { return spec_.rank; }
  int size() const override { return 2; }
  std::uint64_t epoch() const override { return spec_.epoch; }
  void send(int to, Tag, Payload msg, double) override {
    MERIDIAN_CHECK_EQ(to, 1 - spec_.rank);
    // Content never exceeds what the message costs; a phantom source (timing-only state) sends
    // the chunk header alone with the chunk's wire size.
    MERIDIAN_CHECK(msg.bytes.size() <= msg.wire_bytes);
  }
  Received recv(int from, Tag, std::span<std::byte> into, double) override {
    MERIDIAN_CHECK_EQ(from, 1 - spec_.rank);
    if (inbox_.empty()) throw PeerLostError(from, "scripted peer: no more messages");
    const std::string m = std::move(inbox_.front());
    inbox_.pop_front();
    if (m.size() > into.size()) throw ProtocolError("scripted peer: message larger than buffer");
    std::memcpy(into.data(), m.data(), m.size());
    return {m.size(), m.size()};
  }
  std::unique_ptr<PendingExchange> start_exchange(int, Payload, int, std::span<std::byte>,
                                                  Tag) override {
    throw CheckError("recovery does not use exchanges");
  }
  void abort() override {}

 private:
  EpochSpec spec_;
  std::deque<std::string> inbox_;
};

// Hands each connecting side the script of its peer (the member that is not this rank).
class ScriptedFactory final : public TransportFactory {
 public:
  std::map<std::int64_t, std::deque<std::string>> scripts;
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::int64_t peer = spec.members[1 - spec.rank];
    return std::make_unique<ScriptedTransport>(spec, std::move(scripts[peer]));
  }

 private:
  std::mutex mu_;
};

template <typename T>
T get(const std::string& m, std::size_t off) {
  T v;
  std::memcpy(&v, m.data() + off, sizeof v);
  return v;
}

// Writes the CRC-32C a well-behaved source would: layout over bytes [8, 32), chunk over the
// payload after its 24-byte header.
void seal(std::string& m) {
  const auto crc_of = [&](std::size_t from) {
    return crc32c(std::span<const std::byte>(reinterpret_cast<const std::byte*>(m.data()) + from,
                                             m.size() - from));
  };
  std::uint32_t crc;
  if (m.size() == 32 && get<std::uint32_t>(m, 0) == 0x594C524Du)
    crc = crc_of(8);
  else if (m.size() >= 24 && get<std::uint32_t>(m, 0) == 0x4B43524Du)
    crc = crc_of(24);
  else
    return;
  std::memcpy(m.data() + 4, &crc, 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t flags = in.u8();
  const bool source_side = flags & 1, two_sources = flags & 2, phantom = flags & 4,
             sealed = flags & 8;
  RecoveryOptions o;
  o.chunk_bytes = 1 + in.u8() % 64;
  o.timeout_s = 2;
  const std::uint64_t shared = in.u8(), priv = in.u8();

  RoundRecord r;
  r.round = 5;
  r.members = {1, 2, 9};
  r.sources = two_sources ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{1};
  r.joiners = {9};
  ScriptedFactory factory;
  while (!in.empty()) {
    const std::int64_t peer = source_side ? 9 : r.sources[in.u8() % r.sources.size()];
    std::string m = in.bytes(in.u16() % 1024);
    if (sealed) seal(m);
    factory.scripts[peer].push_back(std::move(m));
  }

  try {
    if (source_side) {
      auto state = std::make_shared<RecoveryState>();
      state->phantom = phantom;
      state->shared_bytes = shared;
      state->private_bytes = priv;
      if (!phantom) {
        state->shared.assign(shared, std::byte{0x5a});
        state->priv.assign(priv, std::byte{0xa5});
      }
      (void)serve_recovery(factory, recovery_spec(r, 9, 1, true, o), state, o);
    } else {
      ThreadRuntime runtime;
      const FetchResult got =
          fetch_recovery(factory, runtime, r, 9, r.sources, shared, priv, phantom, o);
      MERIDIAN_CHECK_EQ(got.state.shared_bytes, shared);
      MERIDIAN_CHECK(got.state.private_bytes <= priv);
      if (!phantom) {
        MERIDIAN_CHECK_EQ(got.state.shared.size(), shared);
        MERIDIAN_CHECK_EQ(got.state.priv.size(), got.state.private_bytes);
      }
    }
  } catch (const CheckError&) {
    throw;
  } catch (const PeerLostError&) {
  } catch (const ProtocolError&) {
  } catch (const TimeoutError&) {
  }
  return 0;
}
