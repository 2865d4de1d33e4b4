// DelayMatrix parsing, MacTable and DelayForwarder (see delay_forwarder.h). Pure code: every
// buffer and the queue's capacity are allocated in the constructor.
#include "cli/netdelay/delay_forwarder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "engine/core/error.h"

namespace meridian::netdelay {
namespace {

constexpr std::size_t kEthHeaderBytes = 14;
constexpr double kMaxDelayMs = 60'000;

std::int64_t to_ns(double ms, const std::string& what) {
  if (!std::isfinite(ms) || ms < 0 || ms > kMaxDelayMs) {
    std::ostringstream os;
    os << what << ": expected a one-way delay in [0, " << kMaxDelayMs << "] ms, got " << ms;
    throw ConfigError(os.str());
  }
  return std::llround(ms * 1e6);
}

Mac mac_at(const std::uint8_t* p) {
  Mac m;
  std::memcpy(m.data(), p, m.size());
  return m;
}

bool is_group(const Mac& m) { return (m[0] & 1) != 0; }  // multicast and broadcast

std::uint64_t key_of(const Mac& mac) {  // the 48 bits, and bit 63 to tell a used slot
  std::uint64_t key = 0;
  for (std::uint8_t b : mac) key = (key << 8) | b;
  return key | (1ull << 63);
}

}  // namespace

std::vector<double> parse_delays_ms(std::string text, const std::string& what) {
  return parse_number_list(std::move(text), what, "a delay in ms");
}

DelayMatrix::DelayMatrix(int ports, std::vector<std::int64_t> delay_ns)
    : ports_(ports), delay_ns_(std::move(delay_ns)) {}

DelayMatrix DelayMatrix::uniform(int ports, double one_way_ms) {
  if (ports < 1) throw ConfigError("delay matrix: expected at least one port");
  const std::int64_t d = to_ns(one_way_ms, "--delay-ms");
  return DelayMatrix(ports, std::vector<std::int64_t>(static_cast<std::size_t>(ports * ports), d));
}

DelayMatrix DelayMatrix::from_access_delays(std::span<const double> access_ms) {
  const int n = static_cast<int>(access_ms.size());
  if (n < 1) throw ConfigError("--access-delay-ms: expected one delay per port");
  std::vector<std::int64_t> d(static_cast<std::size_t>(n * n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const std::string what =
          "--access-delay-ms (ports " + std::to_string(i) + ", " + std::to_string(j) + ")";
      d[static_cast<std::size_t>(i * n + j)] = to_ns(access_ms[i] + access_ms[j], what);
    }
  }
  return DelayMatrix(n, std::move(d));
}

DelayMatrix DelayMatrix::parse(const std::string& text, const std::string& source) {
  std::vector<std::vector<double>> rows;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::vector<double> row = parse_delays_ms(line, source + ":" + std::to_string(line_no));
    if (row.empty()) continue;
    if (!rows.empty() && row.size() != rows.front().size()) {
      throw ConfigError(source + ":" + std::to_string(line_no) + ": expected " +
                        std::to_string(rows.front().size()) + " delays (as the first row), got " +
                        std::to_string(row.size()));
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw ConfigError(source + ": no delays (expected N lines of N delays in ms)");
  const int n = static_cast<int>(rows.size());
  if (static_cast<int>(rows.front().size()) != n) {
    throw ConfigError(source + ": expected a square matrix, got " + std::to_string(n) +
                      " rows of " + std::to_string(rows.front().size()));
  }
  std::vector<std::int64_t> d(static_cast<std::size_t>(n * n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      d[static_cast<std::size_t>(i * n + j)] =
          to_ns(rows[i][j],
                source + ": row " + std::to_string(i + 1) + ", column " + std::to_string(j + 1));
    }
  }
  return DelayMatrix(n, std::move(d));
}

MacTable::MacTable(std::size_t capacity) {
  std::size_t n = 16;
  while (n < 2 * capacity) n *= 2;  // at most half full: short probe sequences
  slots_.resize(n);
}

std::size_t MacTable::probe_start(std::uint64_t key) const {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & (slots_.size() - 1);
}

void MacTable::learn(const Mac& mac, int port) {
  if (is_group(mac)) return;
  const std::uint64_t key = key_of(mac);
  for (std::size_t i = probe_start(key), k = 0; k < slots_.size();
       ++k, i = (i + 1) & (slots_.size() - 1)) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.port = port;
      return;
    }
    if (s.key == 0) {
      if (2 * (size_ + 1) > slots_.size()) return;  // full: flood this one's frames
      s.key = key;
      s.port = port;
      ++size_;
      return;
    }
  }
}

int MacTable::lookup(const Mac& mac) const {
  const std::uint64_t key = key_of(mac);
  for (std::size_t i = probe_start(key), k = 0; k < slots_.size();
       ++k, i = (i + 1) & (slots_.size() - 1)) {
    const Slot& s = slots_[i];
    if (s.key == key) return s.port;
    if (s.key == 0) return -1;
  }
  return -1;
}

DelayForwarder::DelayForwarder(DelayMatrix delays, std::size_t prefix_bytes,
                               ForwarderOptions options)
    : delays_(std::move(delays)), prefix_bytes_(prefix_bytes), options_(options) {
  MERIDIAN_CHECK_GT(options_.small_slot_bytes, prefix_bytes_ + kEthHeaderBytes);
  MERIDIAN_CHECK_GE(options_.large_slot_bytes, options_.small_slot_bytes);
  const std::size_t total = options_.small_slots + options_.large_slots;
  MERIDIAN_CHECK_LT(total, std::size_t{1} << 31);
  small_.storage.reset(new std::uint8_t[options_.small_slots * options_.small_slot_bytes]);
  large_.storage.reset(new std::uint8_t[options_.large_slots * options_.large_slot_bytes]);
  buffers_.resize(total);
  small_.free.reserve(options_.small_slots);
  large_.free.reserve(options_.large_slots);
  for (std::size_t i = 0; i < options_.small_slots; ++i) {
    buffers_[i].data = small_.storage.get() + i * options_.small_slot_bytes;
    small_.free.push_back(static_cast<std::uint32_t>(options_.small_slots - 1 - i));
  }
  for (std::size_t i = 0; i < options_.large_slots; ++i) {
    Buffer& b = buffers_[options_.small_slots + i];
    b.data = large_.storage.get() + i * options_.large_slot_bytes;
    b.large = true;
    large_.free.push_back(static_cast<std::uint32_t>(total - 1 - i));
  }
  const std::size_t pairs = static_cast<std::size_t>(ports() * ports());
  const Impairments& imp = options_.impairments;
  loss_.reserve(pairs);
  jitter_.reserve(pairs);
  for (std::size_t k = 0; k < pairs; ++k) {
    loss_.emplace_back(imp.loss, stream_state(imp.seed, k, 0));
    jitter_.emplace_back(imp.jitter_mean_ms * 1e6, stream_state(imp.seed, k, 1));
  }
  last_release_ns_.assign(pairs, std::numeric_limits<std::int64_t>::min());
  // Every buffer can be queued once per other port (a flood).
  heap_.reserve(total * static_cast<std::size_t>(std::max(1, ports() - 1)));
}

int DelayForwarder::on_frame(int in_port, std::span<const std::uint8_t> frame,
                             std::int64_t now_ns) {
  MERIDIAN_CHECK(in_port >= 0 && in_port < ports());
  ++stats_.frames_in;
  stats_.bytes_in += frame.size();
  if (frame.size() < prefix_bytes_ + kEthHeaderBytes || frame.size() > options_.large_slot_bytes) {
    ++stats_.dropped_malformed;
    return 0;
  }
  const std::uint8_t* eth = frame.data() + prefix_bytes_;
  const Mac dst = mac_at(eth);
  macs_.learn(mac_at(eth + 6), in_port);
  const int known = is_group(dst) ? -1 : macs_.lookup(dst);
  if (known == in_port) {  // both ends on one port: nothing to forward
    ++stats_.dropped_same_port;
    return 0;
  }
  if (ports() == 1) return 0;
  if (known >= 0 && loss_[pair(in_port, known)].lose()) {
    ++stats_.dropped_loss;
    return 0;
  }

  Pool& pool = frame.size() <= options_.small_slot_bytes ? small_ : large_;
  if (pool.free.empty()) {
    ++stats_.dropped_no_buffer;
    return 0;
  }
  const std::uint32_t index = pool.free.back();
  pool.free.pop_back();
  Buffer& b = buffers_[index];
  std::memcpy(b.data, frame.data(), frame.size());
  b.bytes = static_cast<std::uint32_t>(frame.size());
  b.refs = 0;

  int copies = 0;
  const auto queue_to = [&](int out) {
    ++b.refs;
    const std::size_t p = pair(in_port, out);
    const std::int64_t release_ns = std::max(
        now_ns + delays_.delay_ns(in_port, out) + jitter_[p].draw_ns(), last_release_ns_[p]);
    last_release_ns_[p] = release_ns;
    push(Copy{release_ns, seq_++, index, out});
    ++copies;
  };
  if (known >= 0) {
    queue_to(known);
  } else {
    ++stats_.flooded;
    for (int out = 0; out < ports(); ++out)
      if (out != in_port) queue_to(out);
  }
  stats_.copies_queued += static_cast<std::uint64_t>(copies);
  stats_.max_queued = std::max(stats_.max_queued, heap_.size());
  return copies;
}

void DelayForwarder::push(Copy c) {
  heap_.push_back(c);
  std::push_heap(heap_.begin(), heap_.end(), later);
}

DelayForwarder::Copy DelayForwarder::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), later);
  const Copy c = heap_.back();
  heap_.pop_back();
  return c;
}

void DelayForwarder::unref(std::uint32_t index) {
  Buffer& b = buffers_[index];
  MERIDIAN_CHECK_GT(b.refs, 0u);
  if (--b.refs == 0) (b.large ? large_ : small_).free.push_back(index);
}

}  // namespace meridian::netdelay
