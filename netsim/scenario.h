// The run file as the simulator sees it: netsim's names for engine/config/run_file.h, and the
// loaders that also check what a simulation needs (a network section).
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_file.h"

namespace meridian::netsim {

using Scenario = config::RunFile;
using config::DilocoSpec;
using config::HardwareSpec;
using config::ModelSpec;
using config::NetworkSpec;
using config::NodeGroup;
using config::PathSpec;
using config::RttSpec;
using config::RunSpec;
using config::SiteSpec;
using config::TcpSpec;
using config::VariationSpec;

// Parses `path` (overrides: "a.b.c=value", "a.list[N].key=value") as a run file to simulate.
inline Scenario load_scenario(const std::string& path,
                              const std::vector<std::string>& overrides = {}) {
  Scenario sc = config::load_run_file(path, overrides);
  config::check_for(sc, config::Mode::kSimulate);
  return sc;
}

// Same, from text (tests); `name` stands in for the file name in messages.
inline Scenario parse_scenario(const std::string& yaml_text, const std::string& name,
                               const std::vector<std::string>& overrides = {}) {
  Scenario sc = config::parse_run_file(yaml_text, name, overrides);
  config::check_for(sc, config::Mode::kSimulate);
  return sc;
}

}  // namespace meridian::netsim
