// A synthetic but plausible events.jsonl (test support): a few nodes running DiLoCo outer steps
// with a joiner that recovers, a node that fails during an all-reduce (retry), a second joiner
// and a graceful leave. Written with the engine's own event writer. Not a simulator: the times
// come from a fixed recipe plus deterministic noise, only to exercise the reader and the plots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/events/event_sink.h"

namespace meridian::analysis::testing {

struct SyntheticOptions {
  int outer_steps = 12;
  int H = 50;
  std::string codec = "int8";      // int8 (1 byte per element on the wire) or fp32 (4)
  double allreduce_base_s = 20.0;  // ring time of a full bucket set at 4 nodes
  double inner_step_s = 2.0;       // mean time of one inner step
  bool with_loss = true;           // emulate-mode losses, else null (simulate mode)
  std::uint64_t seed = 1;
};

std::vector<Event> synthetic_run(const SyntheticOptions& options);

// Writes DIR/events.jsonl (DIR is created).
void write_synthetic_run(const std::string& dir, const SyntheticOptions& options);

}  // namespace meridian::analysis::testing
