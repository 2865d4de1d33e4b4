// Live recovery: request/reply chunks with CRC-32C, parallel sources, resumption.
//
// Messages (little-endian, TagKind::kRecovery; requests on tag 1, replies on tag 2):
//   request  24 B: u32 magic "MRRQ", u32 op (1 layout, 2 chunk, 3 done), u64 arg, u64 chunk_bytes
//                  arg of a chunk request = region (bit 63: 0 shared, 1 private) | chunk index
//   layout   32 B: u32 magic "MRLY", u32 crc32c of bytes [8, 32), u64 shared_bytes,
//                  u64 private_bytes, u64 reserved
//   chunk    24 B + payload: u32 magic "MRCK", u32 crc32c of the payload, u64 arg, u64 length
#include "engine/core/recovery/live_recovery.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"

namespace meridian {
namespace {

constexpr std::uint32_t kRequestMagic = 0x5152524Du;  // "MRRQ"
constexpr std::uint32_t kLayoutMagic = 0x594C524Du;   // "MRLY"
constexpr std::uint32_t kChunkMagic = 0x4B43524Du;    // "MRCK"
constexpr std::uint32_t kOpLayout = 1, kOpChunk = 2, kOpDone = 3;
constexpr std::uint64_t kPrivateBit = std::uint64_t{1} << 63;
constexpr std::size_t kRequestBytes = 24, kLayoutBytes = 32, kChunkHeaderBytes = 24;
const Tag kRequestTag = make_tag(TagKind::kRecovery, 1);
const Tag kReplyTag = make_tag(TagKind::kRecovery, 2);

template <typename T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint64_t chunk_count(std::uint64_t bytes, std::uint64_t chunk) {
  return (bytes + chunk - 1) / chunk;
}

void send_request(Transport& t, std::uint32_t op, std::uint64_t arg, std::uint64_t chunk_bytes,
                  double timeout_s) {
  std::byte req[kRequestBytes];
  put(req, kRequestMagic);
  put(req + 4, op);
  put(req + 8, arg);
  put(req + 16, chunk_bytes);
  t.send(1, kRequestTag, Payload::of(req), timeout_s);
}

}  // namespace

std::vector<std::int64_t> recovery_sources_for(const RoundRecord& r, std::int64_t joiner,
                                               int max_sources) {
  const auto it = std::find(r.joiners.begin(), r.joiners.end(), joiner);
  if (it == r.joiners.end() || r.sources.empty()) return {};
  const std::size_t shift = static_cast<std::size_t>(it - r.joiners.begin()) % r.sources.size();
  const std::size_t n = std::min<std::size_t>(std::max(1, max_sources), r.sources.size());
  std::vector<std::int64_t> out;
  for (std::size_t k = 0; k < n; ++k) out.push_back(r.sources[(shift + k) % r.sources.size()]);
  return out;
}

EpochSpec recovery_spec(const RoundRecord& r, std::int64_t joiner, std::int64_t source,
                        bool as_source, const RecoveryOptions& options) {
  const auto j = std::find(r.joiners.begin(), r.joiners.end(), joiner) - r.joiners.begin();
  const auto s = std::find(r.sources.begin(), r.sources.end(), source) - r.sources.begin();
  EpochSpec spec;
  if (static_cast<std::uint64_t>(j) > kMaxRecoveryIndex ||
      static_cast<std::uint64_t>(s) > kMaxRecoveryIndex || r.round >= (std::uint64_t{1} << 38))
    throw ConfigError("live recovery: round " + std::to_string(r.round) + " has " +
                      std::to_string(r.joiners.size()) + " joiners and " +
                      std::to_string(r.sources.size()) +
                      " sources; an epoch id holds rounds below 2^38 and at most " +
                      std::to_string(kMaxRecoveryIndex + 1) + " of each");
  spec.epoch =
      recovery_epoch_id(r.round, static_cast<std::uint64_t>(j), static_cast<std::uint64_t>(s));
  spec.rank = as_source ? 1 : 0;
  spec.members = {joiner, source};
  spec.timeout_s = options.timeout_s;
  spec.connect_timeout_s = options.connect_timeout_s;
  if (options.peer_gone) {
    const std::int64_t other = as_source ? joiner : source;
    spec.abandon = [gone = options.peer_gone, other] { return gone(other); };
  }
  return spec;
}

std::uint64_t serve_recovery(TransportFactory& factory, const EpochSpec& spec,
                             std::shared_ptr<const RecoveryState> state,
                             const RecoveryOptions& options) {
  MERIDIAN_CHECK_EQ(spec.rank, 1);
  std::unique_ptr<Transport> t = factory.connect(spec);
  std::uint64_t served = 0;
  std::vector<std::byte> reply;
  while (true) {
    std::byte req[kRequestBytes];
    const Received got = t->recv(0, kRequestTag, req, options.timeout_s);
    if (got.bytes != kRequestBytes || get<std::uint32_t>(req) != kRequestMagic)
      throw ProtocolError("recovery: malformed request (" + std::to_string(got.bytes) + " bytes)");
    const auto op = get<std::uint32_t>(req + 4);
    const auto arg = get<std::uint64_t>(req + 8);
    const auto chunk_bytes = get<std::uint64_t>(req + 16);
    if (op == kOpDone) return served;
    if (op == kOpLayout) {
      std::byte lay[kLayoutBytes] = {};
      put(lay, kLayoutMagic);
      put(lay + 8, state->shared_bytes);
      put(lay + 16, state->private_bytes);
      put(lay + 4, crc32c(std::span<const std::byte>(lay + 8, kLayoutBytes - 8)));
      t->send(0, kReplyTag, Payload::of(lay), options.timeout_s);
      continue;
    }
    if (op != kOpChunk || chunk_bytes == 0)
      throw ProtocolError("recovery: unknown request op " + std::to_string(op));
    const bool is_private = (arg & kPrivateBit) != 0;
    const std::uint64_t index = arg & ~kPrivateBit;
    const std::uint64_t total = is_private ? state->private_bytes : state->shared_bytes;
    if (index >= chunk_count(total, chunk_bytes))
      throw ProtocolError("recovery: chunk " + std::to_string(index) + " out of range");
    const std::uint64_t offset = index * chunk_bytes;
    const std::uint64_t len = std::min<std::uint64_t>(chunk_bytes, total - offset);
    reply.assign(kChunkHeaderBytes + (state->phantom ? 0 : len), std::byte{0});
    std::uint32_t crc = 0;
    if (!state->phantom) {
      const auto& src = is_private ? state->priv : state->shared;
      std::memcpy(reply.data() + kChunkHeaderBytes, src.data() + offset, len);
      crc = crc32c(std::span<const std::byte>(reply.data() + kChunkHeaderBytes, len));
    }
    put(reply.data(), kChunkMagic);
    put(reply.data() + 4, crc);
    put(reply.data() + 8, arg);
    put(reply.data() + 16, len);
    t->send(0, kReplyTag, Payload{reply, kChunkHeaderBytes + len}, options.timeout_s);
    served += len;
  }
}

namespace {

// Shared bookkeeping of one fetch. Every field is guarded by `mu`.
struct FetchPlan {
  std::unique_ptr<Mutex> mu;
  std::unique_ptr<CondVar> cv;
  std::vector<std::deque<std::uint64_t>> own;  // shared chunks assigned to each source
  std::deque<std::uint64_t> orphans;           // chunks of lost sources
  std::uint64_t shared_left = 0;               // shared chunks not yet received
  bool private_done = false;
  int private_owner = 0;  // the source fetching the private part (reserved: 0), -1 = free
  int resumed = 0;
  std::vector<std::uint64_t> served;  // bytes per source
  RecoveryState state;
};

class SourceFetcher {
 public:
  SourceFetcher(FetchPlan& plan, int index, TransportFactory& factory, EpochSpec spec,
                std::uint64_t expected_shared, std::uint64_t max_private, bool phantom,
                const RecoveryOptions& options)
      : plan_(plan),
        index_(index),
        factory_(factory),
        spec_(std::move(spec)),
        expected_shared_(expected_shared),
        max_private_(max_private),
        phantom_(phantom),
        options_(options) {}

  void run() {
    std::uint64_t held = kNone;  // the shared chunk in flight
    bool holds_private = false;
    try {
      transport_ = factory_.connect(spec_);
      read_layout();
      while (true) {
        Work w = take();
        if (w.kind == Work::kStop) break;
        if (w.kind == Work::kShared) {
          held = w.chunk;
          fetch_shared(w.chunk);
          held = kNone;
        } else {
          holds_private = true;
          fetch_private();
          holds_private = false;
        }
      }
      send_request(*transport_, kOpDone, 0, options_.chunk_bytes, options_.timeout_s);
    } catch (const Error&) {
      LockGuard lock(*plan_.mu);
      auto& mine = plan_.own[index_];
      const bool had_work = held != kNone || holds_private || !mine.empty();
      if (held != kNone) plan_.orphans.push_back(held);
      plan_.orphans.insert(plan_.orphans.end(), mine.begin(), mine.end());
      mine.clear();
      if (holds_private || plan_.private_owner == index_) plan_.private_owner = -1;  // free it
      if (had_work) ++plan_.resumed;
      plan_.cv->notify_all();
    }
    if (transport_) transport_->abort();
  }

 private:
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  struct Work {
    enum Kind { kStop, kShared, kPrivate } kind = kStop;
    std::uint64_t chunk = 0;
  };

  void read_layout() {
    send_request(*transport_, kOpLayout, 0, options_.chunk_bytes, options_.timeout_s);
    std::byte lay[kLayoutBytes];
    const Received got = transport_->recv(1, kReplyTag, lay, options_.timeout_s);
    if (got.bytes != kLayoutBytes || get<std::uint32_t>(lay) != kLayoutMagic ||
        get<std::uint32_t>(lay + 4) !=
            crc32c(std::span<const std::byte>(lay + 8, kLayoutBytes - 8)))
      throw ProtocolError("recovery: malformed layout reply");
    const auto shared = get<std::uint64_t>(lay + 8);
    private_bytes_ = get<std::uint64_t>(lay + 16);
    if (shared != expected_shared_)
      throw ProtocolError("recovery: source offers " + std::to_string(shared) +
                          " shared bytes, expected " + std::to_string(expected_shared_));
    if (private_bytes_ > max_private_)
      throw ProtocolError("recovery: source offers " + std::to_string(private_bytes_) +
                          " private bytes, more than the bound " + std::to_string(max_private_));
  }

  // Own chunks, then a lost source's chunks, then the private part if still unowned; waits
  // while others still hold work that could come back; stops when nothing is left.
  Work take() {
    LockGuard lock(*plan_.mu);
    while (true) {
      // The private part is reserved for the first source, which fetches it first, so without
      // failures the joiner's inner state always comes from the same peer (deterministic runs).
      if (!plan_.private_done && plan_.private_owner == index_ && !private_taken_) {
        private_taken_ = true;
        return {Work::kPrivate, 0};
      }
      auto& mine = plan_.own[index_];
      if (!mine.empty()) {
        const auto c = mine.front();
        mine.pop_front();
        return {Work::kShared, c};
      }
      if (!plan_.orphans.empty()) {
        const auto c = plan_.orphans.front();
        plan_.orphans.pop_front();
        return {Work::kShared, c};
      }
      if (!plan_.private_done && plan_.private_owner < 0) {
        plan_.private_owner = index_;
        private_taken_ = true;
        return {Work::kPrivate, 0};
      }
      if (plan_.shared_left == 0 && plan_.private_done) return {};
      plan_.cv->wait_for(*plan_.mu, options_.timeout_s);
    }
  }

  // Requests one chunk and checks it; returns the payload length.
  std::uint64_t fetch(std::uint64_t arg, std::uint64_t total, std::byte* into) {
    const std::uint64_t index = arg & ~kPrivateBit;
    const std::uint64_t len =
        std::min<std::uint64_t>(options_.chunk_bytes, total - index * options_.chunk_bytes);
    send_request(*transport_, kOpChunk, arg, options_.chunk_bytes, options_.timeout_s);
    buf_.resize(kChunkHeaderBytes + (phantom_ ? 0 : len));
    const Received got = transport_->recv(1, kReplyTag, buf_, options_.timeout_s);
    if (got.bytes != buf_.size() || get<std::uint32_t>(buf_.data()) != kChunkMagic ||
        get<std::uint64_t>(buf_.data() + 8) != arg || get<std::uint64_t>(buf_.data() + 16) != len)
      throw ProtocolError("recovery: malformed reply for chunk " + std::to_string(index));
    if (!phantom_) {
      const std::span<const std::byte> payload(buf_.data() + kChunkHeaderBytes, len);
      if (crc32c(payload) != get<std::uint32_t>(buf_.data() + 4))
        throw ProtocolError("recovery: checksum mismatch in chunk " + std::to_string(index));
      std::memcpy(into, payload.data(), len);
    }
    return len;
  }

  void fetch_shared(std::uint64_t chunk) {
    std::byte* into = phantom_ ? nullptr : plan_.state.shared.data() + chunk * options_.chunk_bytes;
    const std::uint64_t len = fetch(chunk, expected_shared_, into);  // disjoint ranges: no lock
    LockGuard lock(*plan_.mu);
    --plan_.shared_left;
    plan_.served[index_] += len;
    plan_.cv->notify_all();
  }

  void fetch_private() {
    std::vector<std::byte> priv(phantom_ ? 0 : private_bytes_);
    std::uint64_t got = 0;
    for (std::uint64_t c = 0; c < chunk_count(private_bytes_, options_.chunk_bytes); ++c)
      got += fetch(kPrivateBit | c, private_bytes_,
                   phantom_ ? nullptr : priv.data() + c * options_.chunk_bytes);
    LockGuard lock(*plan_.mu);
    plan_.state.priv = std::move(priv);
    plan_.state.private_bytes = private_bytes_;
    plan_.private_done = true;
    plan_.served[index_] += got;
    plan_.cv->notify_all();
  }

  FetchPlan& plan_;
  const int index_;
  TransportFactory& factory_;
  const EpochSpec spec_;
  const std::uint64_t expected_shared_;
  const std::uint64_t max_private_;
  const bool phantom_;
  const RecoveryOptions& options_;
  std::unique_ptr<Transport> transport_;
  std::uint64_t private_bytes_ = 0;
  bool private_taken_ = false;
  std::vector<std::byte> buf_;
};

}  // namespace

FetchResult fetch_recovery(TransportFactory& factory, Runtime& runtime, const RoundRecord& r,
                           std::int64_t joiner, const std::vector<std::int64_t>& sources,
                           std::uint64_t expected_shared_bytes, std::uint64_t max_private_bytes,
                           bool phantom, const RecoveryOptions& options) {
  if (options.chunk_bytes == 0) throw ConfigError("recovery: chunk_bytes must be > 0");
  if (sources.empty()) throw PeerLostError(-1, "recovery: no source to recover from");
  FetchPlan plan;
  plan.mu = runtime.make_mutex();
  plan.cv = runtime.make_condvar();
  plan.own.resize(sources.size());
  plan.served.assign(sources.size(), 0);
  plan.state.phantom = phantom;
  plan.state.shared_bytes = expected_shared_bytes;
  if (!phantom) plan.state.shared.resize(expected_shared_bytes);
  const std::uint64_t chunks = chunk_count(expected_shared_bytes, options.chunk_bytes);
  plan.shared_left = chunks;
  for (std::uint64_t c = 0; c < chunks; ++c) plan.own[c % sources.size()].push_back(c);

  std::vector<std::unique_ptr<SourceFetcher>> fetchers;
  std::vector<std::unique_ptr<Activity>> activities;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    fetchers.push_back(std::make_unique<SourceFetcher>(
        plan, static_cast<int>(i), factory, recovery_spec(r, joiner, sources[i], false, options),
        expected_shared_bytes, max_private_bytes, phantom, options));
    activities.push_back(runtime.spawn("recovery-fetch-" + std::to_string(sources[i]),
                                       [f = fetchers.back().get()] { f->run(); }));
  }
  for (auto& a : activities) a->join();

  if (plan.shared_left != 0 || !plan.private_done)
    throw PeerLostError(-1, "recovery: every source was lost before the state was complete (" +
                                std::to_string(plan.shared_left) + " shared chunks missing)");
  FetchResult out;
  out.resumed = plan.resumed;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    out.bytes += plan.served[i];
    if (plan.served[i] > 0) out.served_by.push_back(sources[i]);
  }
  out.state = std::move(plan.state);
  return out;
}

}  // namespace meridian
