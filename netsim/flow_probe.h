// The simulator's answer for one bulk transfer between two hosts on two sites: what `meridian
// sim-flow` prints and what the validation tables compare with measured goodput (issue 18).
// The same platform, TCP model and SimGrid settings as a scenario run, on a two-node world.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/events/json.h"
#include "netsim/tcp_model.h"

namespace meridian::netsim {

struct FlowProbe {
  double rtt_ms = 50;                 // between the two sites (the hosts' own links add none)
  double bandwidth_gbps = 1;          // each host's access link, both directions
  double loss = 0;                    // per packet on the path
  std::uint64_t bytes = 64u << 20;    // per message, split evenly over the flows
  int flows = 1;                      // parallel connections
  bool aggregate = true;              // the flows as one simulated flow (as a scenario's
                                      // aggregated local ranks), else one flow per connection
  int messages = 1;                   // sent one after another on the same connections
  double gap_s = 0;                   // idle time between two messages
  double duration_s = 0;              // > 0: send for this long instead (bytes, messages unused)
  double window_bytes = 4194304;      // per connection (socket buffer: network.tcp_gamma_bytes)
  bool crosstraffic = false;
  TcpSpec tcp;
};

struct FlowProbeResult {
  double seconds = 0;       // first byte sent to last byte received, idle gaps excluded
                            // (with duration_s: the duration)
  double bytes = 0;         // payload delivered
  double goodput_bps = 0;   // bits of payload per second of `seconds`
  double rate_bound_bps = 0;  // the model's rate bound (all flows), +inf when none
  JsonObject to_json() const;
};

// Runs the transfer in a SimGrid engine of its own (one at a time per process).
FlowProbeResult simulate_transfer(const FlowProbe& probe);

}  // namespace meridian::netsim
