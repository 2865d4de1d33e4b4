// Fuzz target: the churn trace parser (netsim/churn.h). Input: the CSV text, against three host
// slots of which two run at the start. It parses or throws ConfigError; a parsed trace is sorted
// and names only known hosts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "netsim/churn.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian::netsim;
  static const std::vector<std::string> hosts = {"us-east-1", "us-east-2", "eu-west-1"};
  static const std::set<std::string> running = {"us-east-1", "us-east-2"};
  ChurnTrace t;
  try {
    t = parse_churn(std::string(reinterpret_cast<const char*>(data), size), "fuzz.csv", hosts,
                    running);
  } catch (const meridian::ConfigError&) {
    return 0;
  }
  MERIDIAN_CHECK(
      std::is_sorted(t.events.begin(), t.events.end(),
                     [](const ChurnEvent& a, const ChurnEvent& b) { return a.at < b.at; }));
  for (const ChurnEvent& e : t.events)
    MERIDIAN_CHECK(std::find(hosts.begin(), hosts.end(), e.host) != hosts.end());
  return 0;
}
