// The logic of `meridian netdelay`, the user-space delay element of scripts/netns/: MAC learning,
// a fixed pool of frame buffers and a queue keyed by release time (arrival + the one-way delay of
// the (in port, out port) pair). No sockets and no clock here (cmd_netdelay.cc does those), so
// it is unit-tested as pure code. Not a general bridge: no STP, no VLANs, no MAC aging.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/netdelay/impairment.h"

namespace meridian::netdelay {

inline constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

// Delays in ms separated by commas or blanks ("5,10 20"); a bad field is a ConfigError
// "<what>: expected a delay in ms, got '<field>'".
std::vector<double> parse_delays_ms(std::string text, const std::string& what);

// One-way delay (ns) for every ordered (from, to) port pair; the diagonal is never used.
class DelayMatrix {
 public:
  // Every pair `one_way_ms` apart.
  static DelayMatrix uniform(int ports, double one_way_ms);
  // Node i sits `access_ms[i]` from the switch: delay(i, j) = access_ms[i] + access_ms[j].
  static DelayMatrix from_access_delays(std::span<const double> access_ms);
  // N lines of N one-way delays in ms, separated by blanks or commas; '#' starts a comment.
  // `source` names the input in errors (ConfigError naming line, column and the problem).
  static DelayMatrix parse(const std::string& text, const std::string& source);

  int ports() const { return ports_; }
  std::int64_t delay_ns(int from, int to) const {
    return delay_ns_[static_cast<std::size_t>(from * ports_ + to)];
  }

 private:
  DelayMatrix(int ports, std::vector<std::int64_t> delay_ns);
  int ports_ = 0;
  std::vector<std::int64_t> delay_ns_;  // row-major, ports_ x ports_
};

using Mac = std::array<std::uint8_t, 6>;

// Source MAC -> port, learnt from every frame (a host that moves is re-learnt on its next frame).
// Open addressing over a fixed table: no allocation after construction; when full, new
// addresses are not learnt (their frames are flooded, which is still correct).
class MacTable {
 public:
  explicit MacTable(std::size_t capacity = 1024);
  // Ignores group (multicast/broadcast) addresses, which are never a frame's source.
  void learn(const Mac& mac, int port);
  // The port `mac` was last seen on, or -1.
  int lookup(const Mac& mac) const;
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    std::uint64_t key = 0;  // the MAC in the low 48 bits, bit 63 set when used
    int port = -1;
  };
  std::size_t probe_start(std::uint64_t key) const;
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

// Random loss and jitter, one independent stream per ordered port pair (impairment.h). Loss
// applies to the frames of a learnt unicast destination, one loss step per frame: a frame is
// the packet of the loss model, so the ports must carry MTU frames, not GSO ones, for it to be
// per-packet loss (scripts/netns/netns.sh turns TSO/GSO/GRO off when loss is configured). Frames
// that are flooded (ARP, neighbour discovery, unknown destinations) are never lost. Jitter
// applies to every copy.
struct Impairments {
  LossSpec loss;
  double jitter_mean_ms = 0;
  std::uint64_t seed = 1;
};

struct ForwarderOptions {
  std::size_t small_slots = 16384;  // frames up to small_slot_bytes (one MTU frame + header)
  std::size_t small_slot_bytes = 2048;
  std::size_t large_slots = 512;  // larger (GSO) frames up to large_slot_bytes
  std::size_t large_slot_bytes = 65536 + 256;
  Impairments impairments;
};

struct ForwarderStats {
  std::uint64_t frames_in = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t copies_queued = 0;  // one per destination port
  std::uint64_t copies_released = 0;
  std::uint64_t flooded = 0;  // frames sent to every other port (group or unknown dst)
  std::uint64_t dropped_no_buffer = 0;
  std::uint64_t dropped_malformed = 0;  // shorter than an Ethernet header, or larger than a slot
  std::uint64_t dropped_same_port = 0;  // destination learnt on the port it came from
  std::uint64_t dropped_loss = 0;       // lost by the loss process
  std::size_t max_queued = 0;
};

// Frames in, delayed copies out. A frame is `prefix_bytes` opaque bytes (e.g. the
// virtio_net_hdr of a PACKET_VNET_HDR socket), then the Ethernet header. Copies of one ordered
// port pair leave in arrival order (a copy leaves at arrival + the pair's delay + its jitter draw,
// or when the pair's previous copy left if that is later; ties broken by arrival sequence).
class DelayForwarder {
 public:
  DelayForwarder(DelayMatrix delays, std::size_t prefix_bytes, ForwarderOptions options = {});

  int ports() const { return delays_.ports(); }

  // A frame arrived on `in_port` at `now_ns`: learns its source, queues one copy per destination
  // port (the learnt port, else every port but `in_port`), unless the loss process drops it.
  // Returns the number of copies queued.
  int on_frame(int in_port, std::span<const std::uint8_t> frame, std::int64_t now_ns);

  // Release time of the earliest queued copy, kNever when none.
  std::int64_t next_release_ns() const { return heap_.empty() ? kNever : heap_.front().release_ns; }

  // Calls send(out_port, frame bytes, release_ns) for every copy due at `now_ns`, earliest first;
  // returns how many. The bytes are valid only during the call.
  template <class Send>
  std::size_t release_due(std::int64_t now_ns, Send&& send);

  const ForwarderStats& stats() const { return stats_; }
  std::size_t queued() const { return heap_.size(); }
  std::size_t free_buffers() const { return small_.free.size() + large_.free.size(); }

 private:
  struct Copy {
    std::int64_t release_ns;
    std::uint64_t seq;
    std::uint32_t buffer;  // index into buffers_
    int out_port;
  };
  struct Buffer {
    std::uint8_t* data = nullptr;
    std::uint32_t bytes = 0;
    std::uint32_t refs = 0;
    bool large = false;
  };
  struct Pool {
    std::unique_ptr<std::uint8_t[]> storage;  // not zeroed: pages are touched only when used
    std::vector<std::uint32_t> free;          // buffer indices
  };
  static bool later(const Copy& a, const Copy& b) {
    return a.release_ns != b.release_ns ? a.release_ns > b.release_ns : a.seq > b.seq;
  }
  void push(Copy c);
  Copy pop();
  void unref(std::uint32_t buffer);
  std::size_t pair(int from, int to) const { return static_cast<std::size_t>(from * ports() + to); }

  DelayMatrix delays_;
  std::size_t prefix_bytes_;
  ForwarderOptions options_;
  MacTable macs_;
  std::vector<Buffer> buffers_;  // small buffers first, then large ones
  Pool small_;
  Pool large_;
  std::vector<Copy> heap_;                     // min-heap on (release_ns, seq) through `later`
  std::vector<LossProcess> loss_;              // per ordered port pair
  std::vector<Jitter> jitter_;                 // per ordered port pair
  std::vector<std::int64_t> last_release_ns_;  // per ordered port pair: FIFO under jitter
  std::uint64_t seq_ = 0;
  ForwarderStats stats_;
};

template <class Send>
std::size_t DelayForwarder::release_due(std::int64_t now_ns, Send&& send) {
  std::size_t n = 0;
  while (!heap_.empty() && heap_.front().release_ns <= now_ns) {
    const Copy c = pop();
    const Buffer& b = buffers_[c.buffer];
    send(c.out_port, std::span<const std::uint8_t>(b.data, b.bytes), c.release_ns);
    unref(c.buffer);
    ++n;
  }
  stats_.copies_released += n;
  return n;
}

}  // namespace meridian::netdelay
