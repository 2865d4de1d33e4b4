// GlooTransport: each logical message is a 16-byte header (magic, payload bytes) and then the
// payload, on two Gloo slots derived from the tag, both posted by the sender at once. The
// receiver posts the header's receive up front and the payload's only after checking the header,
// for exactly the announced size: Gloo aborts the process when a message exceeds the posted
// receive, so it must never see one, and Gloo's own rendezvous (a send leaves only when its
// receive is posted) holds the payload back meanwhile; an oversize message is a ProtocolError at
// the receiver, which aborts the epoch. A per-transport armer thread checks exchanges' headers as
// they arrive, so payloads flow while the caller works. Gloo errors become Meridian errors here,
// and any failed operation aborts the epoch (Gloo cannot cancel a posted receive, and the memory
// it targets belongs to the caller).
#include "engine/transport/gloo/gloo_transport.h"

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
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/transport/gloo/gloo_store_adapter.h"
#include "engine/util/epoch_keys.h"

namespace meridian::gloo_transport {
namespace {

using Clock = std::chrono::steady_clock;
using Buffer = ::gloo::transport::UnboundBuffer;

constexpr std::uint32_t kHeaderMagic = 0x4d474c4f;  // "MGLO"

// Headers travel on the tag's slot with the top bit set (tag kinds are small numbers in bits
// 56-63, so bit 63 is otherwise clear), payloads on the tag's slot: Gloo matches each slot's
// messages in order, so with several messages of one tag in flight a header never meets a
// payload's receive.
constexpr std::uint64_t header_slot(Tag tag) { return tag | (std::uint64_t{1} << 63); }

struct Header {
  std::uint32_t magic = 0;
  std::uint32_t reserved = 0;
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == 16);

Clock::time_point deadline_after(double timeout_s) {
  const double s = std::isfinite(timeout_s) ? std::clamp(timeout_s, 0.0, 1e7) : 1e7;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

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
  TrackedBuffer(GlooTransport& t, void* ptr, std::size_t bytes);
  ~TrackedBuffer();
  Buffer& operator*() { return *buffer_; }
  Buffer* operator->() { return buffer_.get(); }

 private:
  GlooTransport& transport_;
  std::unique_ptr<Buffer> buffer_;
};

class GlooTransport final : public Transport {
 public:
  GlooTransport(std::shared_ptr<::gloo::Context> context, std::uint64_t epoch, int rank, int size)
      : context_(std::move(context)), epoch_(epoch), rank_(rank), size_(size) {}
  ~GlooTransport() override {
    // Close before the buffers' owners go away: nothing may be written into caller memory later.
    abort();
    stop_armer();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::uint64_t epoch() const override { return epoch_; }

  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    check_peer(to, "send to");
    const auto deadline = deadline_after(timeout_s);
    Outgoing out(*this, to, tag, msg);
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
    if (context_) {
      try {
        // Resets every connection: peers see their pending operations with us fail at once,
        // and Gloo stops reading into our buffers.
        context_->closeConnections();
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
  ::gloo::Context& context() { return *context_; }

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

  // A message on its way out, posted whole at construction: the 16-byte header (magic, payload
  // bytes) and then the payload. Gloo holds both until the receiver posts the
  // matching receives, which it does for the payload only after checking the header.
  class Outgoing {
   public:
    Outgoing(GlooTransport& t, int to, Tag tag, Payload msg)
        : t_(t),
          to_(to),
          tag_(tag),
          header_{kHeaderMagic, 0, msg.bytes.size()},
          header_buf_(t, &header_, sizeof(header_)) {
      if (!msg.bytes.empty()) {
        payload_buf_.emplace(t, const_cast<std::byte*>(msg.bytes.data()), msg.bytes.size());
      }
      t_.guarded(to_, "send " + tag_text(tag_) + " to", [&] {
        header_buf_->send(to_, header_slot(tag_));
        if (payload_buf_) payload_buf_.value()->send(to_, tag_);
        return 0;
      });
    }
    void wait(Clock::time_point deadline) {
      t_.wait_op(*header_buf_, true, to_, deadline, tag_);
      if (payload_buf_) t_.wait_op(**payload_buf_, true, to_, deadline, tag_);
    }

   private:
    GlooTransport& t_;
    int to_;
    Tag tag_;
    Header header_;
    TrackedBuffer header_buf_;
    std::optional<TrackedBuffer> payload_buf_;
  };

  // A message on its way in. At construction the header's receive is posted; arm() checks the
  // header (magic, size within this buffer) and only then posts the payload's receive for
  // exactly the announced size, so Gloo never sees a message larger than its receive. An
  // exchange's message is armed by the transport's armer thread as soon as its header arrives
  // (so the payload flows while the caller is busy); a plain recv() arms in the caller.
  class Incoming {
   public:
    Incoming(GlooTransport& t, int from, Tag tag, std::span<std::byte> into)
        : t_(t), from_(from), tag_(tag), into_(into), header_buf_(t, &header_, sizeof(header_)) {
      t_.guarded(from_, "receive " + tag_text(tag_) + " from", [&] {
        header_buf_->recv(from_, header_slot(tag_));
        return 0;
      });
    }
    void arm(Clock::time_point deadline) {
      t_.wait_op(*header_buf_, false, from_, deadline, tag_);
      const std::string where =
          "message from rank " + std::to_string(from_) + " (" + tag_text(tag_) + ")";
      if (header_.magic != kHeaderMagic) {
        t_.abort();
        throw ProtocolError(where + ": bad header magic");
      }
      if (header_.payload_bytes > into_.size()) {
        t_.abort();
        throw ProtocolError(where + " has " + std::to_string(header_.payload_bytes) +
                            " bytes, more than the receive buffer's " +
                            std::to_string(into_.size()));
      }
      if (header_.payload_bytes == 0) return;
      payload_buf_.emplace(t_, into_.data(), header_.payload_bytes);
      t_.guarded(from_, "receive " + tag_text(tag_) + " from", [&] {
        payload_buf_.value()->recv(from_, tag_);
        return 0;
      });
    }
    int from() const { return from_; }
    Tag tag() const { return tag_; }
    // After arm(): the payload's arrival.
    Received finish(Clock::time_point deadline) {
      if (payload_buf_) t_.wait_op(**payload_buf_, false, from_, deadline, tag_);
      const std::size_t n = header_.payload_bytes;
      return {n, n};
    }
    Received wait(Clock::time_point deadline) {
      arm(deadline);
      return finish(deadline);
    }

    // Armer hand-off, guarded by the transport's armer mutex.
    enum class Arming { kQueued, kArming, kDone };
    Arming arming = Arming::kDone;
    std::exception_ptr arm_error;
    std::uint64_t seq = 0;  // order of queue_arm() calls

   private:
    GlooTransport& t_;
    int from_;
    Tag tag_;
    std::span<std::byte> into_;
    Header header_;
    TrackedBuffer header_buf_;
    std::optional<TrackedBuffer> payload_buf_;  // posted once the header is checked
  };

  // Arming: an exchange's incoming message is armed (header checked, payload receive posted)
  // by the armer thread as soon as its header arrives, or by the caller that waits for it.
  // Messages of one (peer, tag) are armed in the order their exchanges started, since Gloo
  // matches their payload receives in the order they are posted. Guarded by arm_mu_.

  // Queues `in` for the armer thread (started on first use).
  void queue_arm(Incoming& in) {
    std::lock_guard<std::mutex> lock(arm_mu_);
    if (!armer_.joinable()) armer_ = std::thread([this] { armer_loop(); });
    in.arming = Incoming::Arming::kQueued;
    in.seq = next_seq_++;
    unwaited_.insert(in.seq);
    arm_queue_.push_back(&in);
    arm_cv_.notify_all();
  }

  // Until `in` is armed: arms it here (after any older message of its stream that nobody is
  // arming), or waits for whoever is. Rethrows the arming error.
  void await_arm(Incoming& in, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(arm_mu_);
    unwaited_.erase(in.seq);
    arm_cv_.notify_all();
    while (in.arming != Incoming::Arming::kDone) {
      Incoming* oldest = oldest_unarmed_of_stream(in);
      if (oldest->arming == Incoming::Arming::kQueued) {
        arm_here(*oldest, deadline, lock);
        continue;
      }
      if (arm_cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
          in.arming != Incoming::Arming::kDone) {
        lock.unlock();
        abort();  // wakes whoever is arming
        throw TimeoutError("receive " + tag_text(in.tag()) + " from rank " +
                           std::to_string(in.from()) + ": nothing arrived in time");
      }
    }
    if (in.arm_error) std::rethrow_exception(in.arm_error);
  }

  // Before `in` goes away: it leaves the queue, or whoever arms it finishes (call abort()
  // first so that nobody waits for a message that will not come).
  void forget_arm(Incoming& in) {
    std::unique_lock<std::mutex> lock(arm_mu_);
    unwaited_.erase(in.seq);
    if (in.arming == Incoming::Arming::kQueued) {
      arm_queue_.erase(std::find(arm_queue_.begin(), arm_queue_.end(), &in));
      in.arming = Incoming::Arming::kDone;
    }
    arm_cv_.notify_all();
    arm_cv_.wait(lock, [&] { return in.arming == Incoming::Arming::kDone; });
  }

 private:
  static bool same_stream(const Incoming& a, const Incoming& b) {
    return a.from() == b.from() && a.tag() == b.tag();
  }

  // The oldest message of `in`'s stream that is queued or being armed (`in` itself if none).
  Incoming* oldest_unarmed_of_stream(Incoming& in) {
    Incoming* oldest = &in;
    for (Incoming* x : arm_queue_)
      if (same_stream(*x, in) && x->seq < oldest->seq) oldest = x;
    for (Incoming* x : arming_now_)
      if (same_stream(*x, in) && x->seq < oldest->seq) oldest = x;
    return oldest;
  }

  // Arms `in` (queued, the oldest of its stream) on this thread with arm_mu_ released.
  void arm_here(Incoming& in, Clock::time_point deadline, std::unique_lock<std::mutex>& lock) {
    arm_queue_.erase(std::find(arm_queue_.begin(), arm_queue_.end(), &in));
    in.arming = Incoming::Arming::kArming;
    arming_now_.push_back(&in);
    lock.unlock();
    std::exception_ptr error;
    try {
      in.arm(deadline);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    in.arm_error = error;
    in.arming = Incoming::Arming::kDone;
    arming_now_.erase(std::find(arming_now_.begin(), arming_now_.end(), &in));
    arm_cv_.notify_all();
  }

  // The armer: arms queued messages in order, each as soon as its header arrives, except the
  // oldest one still to be waited for (its caller arms it when it waits: one thread hop less,
  // while the armer works ahead on the next) and any behind an older one of its stream.
  // Bounded by abort() (which wakes its wait), not by a caller's timeout.
  void armer_loop() {
    std::unique_lock<std::mutex> lock(arm_mu_);
    for (;;) {
      Incoming* next = nullptr;
      arm_cv_.wait(lock, [&] {
        next = nullptr;
        for (Incoming* x : arm_queue_) {
          if (x->seq != *unwaited_.begin() && oldest_unarmed_of_stream(*x) == x) {
            next = x;
            break;
          }
        }
        return stop_armer_ || next != nullptr;
      });
      if (stop_armer_) return;
      arm_here(*next, deadline_after(kArmerBackstopS), lock);
    }
  }

  void stop_armer() {
    {
      std::lock_guard<std::mutex> lock(arm_mu_);
      stop_armer_ = true;
      arm_cv_.notify_all();
    }
    if (armer_.joinable()) armer_.join();
  }

 private:
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      throw ConfigError(std::string("gloo transport: cannot ") + what + " rank " +
                        std::to_string(peer) + " (this is rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ")");
    }
  }

  std::shared_ptr<::gloo::Context> context_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::set<Buffer*> live_;

  static constexpr double kArmerBackstopS = 3600.0;
  std::mutex arm_mu_;
  std::condition_variable arm_cv_;
  std::deque<Incoming*> arm_queue_;  // exchanges' messages waiting for their header
  std::vector<Incoming*> arming_now_;  // being armed (by the armer or a waiting caller)
  std::uint64_t next_seq_ = 0;
  std::set<std::uint64_t> unwaited_;  // seq of queued messages whose wait() has not begun
  bool stop_armer_ = false;
  std::thread armer_;
};

TrackedBuffer::TrackedBuffer(GlooTransport& t, void* ptr, std::size_t bytes) : transport_(t) {
  buffer_ =
      t.guarded(-1, "create buffer", [&] { return t.context().createUnboundBuffer(ptr, bytes); });
  transport_.track(buffer_.get());
}

TrackedBuffer::~TrackedBuffer() { transport_.untrack(buffer_.get()); }

namespace {

// An exchange: the outgoing message (header and payload) and the incoming header are posted at
// once, and the incoming message is queued for the armer, which posts its payload's receive as
// soon as the header has arrived and checked out; wait() completes both halves. No credit round
// trip: Gloo's own rendezvous (a send leaves when its receive is posted) holds the payload back
// until the receiver has checked its size.
// Destroying an exchange whose wait() did not complete aborts the epoch: its operations are
// still posted, and Gloo must not touch their buffers afterwards.
class GlooExchange final : public PendingExchange {
 public:
  GlooExchange(GlooTransport& t, int to, Payload out, int from, std::span<std::byte> into, Tag tag)
      : transport_(t), incoming_(t, from, tag, into), outgoing_(t, to, tag, out) {
    transport_.queue_arm(incoming_);
  }
  ~GlooExchange() override {
    if (!completed_) transport_.abort();
    transport_.forget_arm(incoming_);
  }
  Received wait(double timeout_s) override {
    const auto deadline = deadline_after(timeout_s);
    transport_.await_arm(incoming_, deadline);
    const Received r = incoming_.finish(deadline);
    outgoing_.wait(deadline);
    completed_ = true;
    return r;
  }

 private:
  GlooTransport& transport_;
  bool completed_ = false;
  GlooTransport::Incoming incoming_;
  GlooTransport::Outgoing outgoing_;
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

GlooTransportFactory::GlooTransportFactory(Store& store, GlooOptions options)
    : store_(store), options_(std::move(options)) {
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

GlooTransportFactory::~GlooTransportFactory() = default;

std::unique_ptr<Transport> GlooTransportFactory::connect(const EpochSpec& spec) {
  const int size = static_cast<int>(spec.members.size());
  if (size < 1 || spec.rank < 0 || spec.rank >= size) {
    throw ConfigError("gloo transport: epoch " + std::to_string(spec.epoch) + " has rank " +
                      std::to_string(spec.rank) + " of " + std::to_string(size) + " members");
  }
  if (size == 1) return std::make_unique<SoloTransport>(spec.epoch);

  const std::string prefix = epoch_store_prefix(options_.store_prefix, spec);
  StoreAdapter adapter(store_, prefix, spec.timeout_s);
  auto context = std::make_shared<::gloo::rendezvous::Context>(spec.rank, size);
  context->setTimeout(std::chrono::milliseconds(
      static_cast<std::int64_t>(std::clamp(spec.timeout_s, 0.001, 1e7) * 1000.0)));
  try {
    context->connectFullMesh(adapter, device_);
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
  return std::make_unique<GlooTransport>(std::move(context), spec.epoch, spec.rank, size);
}

}  // namespace meridian::gloo_transport
