// Registers the run file's configuration hash (cli/run_config_hash.h) for `meridian store
// --config`: the same trainer::run_config_hash of the same resolved configuration a node sends.
#include "cli/run_config_hash.h"

#include "trainer/run_config.h"

namespace meridian::cli {
namespace {

const bool registered = register_run_config_hash(
    [](const std::string& run_yaml, const std::vector<std::string>& overrides) {
      return trainer::run_config_hash(trainer::load_run_config(run_yaml, overrides));
    });

}  // namespace
}  // namespace meridian::cli
