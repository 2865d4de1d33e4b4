// ns3_ring_bucket: one bucket of a ring all-reduce simulated packet by packet with ns-3 (3.37),
// the reference that results/fidelity/ns3/ sets against `meridian sim` (issue 18, validation (b)).
// It is deliberately not Meridian: no engine, no SimGrid, only ns-3's own TCP over a topology of
// sites; it shares nothing with netsim/ but the experiment it describes.
//
// The experiment: N nodes in K sites (N/K per site, ring in site order, so the ring mixes LAN hops
// inside a site with WAN hops between sites). Every node holds one persistent TCP connection to its
// ring successor, opened before the bucket starts. The bucket is 2(N-1) steps (reduce-scatter, then
// all-gather); in each step every node sends one chunk of S/N bytes to its successor, and a node
// starts step k+1 as soon as it has received step k's chunk from its predecessor. A node is done
// when it has received its 2(N-1)-th chunk. Printed: each node's completion time from the common
// start, as one JSON object on stdout.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/options.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"
#include "ns3/version-defines.h"

namespace {

using meridian::ConfigError;
using nlohmann::json;

constexpr char kAbout[] =
    "One bucket of a ring all-reduce (reduce-scatter + all-gather, 2(N-1) steps of S/N bytes per "
    "node) over ns-3 3.37's packet-level TCP. Prints one JSON object: each node's completion time "
    "(seconds from the common start), the bucket time (the last node's), loss and recovery "
    "counts, and every setting used.\n\n"
    "Topology: --nodes N hosts in --sites K sites (N/K per site; the ring visits sites in "
    "order). Each host has an access link of --access-mbit to its site's router; routers are "
    "joined pairwise by links of --wan-mbit. One-way delays are set so that host-to-host round "
    "trips are --lan-rtt-ms within a site and --rtt-ms between sites (without serialization or "
    "queueing). --loss P drops each packet on an inter-site link with probability P (both "
    "directions; RateErrorModel, per packet, uniform). Queues never overflow (device FIFOs of "
    "--queue-packets, no queue discipline), so the only losses are the random ones.";

struct Settings {
  int nodes = 4;
  int sites = 0;  // 0: nodes / 2
  std::uint64_t bucket_bytes = 16777216;
  std::uint64_t header_bytes = 0;
  double access_mbit = 1000;
  double wan_mbit = 10000;
  double rtt_ms = 100;
  double lan_rtt_ms = 1;
  double loss = 0;
  std::string cc = "cubic";
  std::uint64_t seed = 1;
  std::uint64_t mss_bytes = 1448;
  std::uint64_t buffer_bytes = 4194304;
  std::uint64_t initial_window = 10;
  std::uint64_t delack_count = 2;
  double delack_timeout_ms = 40;
  double min_rto_ms = 200;
  bool hystart = true;
  std::string recovery = "prr";
  std::uint64_t queue_packets = 10000;
  double stop_s = 3600;
  std::vector<double> start_s;  // per node, after the origin; empty: all at the origin
};

std::unique_ptr<meridian::cli::Options> options(Settings& o) {
  namespace opt = meridian::cli::opt;
  auto d = std::make_unique<meridian::cli::Options>("ns3_ring_bucket",
                                                    std::vector<std::string>{"[options]"}, kAbout);
  const auto count = [](std::uint64_t& into) {
    return
        [&into](const std::string& n, const std::string& v) { into = opt::unsigned_integer(n, v); };
  };
  const auto nodes = [](int& into) {
    return [&into](const std::string& n, const std::string& v) {
      into = static_cast<int>(opt::integer_in(n, v, 0, 4096));
    };
  };
  d->value("--nodes", "N", "ring size, >= 2 (default 4)", nodes(o.nodes))
      .value("--sites", "K", "sites, dividing N (default N/2: two nodes per site)", nodes(o.sites))
      .value("--bucket-bytes", "S",
             "bucket size; each step's chunk is ceil(S/N) (default 16777216)",
             count(o.bucket_bytes))
      .value("--header-bytes", "H", "bytes added to every chunk (a message header; default 0)",
             count(o.header_bytes))
      .number("--access-mbit", "B", "each host's access link (default 1000)", o.access_mbit)
      .number("--wan-mbit", "W", "each inter-site link (default 10000: not the bottleneck)",
              o.wan_mbit)
      .number("--rtt-ms", "R", "host-to-host round trip between sites (default 100)", o.rtt_ms)
      .number("--lan-rtt-ms", "L", "host-to-host round trip within a site (default 1)",
              o.lan_rtt_ms)
      .number("--loss", "P", "per-packet loss on inter-site links, in [0, 0.5) (default 0)", o.loss)
      .text("--cc", "cubic|reno",
            "ns3::TcpCubic, or ns3::TcpLinuxReno (Reno with Linux's window arithmetic) (default "
            "cubic)",
            o.cc)
      .value("--seed", "N", "ns-3 run number (RngSeedManager::SetRun), >= 1 (default 1)",
             count(o.seed))
      .value("--mss-bytes", "M",
             "TCP segment payload (default 1448: 1500 MTU - 40 IP/TCP - 12 timestamps)",
             count(o.mss_bytes))
      .value("--buffer-bytes", "W", "SndBufSize and RcvBufSize of every socket (default 4194304)",
             count(o.buffer_bytes))
      .value("--initial-window", "I", "initial congestion window in segments (default 10)",
             count(o.initial_window))
      .value("--delack-count", "D", "segments per delayed ACK (default 2, as Linux)",
             count(o.delack_count))
      .number("--delack-timeout-ms", "T", "delayed-ACK timer (default 40: Linux's TCP_ATO_MIN)",
              o.delack_timeout_ms)
      .number("--min-rto-ms", "T",
              "minimum retransmission timeout (default 200: Linux's TCP_RTO_MIN)", o.min_rto_ms)
      .value("--hystart", "true|false", "TcpCubic's HyStart (default true, as Linux)",
             [&o](const std::string& n, const std::string& v) {
               if (v != "true" && v != "false")
                 throw ConfigError(n + ": expected true or false, got '" + v + "'");
               o.hystart = v == "true";
             })
      .text("--recovery", "prr|classic",
            "loss recovery: ns3::TcpPrrRecovery (default, as Linux) or ns3::TcpClassicRecovery "
            "(RFC 6582 NewReno)",
            o.recovery)
      .value("--queue-packets", "Q", "every device's FIFO (default 10000)", count(o.queue_packets))
      .value(
          "--start-s", "T0,T1,...",
          "each node's start, in seconds after the last connection is up (default all 0). "
          "Times printed count from that origin. Used to replay another simulator's per-node "
          "starts (its control plane), so that only the data plane differs.",
          [&o](const std::string& n, const std::string& v) { o.start_s = opt::number_list(n, v); })
      .number("--stop-s", "T",
              "give up (exit 3) if the bucket is not done by T simulated s (default 3600)",
              o.stop_s);
  return d;
}

// Returns false for --help. Bad arguments are ConfigErrors naming the option.
bool parse_args(const std::vector<std::string>& raw, Settings& o) {
  if (meridian::cli::opt::asks_for_help(raw)) return false;
  options(o)->parse(raw);
  if (o.sites == 0) o.sites = o.nodes / 2;
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw meridian::ConfigError(what);
  };
  require(o.nodes >= 2, "--nodes: a ring needs at least 2 nodes, got " + std::to_string(o.nodes));
  require(o.sites >= 1 && o.nodes % o.sites == 0, "--sites: must divide --nodes (" +
                                                      std::to_string(o.nodes) + "), got " +
                                                      std::to_string(o.sites));
  require(o.sites <= 128, "--sites: at most 128 (the inter-site links' /30 networks fill 10.2/16)");
  require(o.bucket_bytes >= std::uint64_t(o.nodes), "--bucket-bytes: at least one byte per node");
  require(o.access_mbit > 0, "--access-mbit: must be > 0");
  require(o.wan_mbit > 0, "--wan-mbit: must be > 0");
  require(o.lan_rtt_ms > 0, "--lan-rtt-ms: must be > 0");
  // A WAN round trip crosses two access links each way, which carry half the LAN round trip.
  require(o.sites == 1 || o.rtt_ms > o.lan_rtt_ms,
          "--rtt-ms: must exceed --lan-rtt-ms (the access links' share of the path)");
  require(o.loss >= 0 && o.loss < 0.5, "--loss: expected a probability in [0, 0.5)");
  require(o.cc == "cubic" || o.cc == "reno", "--cc: expected cubic or reno, got '" + o.cc + "'");
  require(o.recovery == "prr" || o.recovery == "classic",
          "--recovery: expected prr or classic, got '" + o.recovery + "'");
  require(o.seed >= 1, "--seed: ns-3 run numbers start at 1");
  require(o.mss_bytes >= 100 && o.mss_bytes <= 1460, "--mss-bytes: expected 100..1460");
  require(o.buffer_bytes >= o.mss_bytes, "--buffer-bytes: must hold at least one segment");
  require(o.initial_window >= 1, "--initial-window: at least 1 segment");
  require(o.delack_count >= 1, "--delack-count: at least 1");
  require(o.delack_timeout_ms > 0, "--delack-timeout-ms: must be > 0");
  require(o.min_rto_ms > 0, "--min-rto-ms: must be > 0");
  require(o.queue_packets >= 1, "--queue-packets: at least 1");
  require(o.stop_s > 0, "--stop-s: must be > 0");
  require(o.start_s.empty() || int(o.start_s.size()) == o.nodes,
          "--start-s: expected one start per node (" + std::to_string(o.nodes) + "), got " +
              std::to_string(o.start_s.size()));
  for (double t : o.start_s) require(t >= 0, "--start-s: starts must be >= 0");
  return true;
}

// One host's side of the ring: the connection to its successor (tx) and the one accepted from its
// predecessor (rx). The ring's only rule lives in update(): once the node has started, it may have
// sent step k+1's chunk as soon as it has received step k's.
struct RingNode {
  int rank = 0;
  ns3::Ptr<ns3::Socket> tx, listener, rx;
  std::uint64_t chunk_bytes = 0;
  int steps = 0;  // 2(N-1)
  bool started = false;
  std::uint64_t released = 0;  // bytes the ring lets this node send so far
  std::uint64_t written = 0;   // bytes handed to the tx socket
  std::uint64_t received = 0;
  std::vector<double> step_received_s;    // from the origin (the earliest start)
  double origin_s = 0;                    // simulated time of the origin
  double done_s = -1;                     // from the origin
  int fast_recoveries = 0, timeouts = 0;  // entries into CA_RECOVERY / CA_LOSS on tx

  // Fills the send buffer with released bytes; ns-3 calls it again when space frees up.
  void fill() {
    while (written < released) {
      const std::uint32_t room = tx->GetTxAvailable();
      if (room == 0) return;
      const std::uint64_t n = std::min<std::uint64_t>({released - written, room, 1u << 16});
      const int sent = tx->Send(ns3::Create<ns3::Packet>(static_cast<std::uint32_t>(n)));
      if (sent <= 0) return;  // buffer full after all; the send callback resumes
      written += static_cast<std::uint64_t>(sent);
    }
  }

  void update() {
    const double now_s = ns3::Simulator::Now().GetSeconds() - origin_s;
    while (int(step_received_s.size()) < steps &&
           received >= chunk_bytes * (step_received_s.size() + 1))
      step_received_s.push_back(now_s);
    if (int(step_received_s.size()) == steps && done_s < 0) done_s = now_s;
    if (!started) return;
    const std::uint64_t may_send =
        chunk_bytes * std::min<std::uint64_t>(steps, step_received_s.size() + 1);
    if (may_send > released) {
      released = may_send;
      fill();
    }
  }

  void start() {
    started = true;
    update();
  }

  void on_receive(ns3::Ptr<ns3::Socket> s) {
    while (ns3::Ptr<ns3::Packet> p = s->Recv()) received += p->GetSize();
    update();
  }
};

int run(const Settings& o) {
  using namespace ns3;
  const int n = o.nodes, k = o.sites, per_site = n / k;
  const std::uint64_t chunk = (o.bucket_bytes + n - 1) / n + o.header_bytes;
  const int steps = 2 * (n - 1);

  RngSeedManager::SetSeed(1);
  RngSeedManager::SetRun(o.seed);

  // TCP as Linux runs it, where ns-3's defaults differ (ns-3: MinRto 1 s, DelAckTimeout 200 ms,
  // SegmentSize 536, 128 KiB buffers, classic recovery, ConnTimeout 3 s).
  Config::SetDefault(
      "ns3::TcpL4Protocol::SocketType",
      TypeIdValue(o.cc == "cubic" ? TcpCubic::GetTypeId() : TcpLinuxReno::GetTypeId()));
  Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",  // Linux: PRR (RFC 6937)
                     TypeIdValue(o.recovery == "prr" ? TcpPrrRecovery::GetTypeId()
                                                     : TcpClassicRecovery::GetTypeId()));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(o.mss_bytes));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(o.initial_window));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(o.buffer_bytes));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(o.buffer_bytes));
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(o.delack_count));
  Config::SetDefault("ns3::TcpSocket::DelAckTimeout",
                     TimeValue(Seconds(o.delack_timeout_ms * 1e-3)));
  Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1)));  // TCP_TIMEOUT_INIT
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(o.min_rto_ms * 1e-3)));
  Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
  Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(o.hystart));

  NodeContainer hosts, routers;
  hosts.Create(n);
  routers.Create(k);
  InternetStackHelper stack;
  stack.Install(hosts);
  stack.Install(routers);

  // Access links carry a quarter of the LAN round trip each way (host-router-host, there and
  // back); an inter-site link carries the rest of the WAN round trip's half.
  const double access_delay_s = o.lan_rtt_ms * 1e-3 / 4;
  const double wan_delay_s = (o.rtt_ms - o.lan_rtt_ms) * 1e-3 / 2;
  const std::string queue = std::to_string(o.queue_packets) + "p";
  TrafficControlHelper no_qdisc;
  auto link = [&](Ptr<Node> a, Ptr<Node> b, double mbit, double delay_s, Ipv4AddressHelper& ip) {
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(std::uint64_t(mbit * 1e6))));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay_s)));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize(queue)));
    NetDeviceContainer d = p2p.Install(a, b);
    Ipv4InterfaceContainer ifs = ip.Assign(d);
    // Assign() installs ns-3's default queue discipline (FqCoDel), whose drops at the sender's own
    // interface would be congestion signals that Linux's TCP small queues avoid; a big FIFO only.
    no_qdisc.Uninstall(d);
    ip.NewNetwork();
    return std::make_pair(d, ifs);
  };

  Ipv4AddressHelper access_ip("10.1.0.0", "255.255.255.252");
  std::vector<Ipv4Address> host_addr(n);
  for (int i = 0; i < n; ++i) {
    auto [d, ifs] =
        link(hosts.Get(i), routers.Get(i / per_site), o.access_mbit, access_delay_s, access_ip);
    host_addr[i] = ifs.GetAddress(0);
  }
  // One error model per receiving device, so both directions of a path lose independently (data
  // one way, ACKs the other, and in a ring of two sites data both ways).
  std::vector<Ptr<NetDevice>> wan_devices;
  Ipv4AddressHelper wan_ip("10.2.0.0", "255.255.255.252");
  std::int64_t stream = 1000;
  for (int a = 0; a < k; ++a)
    for (int b = a + 1; b < k; ++b) {
      auto [d, ifs] = link(routers.Get(a), routers.Get(b), o.wan_mbit, wan_delay_s, wan_ip);
      for (std::uint32_t j = 0; j < d.GetN(); ++j) {
        auto em = CreateObject<RateErrorModel>();
        em->SetAttribute("ErrorUnit", EnumValue(RateErrorModel::ERROR_UNIT_PACKET));
        em->SetAttribute("ErrorRate", DoubleValue(o.loss));
        stream += em->AssignStreams(stream);
        d.Get(j)->SetAttribute("ReceiveErrorModel", PointerValue(em));
        wan_devices.push_back(d.Get(j));
      }
    }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();

  std::uint64_t wan_drops = 0;
  for (auto& dev : wan_devices)
    dev->TraceConnectWithoutContext(
        "PhyRxDrop", MakeBoundCallback(
                         +[](std::uint64_t* c, Ptr<const Packet>) { ++*c; }, &wan_drops));

  constexpr std::uint16_t kPort = 5000;
  std::vector<RingNode> ring(n);
  int connected = 0;
  double origin_s = -1;
  auto start_bucket = [&] {
    origin_s = Simulator::Now().GetSeconds();
    for (int i = 0; i < n; ++i) {
      ring[i].origin_s = origin_s;
      Simulator::Schedule(Seconds(o.start_s.empty() ? 0.0 : o.start_s[i]), &RingNode::start,
                          &ring[i]);
    }
  };
  for (int i = 0; i < n; ++i) {
    RingNode& r = ring[i];
    r.rank = i;
    r.chunk_bytes = chunk;
    r.steps = steps;
    r.listener = Socket::CreateSocket(hosts.Get(i), TcpSocketFactory::GetTypeId());
    r.listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
    r.listener->Listen();
    r.listener->SetAcceptCallback(
        MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
        MakeBoundCallback(
            +[](RingNode* self, Ptr<Socket> s, const Address&) {
              self->rx = s;
              s->SetRecvCallback(MakeCallback(&RingNode::on_receive, self));
            },
            &r));
  }
  for (int i = 0; i < n; ++i) {
    RingNode& r = ring[i];
    r.tx = Socket::CreateSocket(hosts.Get(i), TcpSocketFactory::GetTypeId());
    r.tx->Bind();
    r.tx->TraceConnectWithoutContext(
        "CongState",
        MakeBoundCallback(
            +[](RingNode* self, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t to) {
              if (to == TcpSocketState::CA_RECOVERY) ++self->fast_recoveries;
              if (to == TcpSocketState::CA_LOSS) ++self->timeouts;
            },
            &r));
    r.tx->SetSendCallback(MakeBoundCallback(
        +[](RingNode* self, Ptr<Socket>, std::uint32_t) { self->fill(); }, &r));
  }
  // The bucket starts once every connection is up, so no step pays a handshake (Meridian's
  // connections are likewise persistent). Callbacks hold their state in these std::functions.
  std::function<void()> on_connected = [&] {
    if (++connected == n) start_bucket();
  };
  std::function<void()> on_failed = [] {
    throw std::runtime_error("a ring connection could not be established");
  };
  for (int i = 0; i < n; ++i) {
    ring[i].tx->SetConnectCallback(
        MakeBoundCallback(
            +[](std::function<void()>* f, Ptr<Socket>) { (*f)(); }, &on_connected),
        MakeBoundCallback(
            +[](std::function<void()>* f, Ptr<Socket>) { (*f)(); }, &on_failed));
    ring[i].tx->Connect(InetSocketAddress(host_addr[(i + 1) % n], kPort));
  }

  Simulator::Stop(Seconds(o.stop_s));
  Simulator::Run();

  json out;
  json nodes = json::array();
  double bucket_s = 0;
  bool complete = true;
  int recoveries = 0, timeouts = 0;
  for (const auto& r : ring) {
    complete = complete && r.done_s >= 0;
    bucket_s = std::max(bucket_s, r.done_s);
    recoveries += r.fast_recoveries;
    timeouts += r.timeouts;
    nodes.push_back({{"rank", r.rank},
                     {"site", r.rank / per_site},
                     {"done_s", r.done_s >= 0 ? json(r.done_s) : json(nullptr)},
                     {"step_received_s", r.step_received_s},
                     {"fast_recoveries", r.fast_recoveries},
                     {"timeouts", r.timeouts}});
  }
  out["bucket_s"] = complete ? json(bucket_s) : json(nullptr);
  out["complete"] = complete;
  out["origin_s"] = origin_s;  // simulated time when the last connection came up
  out["chunk_bytes"] = chunk;
  out["steps"] = steps;
  out["wan_packets_lost"] = wan_drops;
  out["fast_recoveries"] = recoveries;
  out["timeouts"] = timeouts;
  out["nodes"] = nodes;
  out["config"] = {
      {"simulator",
       "ns-3 " + std::to_string(NS3_VERSION_MAJOR) + "." + std::to_string(NS3_VERSION_MINOR)},
      {"nodes", o.nodes},
      {"sites", o.sites},
      {"bucket_bytes", o.bucket_bytes},
      {"header_bytes", o.header_bytes},
      {"access_mbit", o.access_mbit},
      {"wan_mbit", o.wan_mbit},
      {"rtt_ms", o.rtt_ms},
      {"lan_rtt_ms", o.lan_rtt_ms},
      {"loss", o.loss},
      {"loss_model", "RateErrorModel, ERROR_UNIT_PACKET, on both devices of every inter-site link"},
      {"cc", o.cc == "cubic" ? "ns3::TcpCubic" : "ns3::TcpLinuxReno"},
      {"hystart", o.hystart},
      {"recovery", o.recovery == "prr" ? "ns3::TcpPrrRecovery" : "ns3::TcpClassicRecovery"},
      {"seed", o.seed},
      {"mss_bytes", o.mss_bytes},
      {"buffer_bytes", o.buffer_bytes},
      {"initial_window_segments", o.initial_window},
      {"delack_count", o.delack_count},
      {"delack_timeout_ms", o.delack_timeout_ms},
      {"min_rto_ms", o.min_rto_ms},
      {"sack", true},
      {"timestamps", true},
      {"queue_packets", o.queue_packets},
      {"queue_discipline", "none (device DropTail FIFO only)"},
      {"start_s", o.start_s}};
  std::cout << out.dump() << "\n";
  Simulator::Destroy();
  return complete ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Settings o;
  try {
    if (!parse_args(std::vector<std::string>(argv + 1, argv + argc), o)) {
      Settings defaults;
      std::cout << options(defaults)->help();
      return 0;
    }
  } catch (const meridian::ConfigError& e) {
    std::cerr << "ns3_ring_bucket: " << e.what() << "\n(ns3_ring_bucket --help for usage)\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "ns3_ring_bucket: " << e.what() << "\n";
    return 1;
  }
}
