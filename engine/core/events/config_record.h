// The `config` record that opens every run's events (engine/core/events/SCHEMA.md), built in one
// place for the three modes: the simulator (netsim/simulation.cc), the thread emulation
// (trainer/diloco_emulation.cc) and a real node (cli/train/cmd_train_node.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/events/json.h"

namespace meridian {

// What the analysis needs to turn events into utilization and MFU.
struct RunMetrics {
  std::uint64_t param_count = 0;
  double flops_per_token = 0.0;
  std::int64_t tokens_per_inner_step = 0;  // per node
  int gpus_per_node = 0;                   // 0: CPU training
  double peak_flops_per_gpu = 0.0;
  int inner_steps = 0;  // H
  std::string codec;
  int local_ranks = 1;
};

struct ConfigRecord {
  std::string mode;  // simulate, emulate, real
  std::uint64_t seed = 0;
  std::string command;
  std::optional<double> clock_origin_unix_s;  // real runs: the Unix time of the process's t = 0
  JsonObject versions;                        // {meridian, ...}
  RunMetrics metrics;
  JsonObject config;  // the fully resolved configuration
};

// The record's fields, in SCHEMA.md's order.
JsonObject config_record_fields(const ConfigRecord& r);

}  // namespace meridian
