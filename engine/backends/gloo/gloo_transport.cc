// GlooTransport. Gloo aborts the process when a message exceeds the posted receive, so it must
// never see one. An exchange (the ring's traffic) is one Gloo message each way on a slot mixed
// from (tag, size): sizes that disagree never match, and both sides time out. send/recv (whose
// receive buffer may be larger than the message) are a credit (the receiver's buffer size, sent
// when it posts), then a 16-byte header (magic, payload bytes) and the payload on the tag's
// slot; the sender sends the payload only when it fits the credit, and an oversize message is a
// ProtocolError on both sides. Gloo errors become Meridian errors here, and any failed
// operation aborts the epoch (Gloo cannot cancel a posted receive, and the memory it targets
// belongs to the caller). With K connections per peer (GlooOptions::connections_per_peer) an
// exchange's message is striped over K Gloo contexts (one full mesh each); send/recv use the
// first.
#include "engine/backends/gloo/gloo_transport.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "engine/backends/common/deadline.h"
#include "engine/backends/gloo/gloo_store_adapter.h"
#include "engine/core/error.h"
#include "engine/core/util/epoch_keys.h"
#include "engine/core/util/hmac.h"
#include "engine/core/util/splitmix64.h"

namespace meridian::gloo_transport {
namespace {

using Clock = std::chrono::steady_clock;
using Buffer = ::gloo::transport::UnboundBuffer;

constexpr std::uint32_t kHeaderMagic = 0x4d474c4f;  // "MGLO"

// Credits travel on the tag's slot with the top bit set (tag kinds are small numbers in bits
// 56-63, so bit 63 is otherwise clear).
constexpr std::uint64_t credit_slot(Tag tag) { return tag | (std::uint64_t{1} << 63); }

struct Header {
  std::uint32_t magic = 0;
  std::uint32_t reserved = 0;
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == 16);

std::chrono::milliseconds left_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // 0 would mean "no time at all" to Gloo; a negative value would mean "the context default".
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

class GlooTransport;

// One half-duplex Gloo operation (a header or payload send or receive) whose buffer the
// transport tracks, so abort() can wake its waiter.
class TrackedBuffer {
 public:
  // A buffer of connection `connection`'s context (0 to K - 1).
  TrackedBuffer(GlooTransport& t, void* ptr, std::size_t bytes, int connection = 0);
  ~TrackedBuffer();
  Buffer& operator*() { return *buffer_; }
  Buffer* operator->() { return buffer_.get(); }

 private:
  GlooTransport& transport_;
  std::unique_ptr<Buffer> buffer_;
};

class GlooTransport final : public Transport {
 public:
  // `contexts`: one full mesh per connection to each peer (at least one).
  GlooTransport(std::vector<std::shared_ptr<::gloo::Context>> contexts, std::uint64_t epoch,
                int rank, int size, std::size_t min_stripe_bytes)
      : contexts_(std::move(contexts)),
        epoch_(epoch),
        rank_(rank),
        size_(size),
        min_stripe_bytes_(std::max<std::size_t>(1, min_stripe_bytes)) {}
  ~GlooTransport() override {
    // Close before the buffers' owners go away: nothing may be written into caller memory later.
    abort();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::uint64_t epoch() const override { return epoch_; }

  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    check_peer(to, "send to");
    const auto deadline = deadline_after(timeout_s);
    Outgoing out(*this, to, tag, msg);
    out.post(deadline);
    out.wait(deadline);
  }

  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override {
    check_peer(from, "receive from");
    const auto deadline = deadline_after(timeout_s);
    Incoming in(*this, from, tag, into);
    return in.wait(deadline);
  }

  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override;

  void abort() override {
    if (aborted_.exchange(true)) return;
    for (const auto& context : contexts_) {
      try {
        // Resets every connection: peers see their pending operations with us fail at once,
        // and Gloo stops reading into our buffers.
        context->closeConnections();
      } catch (const std::exception&) {
        // Already closed by Gloo after an error: nothing left to do.
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (Buffer* b : live_) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }

  // Registration of live buffers (TrackedBuffer).
  void track(Buffer* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(b);
  }
  void untrack(Buffer* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(b);
  }
  ::gloo::Context& context(int connection) { return *contexts_[connection]; }
  int connections() const { return static_cast<int>(contexts_.size()); }
  std::size_t min_stripe_bytes() const { return min_stripe_bytes_; }

  // Runs one Gloo call, translating its errors at this edge. Any failure aborts the epoch.
  template <typename F>
  auto guarded(int peer, const std::string& what, F&& f) -> decltype(f()) {
    if (aborted_.load()) {
      throw PeerLostError(peer, what + ": epoch " + std::to_string(epoch_) + " was aborted");
    }
    try {
      return f();
    } catch (const ::gloo::IoException& e) {
      abort();
      const std::string msg = e.what();
      if (msg.find("Timed out") != std::string::npos) {
        throw TimeoutError(what + " rank " + std::to_string(peer) + " (epoch " +
                           std::to_string(epoch_) + "): " + msg);
      }
      throw PeerLostError(peer, what + " rank " + std::to_string(peer) + " (epoch " +
                                    std::to_string(epoch_) + "): " + msg);
    } catch (const ::gloo::Exception& e) {
      abort();
      throw PeerLostError(peer, what + " rank " + std::to_string(peer) + ": gloo: " + e.what());
    } catch (const Error&) {
      abort();
      throw;
    }
  }

  // Waits for one operation; a false return from Gloo means abort() woke us.
  void wait_op(Buffer& b, bool is_send, int peer, Clock::time_point deadline, const Tag tag) {
    const std::string what =
        std::string(is_send ? "send " : "receive ") + tag_text(tag) + (is_send ? " to" : " from");
    const bool completed = guarded(peer, what, [&] {
      return is_send ? b.waitSend(left_ms(deadline)) : b.waitRecv(left_ms(deadline));
    });
    if (!completed) {
      throw PeerLostError(peer, what + " rank " + std::to_string(peer) + ": epoch " +
                                    std::to_string(epoch_) + " was aborted");
    }
  }

  // A message on its way out. Posted at construction: the receive of the receiver's credit
  // (its buffer size). post() waits for the credit, then sends the header and, when it fits,
  // the payload; wait() completes the sends.
  class Outgoing {
   public:
    Outgoing(GlooTransport& t, int to, Tag tag, Payload msg)
        : t_(t), to_(to), tag_(tag), msg_(msg.bytes), credit_buf_(t, &credit_, sizeof(credit_)) {
      t_.guarded(to_, "receive credit " + tag_text(tag_) + " from", [&] {
        credit_buf_->recv(to_, credit_slot(tag_));
        return 0;
      });
    }
    void post(Clock::time_point deadline) {
      t_.wait_op(*credit_buf_, false, to_, deadline, tag_);
      header_ = {kHeaderMagic, 0, msg_.size()};
      header_buf_.emplace(t_, &header_, sizeof(header_));
      t_.guarded(to_, "send " + tag_text(tag_) + " to", [&] {
        header_buf_.value()->send(to_, tag_);
        return 0;
      });
      if (msg_.size() > credit_) {
        // The header tells the receiver why; then the epoch ends on both sides.
        t_.wait_op(**header_buf_, true, to_, deadline, tag_);
        t_.abort();
        throw ProtocolError("message of " + std::to_string(msg_.size()) + " bytes for rank " +
                            std::to_string(to_) + " (" + tag_text(tag_) +
                            ") exceeds its receive buffer of " + std::to_string(credit_) +
                            " bytes");
      }
      payload_buf_.emplace(t_, msg_.empty() ? &dummy_ : const_cast<std::byte*>(msg_.data()),
                           msg_.size());
      t_.guarded(to_, "send " + tag_text(tag_) + " to", [&] {
        payload_buf_.value()->send(to_, tag_, 0, msg_.size());
        return 0;
      });
    }
    void wait(Clock::time_point deadline) {
      t_.wait_op(**header_buf_, true, to_, deadline, tag_);
      t_.wait_op(**payload_buf_, true, to_, deadline, tag_);
    }

   private:
    GlooTransport& t_;
    int to_;
    Tag tag_;
    std::span<const std::byte> msg_;
    std::uint64_t credit_ = 0;
    TrackedBuffer credit_buf_;
    Header header_;
    std::byte dummy_{};
    std::optional<TrackedBuffer> header_buf_, payload_buf_;
  };

  // A message on its way in. At construction: the credit (this buffer's size) goes to the
  // sender and both receives (header, then payload of at most that size) are posted, so data
  // flows as soon as the sender posts. The header's size is checked again on arrival.
  class Incoming {
   public:
    Incoming(GlooTransport& t, int from, Tag tag, std::span<std::byte> into)
        : t_(t),
          from_(from),
          tag_(tag),
          into_(into),
          credit_(into.size()),
          credit_buf_(t, &credit_, sizeof(credit_)),
          header_buf_(t, &header_, sizeof(header_)),
          payload_buf_(t, into.empty() ? &dummy_ : into.data(), into.size()) {
      t_.guarded(from_, "receive " + tag_text(tag_) + " from", [&] {
        credit_buf_->send(from_, credit_slot(tag_));
        header_buf_->recv(from_, tag_);
        payload_buf_->recv(from_, tag_, 0, into_.size());
        return 0;
      });
    }
    Received wait(Clock::time_point deadline) {
      t_.wait_op(*header_buf_, false, from_, deadline, tag_);
      const std::string where =
          "message from rank " + std::to_string(from_) + " (" + tag_text(tag_) + ")";
      if (header_.magic != kHeaderMagic) {
        t_.abort();
        throw ProtocolError(where + ": bad header magic", from_);
      }
      if (header_.payload_bytes > into_.size()) {
        t_.abort();
        throw ProtocolError(where + " has " + std::to_string(header_.payload_bytes) +
                                " bytes, more than the receive buffer's " +
                                std::to_string(into_.size()),
                            from_);
      }
      t_.wait_op(*payload_buf_, false, from_, deadline, tag_);
      t_.wait_op(*credit_buf_, true, from_, deadline, tag_);
      const std::size_t n = header_.payload_bytes;
      return {n, n};
    }

   private:
    GlooTransport& t_;
    int from_;
    Tag tag_;
    std::span<std::byte> into_;
    std::uint64_t credit_;
    Header header_;
    std::byte dummy_{};
    TrackedBuffer credit_buf_, header_buf_, payload_buf_;
  };

 private:
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      throw ConfigError(std::string("gloo transport: cannot ") + what + " rank " +
                        std::to_string(peer) + " (this is rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ")");
    }
  }

  std::vector<std::shared_ptr<::gloo::Context>> contexts_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  std::size_t min_stripe_bytes_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::set<Buffer*> live_;
};

TrackedBuffer::TrackedBuffer(GlooTransport& t, void* ptr, std::size_t bytes, int connection)
    : transport_(t) {
  buffer_ = t.guarded(-1, "create buffer",
                      [&] { return t.context(connection).createUnboundBuffer(ptr, bytes); });
  transport_.track(buffer_.get());
}

TrackedBuffer::~TrackedBuffer() { transport_.untrack(buffer_.get()); }

namespace {

// The Gloo slot of an exchange's message of `bytes` bytes on `tag`: a 64-bit mix of both, with
// bit 62 set and bit 63 clear, so it never equals a plain tag (bits 62-63 clear: tag kinds are
// small numbers in bits 56-63) or a credit slot (bit 63 set). Sender and receiver meet only when
// they agree on the size: a message of any other size is never matched, so Gloo (which aborts
// the process on a message larger than the posted receive) never sees one. Two different
// (tag, size) pairs share a slot with probability 2^-62.
std::uint64_t exchange_slot(Tag tag, std::size_t bytes) {
  std::uint64_t state = bytes;
  const std::uint64_t h = splitmix64_mix(tag ^ splitmix64(state));
  return (h & ~(std::uint64_t{3} << 62)) | (std::uint64_t{1} << 62);
}

// How an exchange's message of `bytes` bytes is cut over a peer's `connections` connections:
// `count` consecutive stripes of `size` bytes (the last one shorter), at most one per
// connection and each of at least `min_stripe` bytes (a message under 2 × min_stripe is one
// stripe). Stripe s travels on connection (first + s) mod connections, `first` drawn from the
// message's slot, so that one-stripe messages spread over the connections too. Sender and
// receiver compute the same cut from the same (tag, size).
struct Stripes {
  std::size_t bytes = 0;
  std::size_t count = 1;
  std::size_t size = 0;
  int first = 0;
  int connections = 1;

  Stripes(std::uint64_t slot, std::size_t message_bytes, int connections_per_peer,
          std::size_t min_stripe)
      : bytes(message_bytes),
        count(std::clamp<std::size_t>(message_bytes / min_stripe, 1,
                                      static_cast<std::size_t>(connections_per_peer))),
        size((message_bytes + count - 1) / count),
        first(static_cast<int>(slot % static_cast<std::uint64_t>(connections_per_peer))),
        connections(connections_per_peer) {}
  int connection(std::size_t s) const {
    return static_cast<int>((static_cast<std::size_t>(first) + s) %
                            static_cast<std::size_t>(connections));
  }
  std::size_t offset(std::size_t s) const { return s * size; }
  std::size_t length(std::size_t s) const { return std::min(size, bytes - offset(s)); }
};

// An exchange: one Gloo message each way per stripe (Stripes), no credit and no header. The
// receives are posted at once for exactly into.size() bytes in all and the sends for
// out.bytes.size(), each stripe on the slot of (tag, whole size) of its connection: Gloo's own
// receive-ready notice is the only control message, so data flows as soon as both sides have
// posted, with no user thread in between. Sizes that disagree never match (exchange_slot): both
// sides then fail with TimeoutError at their deadline. The sends and receives of one
// (peer, tag) are posted in exchange order by the calling thread, and Gloo matches them in that
// order on each connection; a stripe always takes the same connection for the same slot, so
// the order holds stripe by stripe. Destroying an exchange that was never waited for aborts the
// epoch: its operations are still posted, and Gloo must not touch their buffers afterwards.
class GlooExchange final : public PendingExchange {
 public:
  GlooExchange(GlooTransport& t, int to, Payload out, int from, std::span<std::byte> into, Tag tag)
      : transport_(t), to_(to), from_(from), tag_(tag), bytes_in_(into.size()) {
    post(from, into, false, dummy_in_, recv_);
    post(to, std::span(const_cast<std::byte*>(out.bytes.data()), out.bytes.size()), true,
         dummy_out_, send_);
  }
  ~GlooExchange() override {
    if (!done_) transport_.abort();
  }
  Received wait(double timeout_s) override {
    const auto deadline = deadline_after(timeout_s);
    try {
      for (const auto& r : recv_) transport_.wait_op(**r, false, from_, deadline, tag_);
      for (const auto& w : send_) transport_.wait_op(**w, true, to_, deadline, tag_);
    } catch (const TimeoutError& e) {
      throw TimeoutError(std::string(e.what()) +
                         " (an exchange's message must have exactly the receiver's " +
                         std::to_string(bytes_in_) + " bytes)");
    }
    done_ = true;
    return {bytes_in_, bytes_in_};
  }

 private:
  // Posts one direction's message, stripe by stripe (Stripes), on the slot of (tag, its size):
  // receives into `bytes` from `peer`, or sends `bytes` to it. An empty stripe points at `dummy`.
  void post(int peer, std::span<std::byte> bytes, bool is_send, std::byte& dummy,
            std::vector<std::unique_ptr<TrackedBuffer>>& buffers) {
    GlooTransport& t = transport_;
    const std::uint64_t slot = exchange_slot(tag_, bytes.size());
    const Stripes stripes(slot, bytes.size(), t.connections(), t.min_stripe_bytes());
    for (std::size_t s = 0; s < stripes.count; ++s) {
      const std::size_t len = stripes.length(s);
      buffers.push_back(std::make_unique<TrackedBuffer>(
          t, len == 0 ? &dummy : bytes.data() + stripes.offset(s), len, stripes.connection(s)));
      TrackedBuffer& b = *buffers.back();
      t.guarded(peer,
                (is_send ? "send " : "receive ") + tag_text(tag_) + (is_send ? " to" : " from"),
                [&] {
                  if (is_send)
                    b->send(peer, slot, 0, len);
                  else
                    b->recv(peer, slot, 0, len);
                  return 0;
                });
    }
  }

  GlooTransport& transport_;
  int to_;
  int from_;
  Tag tag_;
  std::size_t bytes_in_;
  bool done_ = false;
  std::byte dummy_in_{}, dummy_out_{};
  // Declared last: destroyed (untracked) before the rest.
  std::vector<std::unique_ptr<TrackedBuffer>> recv_, send_;
};

// The transport of an epoch with one member: no peers, so every operation is a usage error.
class SoloTransport final : public Transport {
 public:
  explicit SoloTransport(std::uint64_t epoch) : epoch_(epoch) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::uint64_t epoch() const override { return epoch_; }
  void send(int to, Tag, Payload, double) override { no_peer(to); }
  Received recv(int from, Tag, std::span<std::byte>, double) override { no_peer(from); }
  std::unique_ptr<PendingExchange> start_exchange(int to, Payload, int, std::span<std::byte>,
                                                  Tag) override {
    no_peer(to);
  }
  void abort() override {}

 private:
  [[noreturn]] static void no_peer(int peer) {
    throw ConfigError("gloo transport: rank " + std::to_string(peer) +
                      " does not exist in a world of size 1");
  }
  std::uint64_t epoch_;
};

}  // namespace

std::unique_ptr<PendingExchange> GlooTransport::start_exchange(int to, Payload out, int from,
                                                               std::span<std::byte> into, Tag tag) {
  check_peer(to, "send to");
  check_peer(from, "receive from");
  return std::make_unique<GlooExchange>(*this, to, out, from, into, tag);
}

namespace {

// Slot of the pair authentication: bits 63 and 62 both set, which neither an exchange slot
// (01), a credit (a tag with bit 63) nor a plain tag uses.
constexpr std::uint64_t kAuthSlot = (std::uint64_t{3} << 62) | 0x41555448;  // "AUTH"

// What rank `from` sends rank `to` to prove it holds the run's secret, bound to the epoch and
// its members (the prefix hashes them) so that nothing recorded elsewhere can be replayed.
Sha256Digest pair_proof(const std::string& secret, const std::string& prefix, int from, int to) {
  return hmac_sha256(secret, "meridian gloo pair v1|" + prefix + "|" + std::to_string(from) + ">" +
                                 std::to_string(to));
}

}  // namespace

void GlooTransportFactory::authenticate(::gloo::Context& context, const EpochSpec& spec,
                                        const std::string& prefix, double timeout_s) const {
  // Gloo's tcp pair accepts whichever connection reaches its listening port first, so a
  // stranger can take a peer's place; it is found here, before the epoch carries anything,
  // and the epoch fails (its members retry in a new one, on new ports).
  const int size = static_cast<int>(spec.members.size());
  const auto deadline = deadline_after(timeout_s);
  std::vector<Sha256Digest> mine(size), theirs(size);
  std::vector<std::unique_ptr<Buffer>> sends, recvs;
  for (int p = 0; p < size; ++p) {
    if (p == spec.rank) continue;
    mine[p] = pair_proof(options_.secret, prefix, spec.rank, p);
    recvs.push_back(context.createUnboundBuffer(theirs[p].data(), theirs[p].size()));
    recvs.back()->recv(p, kAuthSlot);
    sends.push_back(context.createUnboundBuffer(mine[p].data(), mine[p].size()));
    sends.back()->send(p, kAuthSlot);
  }
  const auto fail = [&](int p, const std::string& why) {
    context.closeConnections();
    throw PeerLostError(
        p, "gloo transport: epoch " + std::to_string(spec.epoch) + ": rank " + std::to_string(p) +
               " (node " + std::to_string(spec.members[static_cast<std::size_t>(p)]) + ") " + why);
  };
  for (int p = 0, i = 0; p < size; ++p) {
    if (p == spec.rank) continue;
    bool ok = false;
    try {
      ok = recvs[i]->waitRecv(left_ms(deadline)) && sends[i]->waitSend(left_ms(deadline));
    } catch (const ::gloo::Exception& e) {
      fail(p, std::string("did not prove the run's secret: ") + e.what());
    }
    if (!ok) fail(p, "did not prove the run's secret: aborted");
    if (!digests_equal(theirs[p], pair_proof(options_.secret, prefix, p, spec.rank)))
      fail(p, "sent a wrong proof of the run's secret (a stranger on its connection?)");
    ++i;
  }
}

GlooTransportFactory::GlooTransportFactory(Store& store, GlooOptions options)
    : store_(store), options_(std::move(options)) {
  if (options_.connections_per_peer < 1 || options_.connections_per_peer > kMaxConnectionsPerPeer) {
    throw ConfigError("gloo transport: connections_per_peer must be 1 to " +
                      std::to_string(kMaxConnectionsPerPeer) + ", got " +
                      std::to_string(options_.connections_per_peer));
  }
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  ::gloo::transport::tcp::attr attr;
  if (!options_.interface.empty()) {
    attr.iface = options_.interface;
  } else {
    attr.hostname = options_.hostname;
  }
  try {
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw ConfigError("gloo transport: cannot create a tcp device on " +
                      (options_.interface.empty() ? "host '" + options_.hostname + "'"
                                                  : "interface '" + options_.interface + "'") +
                      ": " + e.what());
  }
}

GlooTransportFactory::~GlooTransportFactory() { join_stragglers(true); }

void GlooTransportFactory::join_stragglers(bool all) {
  std::lock_guard<std::mutex> lock(stragglers_mu_);
  std::erase_if(stragglers_, [all](Straggler& s) {
    if (!all && !s.ended->load()) return false;
    s.thread.join();
    return true;
  });
}

std::shared_ptr<::gloo::Context> GlooTransportFactory::connect_mesh(const EpochSpec& spec,
                                                                    const std::string& prefix,
                                                                    double connect_s) {
  const int size = static_cast<int>(spec.members.size());
  StoreAdapter adapter(store_, prefix, connect_s, spec.abandon, spec.poll_s);
  auto context = std::make_shared<::gloo::rendezvous::Context>(spec.rank, size);
  // Gloo gives a pair's connection five times its context's timeout (and bounds nothing else
  // this transport does: every operation here passes its own).
  context->setTimeout(std::chrono::milliseconds(
      static_cast<std::int64_t>(std::clamp(connect_s / 5.0, 0.001, 1e7) * 1000.0)));
  try {
    context->connectFullMesh(adapter, device_);
    if (!options_.secret.empty()) authenticate(*context, spec, prefix, connect_s);
  } catch (const ::gloo::IoException& e) {
    const std::string msg = e.what();
    if (msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos) {
      throw TimeoutError("gloo transport: epoch " + std::to_string(spec.epoch) +
                         " connections not established: " + msg);
    }
    throw PeerLostError(
        -1, "gloo transport: epoch " + std::to_string(spec.epoch) + " connections failed: " + msg);
  } catch (const ::gloo::Exception& e) {
    throw PeerLostError(-1, "gloo transport: epoch " + std::to_string(spec.epoch) +
                                " connections failed: " + e.what());
  }
  return context;
}

std::unique_ptr<Transport> GlooTransportFactory::connect(const EpochSpec& spec) {
  const int size = static_cast<int>(spec.members.size());
  if (size < 1 || spec.rank < 0 || spec.rank >= size) {
    throw ConfigError("gloo transport: epoch " + std::to_string(spec.epoch) + " has rank " +
                      std::to_string(spec.rank) + " of " + std::to_string(size) + " members");
  }
  if (size == 1) return std::make_unique<SoloTransport>(spec.epoch);

  const std::string prefix = epoch_store_prefix(options_.store_prefix, spec);
  const double connect_s = spec.connect_timeout_s > 0 ? spec.connect_timeout_s : spec.timeout_s;
  // Every member arrives before any pair listens: Gloo connects pair by pair, so a member
  // waiting for a late one would keep its other pairs' ports open (to any stranger) and
  // unconnected until their short bound ran out. After the barrier the addresses and the
  // connections come within a few round trips.
  StoreAdapter(store_, prefix, spec.timeout_s, spec.abandon, spec.poll_s).barrier(spec.rank, size);
  // Connection k meets under a prefix of its own for k > 0 (and proves the secret bound to it).
  // The K meshes connect at once, each on a thread of its own: Gloo connects a mesh pair by pair
  // with a store read between pairs, so one after another they took K times as long (at 250 ms
  // RTT, 4 peers: 4.8 s for one, 16.1 s for four; results/bench/connections/README.md). This
  // thread meanwhile asks spec.abandon every poll_s: Gloo's own wait for a pair cannot be
  // interrupted, and a member that died after the barrier held every other member here for the
  // whole connect bound (twice the lease: the churn soak's 8 s stalls). Once waiting is futile
  // the epoch fails at once; the threads, which no longer ask the mesh anything, end within the
  // bound by themselves (the destructor joins them). A failure of any mesh is the epoch's,
  // after all have ended (each is bounded by connect_s).
  struct Job {
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    std::vector<std::shared_ptr<::gloo::Context>> contexts;
    std::vector<std::exception_ptr> errors;
    std::mutex abandon_mu;  // held while asking the mesh, so that none asks after a give-up
    bool given_up = false;
  };
  const int k_count = options_.connections_per_peer;
  auto job = std::make_shared<Job>();
  job->contexts.resize(static_cast<std::size_t>(k_count));
  job->errors.resize(static_cast<std::size_t>(k_count));
  EpochSpec mesh_spec = spec;
  mesh_spec.abandon = [job, abandon = spec.abandon]() -> std::string {
    std::lock_guard<std::mutex> lock(job->abandon_mu);
    if (job->given_up) return "the epoch's connect was given up";
    return abandon ? abandon() : std::string();
  };
  join_stragglers(false);
  std::vector<Straggler> threads;
  for (int k = 0; k < k_count; ++k) {
    auto ended = std::make_shared<std::atomic<bool>>(false);
    threads.push_back({std::thread([this, job, ended, mesh_spec, k, prefix, connect_s] {
                         std::shared_ptr<::gloo::Context> context;
                         std::exception_ptr error;
                         try {
                           context = connect_mesh(
                               mesh_spec, k == 0 ? prefix : prefix + "c" + std::to_string(k) + "/",
                               connect_s);
                         } catch (...) {
                           error = std::current_exception();
                         }
                         {
                           std::lock_guard<std::mutex> lock(job->mu);
                           job->contexts[k] = std::move(context);
                           job->errors[k] = error;
                           ++job->done;
                           job->cv.notify_all();
                         }
                         ended->store(true);
                       }),
                       ended});
  }
  std::string futile;
  {
    std::unique_lock<std::mutex> lock(job->mu);
    const auto slice = std::chrono::duration<double>(std::clamp(spec.poll_s, 0.001, 60.0));
    while (job->done < k_count) {
      if (job->cv.wait_for(lock, slice, [&] { return job->done == k_count; })) break;
      if (!spec.abandon) continue;
      lock.unlock();
      futile = spec.abandon();
      lock.lock();
      if (!futile.empty() && job->done < k_count) break;
      futile.clear();
    }
  }
  if (!futile.empty()) {
    {
      std::lock_guard<std::mutex> lock(job->abandon_mu);
      job->given_up = true;
    }
    std::lock_guard<std::mutex> lock(stragglers_mu_);
    for (Straggler& t : threads) stragglers_.push_back(std::move(t));
    throw PeerLostError(
        -1, "gloo transport: epoch " + std::to_string(spec.epoch) + " connect given up: " + futile);
  }
  for (Straggler& t : threads) t.thread.join();
  std::vector<std::shared_ptr<::gloo::Context>> contexts = std::move(job->contexts);
  for (const auto& e : job->errors)
    if (e) std::rethrow_exception(e);
  return std::make_unique<GlooTransport>(std::move(contexts), spec.epoch, spec.rank, size,
                                         options_.min_stripe_bytes);
}

}  // namespace meridian::gloo_transport
