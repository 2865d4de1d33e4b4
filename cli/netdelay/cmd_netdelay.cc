// `meridian netdelay`: the user-space delay element of scripts/netns/ (this kernel has no
// netem). An L2 forwarder over AF_PACKET sockets, one per port (the switch-side veth end of each
// node): frames are learnt, held for the pair's one-way delay and sent on. Rate limits stay with
// tbf on the veths. Linux only; needs CAP_NET_RAW in the namespace that owns the ports.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/netdelay/delay_forwarder.h"
#include "cli/options.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

using netdelay::DelayForwarder;
using netdelay::DelayMatrix;

// struct virtio_net_hdr (linux/virtio_net.h, a fixed ABI; the header does not compile as C++):
// flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
constexpr std::size_t kVnetHdrBytes = 10;
constexpr std::size_t kVnetGsoTypeOffset = 1;  // gso_type: VIRTIO_NET_HDR_GSO_NONE (0) or a kind
constexpr std::uint8_t kVnetGsoNone = 0;
constexpr int kBatch = 32;                        // frames per recvmmsg
constexpr std::size_t kFrameBytes = 65536 + 256;  // a GSO frame and its virtio_net_hdr
constexpr int kSocketBufferBytes = 32 << 20;

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop = true; }

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void fail_errno(const std::string& what) {
  throw Error(what + ": " + std::strerror(errno));
}

void set_int_option(int fd, int level, int name, int value, const std::string& what) {
  if (setsockopt(fd, level, name, &value, sizeof value) != 0) fail_errno(what);
}

// A raw socket on `ifname` that sees every frame arriving there (not the ones it sends), with the
// kernel's virtio_net_hdr in front so GSO frames and partial checksums survive the round trip.
// Owns a file descriptor (closed on every path out, errors included).
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

UniqueFd open_port(const std::string& ifname) {
  const unsigned index = if_nametoindex(ifname.c_str());
  if (index == 0) throw ConfigError("--port: no interface '" + ifname + "' in this namespace");
  UniqueFd owned(socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  const int fd = owned.get();
  if (fd < 0) fail_errno("AF_PACKET socket (needs CAP_NET_RAW)");
  set_int_option(fd, SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR on " + ifname);
  set_int_option(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING on " + ifname);
  // The send buffer holds what waits in the port's tbf queue: size it so tbf, not the socket,
  // decides what is dropped.
  set_int_option(fd, SOL_SOCKET, SO_RCVBUFFORCE, kSocketBufferBytes, "SO_RCVBUFFORCE");
  set_int_option(fd, SOL_SOCKET, SO_SNDBUFFORCE, kSocketBufferBytes, "SO_SNDBUFFORCE");
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail_errno("bind " + ifname);
  packet_mreq mr{};
  mr.mr_ifindex = static_cast<int>(index);
  mr.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
    fail_errno("promiscuous mode on " + ifname);
  return owned;
}

double parse_ms(const std::string& text) {
  const std::vector<double> v = netdelay::parse_delays_ms(text, "--delay-ms");
  if (v.size() != 1) throw ConfigError("--delay-ms: expected one number of ms, got '" + text + "'");
  return v[0];
}

struct Lateness {  // how late copies left against their release time (the forwarder's error)
  std::uint64_t count = 0;
  double sum_us = 0;
  double max_us = 0;
  void add(std::int64_t late_ns) {
    const double us = static_cast<double>(late_ns) / 1e3;
    ++count;
    sum_us += us;
    max_us = std::max(max_us, us);
  }
};

std::string stats_text(const DelayForwarder& f, const Lateness& late, std::uint64_t send_errors,
                       std::uint64_t truncated, std::uint64_t gso_frames) {
  const netdelay::ForwarderStats& s = f.stats();
  std::ostringstream os;
  os << "frames_in " << s.frames_in << "\nbytes_in " << s.bytes_in << "\ncopies_queued "
     << s.copies_queued << "\ncopies_released " << s.copies_released << "\nflooded " << s.flooded
     << "\ndropped_no_buffer " << s.dropped_no_buffer << "\ndropped_malformed "
     << s.dropped_malformed << "\ndropped_truncated " << truncated << "\ndropped_same_port "
     << s.dropped_same_port << "\ndropped_loss " << s.dropped_loss << "\ngso_frames " << gso_frames
     << "\nsend_errors " << send_errors << "\nmax_queued " << s.max_queued << "\nlate_mean_us "
     << (late.count ? late.sum_us / static_cast<double>(late.count) : 0.0) << "\nlate_max_us "
     << late.max_us << "\n";
  return os.str();
}

std::string impairment_text(const netdelay::Impairments& imp) {
  std::ostringstream os;
  const netdelay::LossSpec& l = imp.loss;
  if (l.kind == netdelay::LossSpec::Kind::kBernoulli) os << ", loss " << l.p;
  if (l.kind == netdelay::LossSpec::Kind::kGilbertElliott) {
    os << ", Gilbert-Elliott loss (p_gb " << l.ge.p_gb << ", p_bg " << l.ge.p_bg << ", loss_good "
       << l.ge.loss_good << ", loss_bad " << l.ge.loss_bad << ": mean " << l.ge.mean_loss_rate()
       << ")";
  }
  if (imp.jitter_mean_ms > 0) os << ", jitter mean " << imp.jitter_mean_ms << " ms";
  if (l.active() || imp.jitter_mean_ms > 0) os << ", seed " << imp.seed;
  return os.str();
}

// The command line of `meridian netdelay`.
struct NetdelayArgs {
  std::vector<std::string> ports;
  std::string delay_ms, access_ms, matrix_file, ready_file, stats_file;
  bool realtime = false;
  netdelay::Impairments impairments;
};

std::unique_ptr<Options> options(NetdelayArgs& c) {
  auto o = std::make_unique<Options>(
      "meridian netdelay",
      std::vector<std::string>{
          "--port IFNAME [--port IFNAME ...] (--delay-ms D | --access-delay-ms D0,D1,... | "
          "--matrix FILE) [--loss P | --loss-ge p_gb,p_bg,loss_good,loss_bad] [--jitter-ms J] "
          "[--seed S] [--ready-file F] [--stats-file F] [--realtime]"},
      "Forwards Ethernet frames between the given interfaces (port i = the i-th --port), each "
      "copy held for the one-way delay of its (in, out) port pair. Learns source MACs; "
      "broadcast, multicast and unknown destinations go to every other port. Runs until "
      "SIGINT/SIGTERM, then prints its counters (and writes them to --stats-file). Rate limits: "
      "tbf on the interfaces.");
  netdelay::Impairments& imp = c.impairments;
  o->texts("--port", "IFNAME", "an interface to forward between (repeatable)", c.ports)
      .text("--delay-ms", "D", "the one-way delay of every port pair", c.delay_ms)
      .text("--access-delay-ms", "D0,D1,...", "each port's access delay: D_i + D_j for a pair",
            c.access_ms)
      .text("--matrix", "FILE",
            "row i column j: the delay from port i to j (N lines of N "
            "delays in ms)",
            c.matrix_file)
      .value("--loss", "P", "each frame to a learnt unicast destination is lost with probability P",
             [&imp](const std::string&, const std::string& v) {
               if (imp.loss.active()) throw ConfigError("give one of --loss, --loss-ge");
               imp.loss = netdelay::parse_bernoulli_loss(v);
             })
      .value("--loss-ge", "p_gb,p_bg,loss_good,loss_bad",
             "Gilbert-Elliott bursts, one step per frame: lost with probability loss_good in "
             "state Good, loss_bad in Bad; then Good->Bad with p_gb, Bad->Good with p_bg (Bad "
             "lasts 1/p_bg frames on average; mean loss rate (p_bg*loss_good + p_gb*loss_bad) / "
             "(p_gb + p_bg)). netem's gemodel p r 1-h 1-k is p_gb,p_bg,1-k,1-h here",
             [&imp](const std::string&, const std::string& v) {
               if (imp.loss.active()) throw ConfigError("give one of --loss, --loss-ge");
               imp.loss = netdelay::parse_gilbert_elliott_loss(v);
             })
      .value("--jitter-ms", "J",
             "each copy held an extra delay drawn from an exponential distribution of mean J ms, "
             "but never released before its pair's previous copy (FIFO: no reordering)",
             [&imp](const std::string& n, const std::string& v) {
               imp.jitter_mean_ms = opt::number(n, v);
               if (!(imp.jitter_mean_ms >= 0 && imp.jitter_mean_ms <= 60'000))
                 throw ConfigError(n + ": expected a mean in [0, 60000] ms");
             })
      .integer("--seed", "S",
               "the impairments' seed (default 1): each ordered port pair its own random stream, "
               "so a seed and the same frames give the same drops and delays",
               imp.seed, 0, ~std::uint64_t{0})
      .text("--ready-file", "F", "written once every socket is bound", c.ready_file)
      .text("--stats-file", "F", "the counters, at the end", c.stats_file)
      .flag("--realtime",
            "run under SCHED_FIFO (priority 10) so that a loaded machine does not delay releases "
            "(the forwarder needs little CPU; a warning, not an error, when not permitted)",
            c.realtime)
      .notes(
          "A frame is the loss model's packet: with TSO/GSO on, one frame can be a 64 kB GSO "
          "frame of many TCP segments (counted as gso_frames; scripts/netns/netns.sh turns "
          "offloads off when --loss or --loss-ge is given). Flooded frames (ARP, unknown "
          "destinations) are never lost.");
  return o;
}

NetdelayArgs parse_netdelay_args(const std::vector<std::string>& args) {
  NetdelayArgs c;
  const auto o = options(c);
  o->parse(args);
  if (c.ports.empty()) throw ConfigError("no --port given\n" + o->usage());
  const int given = !c.delay_ms.empty() + !c.access_ms.empty() + !c.matrix_file.empty();
  if (given != 1)
    throw ConfigError("give exactly one of --delay-ms, --access-delay-ms, --matrix\n" + o->usage());
  return c;
}

// The one-way delays between the ports, from whichever of the three options was given.
DelayMatrix delays_of(const NetdelayArgs& c) {
  const int n = static_cast<int>(c.ports.size());
  DelayMatrix delays = DelayMatrix::uniform(1, 0);
  if (!c.delay_ms.empty()) {
    delays = DelayMatrix::uniform(n, parse_ms(c.delay_ms));
  } else if (!c.access_ms.empty()) {
    delays = DelayMatrix::from_access_delays(
        netdelay::parse_delays_ms(c.access_ms, "--access-delay-ms"));
  } else {
    std::ifstream in(c.matrix_file);
    if (!in) throw ConfigError("--matrix: cannot read '" + c.matrix_file + "'");
    delays = DelayMatrix::parse(
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
        c.matrix_file);
  }
  if (delays.ports() != n) {
    throw ConfigError("" + std::to_string(n) + " ports but delays for " +
                      std::to_string(delays.ports()));
  }
  return delays;
}

// Stop signals are blocked except inside ppoll, so a signal cannot slip in between the check of
// g_stop and the wait: returns the mask ppoll waits with.
sigset_t block_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t stop_signals, wait_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop_signals, &wait_mask);
  sigdelset(&wait_mask, SIGINT);
  sigdelset(&wait_mask, SIGTERM);
  return wait_mask;
}

// What the loop counts besides the forwarder's own statistics.
struct LoopCounters {
  Lateness late;
  std::uint64_t send_errors = 0, truncated = 0, gso_frames = 0;
};

// Reads every port's frames in batches and releases the forwarder's copies when due, until a
// stop signal.
void forward_until_stopped(std::vector<pollfd>& fds, const std::vector<std::string>& ports,
                           DelayForwarder& forwarder, const sigset_t& wait_mask,
                           LoopCounters& counters) {
  const int n = static_cast<int>(fds.size());
  std::vector<std::uint8_t> scratch(kBatch * kFrameBytes);
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> msgs(kBatch);
  for (int k = 0; k < kBatch; ++k) iov[k] = iovec{scratch.data() + k * kFrameBytes, kFrameBytes};
  const auto send = [&](int out, std::span<const std::uint8_t> frame, std::int64_t release_ns) {
    if (::send(fds[out].fd, frame.data(), frame.size(), MSG_DONTWAIT) < 0) ++counters.send_errors;
    counters.late.add(monotonic_ns() - release_ns);
  };
  while (!g_stop) {
    std::int64_t now = monotonic_ns();
    forwarder.release_due(now, send);
    const std::int64_t next = forwarder.next_release_ns();
    timespec timeout{};
    timespec* timeout_ptr = nullptr;
    if (next != netdelay::kNever) {
      const std::int64_t wait_ns = std::max<std::int64_t>(0, next - monotonic_ns());
      timeout.tv_sec = static_cast<time_t>(wait_ns / 1'000'000'000);
      timeout.tv_nsec = static_cast<long>(wait_ns % 1'000'000'000);
      timeout_ptr = &timeout;
    }
    const int ready = ppoll(fds.data(), fds.size(), timeout_ptr, &wait_mask);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail_errno("ppoll");
    }
    if (ready == 0) continue;
    for (int port = 0; port < n; ++port) {
      if ((fds[port].revents & POLLIN) == 0) continue;
      while (true) {
        for (int k = 0; k < kBatch; ++k) {
          msgs[k] = mmsghdr{};
          msgs[k].msg_hdr.msg_iov = &iov[k];
          msgs[k].msg_hdr.msg_iovlen = 1;
        }
        const int got = recvmmsg(fds[port].fd, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
        if (got < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          fail_errno("recvmmsg on " + ports[port]);
        }
        now = monotonic_ns();
        for (int k = 0; k < got; ++k) {
          if (msgs[k].msg_hdr.msg_flags & MSG_TRUNC) {
            ++counters.truncated;
            continue;
          }
          if (scratch[k * kFrameBytes + kVnetGsoTypeOffset] != kVnetGsoNone) ++counters.gso_frames;
          forwarder.on_frame(port, {scratch.data() + k * kFrameBytes, msgs[k].msg_len}, now);
        }
        // Copies due while we read (zero delay, or a long batch) leave now, not after the poll.
        forwarder.release_due(now, send);
        if (got < kBatch) break;
      }
    }
  }
}

int run_netdelay(const std::vector<std::string>& args) {
  const NetdelayArgs c = parse_netdelay_args(args);
  DelayMatrix delays = delays_of(c);
  const int n = static_cast<int>(c.ports.size());
  std::vector<UniqueFd> sockets;
  std::vector<pollfd> fds;
  for (const std::string& p : c.ports) {
    sockets.push_back(open_port(p));
    fds.push_back(pollfd{sockets.back().get(), POLLIN, 0});
  }
  netdelay::ForwarderOptions options;
  options.impairments = c.impairments;
  DelayForwarder forwarder(std::move(delays), kVnetHdrBytes, options);
  const sigset_t wait_mask = block_stop_signals();

  if (c.realtime) {
    sched_param sp{};
    sp.sched_priority = 10;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
      std::cerr << "netdelay: --realtime: " << std::strerror(errno) << " (going on without)\n";
  }
  if (!c.ready_file.empty()) {
    std::ofstream(c.ready_file) << "ready\n";
  }
  std::cerr << "netdelay: forwarding between " << n << " ports" << impairment_text(c.impairments)
            << std::endl;

  LoopCounters counters;
  forward_until_stopped(fds, c.ports, forwarder, wait_mask, counters);
  sockets.clear();
  const std::string text = stats_text(forwarder, counters.late, counters.send_errors,
                                      counters.truncated, counters.gso_frames);
  std::cerr << "netdelay: stopped\n" << text;
  if (c.impairments.loss.active() && counters.gso_frames > 0) {
    std::cerr << "netdelay: warning: " << counters.gso_frames
              << " GSO frames crossed under --loss: losing one drops several TCP segments at "
                 "once (turn TSO/GSO/GRO off on the ports' veths)\n";
  }
  if (!c.stats_file.empty()) std::ofstream(c.stats_file) << text;
  return kExitOk;
}

MERIDIAN_COMMAND("netdelay", "forward frames between interfaces with a per-pair one-way delay",
                 help_of<NetdelayArgs>(options), run_netdelay);

}  // namespace
}  // namespace meridian::cli
