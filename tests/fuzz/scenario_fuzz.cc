// Fuzz target: the scenario parser (netsim/scenario.h), YAML text to a validated Scenario.
// Input: the YAML text. It parses or throws ConfigError; a parsed scenario also serialises.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "netsim/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian::netsim;
  try {
    const Scenario s =
        parse_scenario(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    (void)s.to_json();
  } catch (const meridian::ConfigError&) {
  }
  return 0;
}
