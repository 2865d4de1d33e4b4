// The check `meridian sweep` runs on every point before the first one runs: load the scenario
// with the point's overrides. cli/netsim/ registers it (it needs SimGrid's scenario parser);
// cli/analysis/ only calls it. Not a validator itself, and empty in a build without netsim.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace meridian::cli {

// Throws ConfigError when SCENARIO with `overrides` ("key=value") is not a valid scenario.
using ScenarioCheck =
    std::function<void(const std::string& scenario, const std::vector<std::string>& overrides)>;

// The registered check (empty when no command registered one).
inline ScenarioCheck& scenario_check() {
  static ScenarioCheck check;
  return check;
}

}  // namespace meridian::cli
