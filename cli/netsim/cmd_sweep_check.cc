// Registers netsim's scenario loader as the check `meridian sweep` runs on every point before
// running any (cli/scenario_check.h): a bad --set key fails at once, not after other points ran.
// Compiled in with the simulator (hence cmd_, like cli/emulation/cmd_sim_torch.cc); not a
// subcommand of its own.
#include "cli/scenario_check.h"
#include "netsim/scenario.h"

namespace meridian::cli {
namespace {

const bool kSweepCheckRegistered = [] {
  scenario_check() = [](const std::string& scenario, const std::vector<std::string>& overrides) {
    netsim::load_scenario(scenario, overrides);
  };
  return true;
}();

}  // namespace
}  // namespace meridian::cli
