// Fuzz target: the events.jsonl reader (analysis/events.h), which reads a run's files, simulated
// or from real nodes, and ordinary records without a tree of maps. Input: a file's text. It reads
// to records or throws ConfigError; every line that reads alone is a JSON object whose "t",
// "node" and "type" the ordinary parse reads to the same values (a later duplicate wins).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analysis/events.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian::analysis;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  try {
    (void)read_events(in, "fuzz.jsonl");
  } catch (const meridian::ConfigError&) {
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EventRecord r;
    try {
      r = parse_event_line(line, "fuzz.jsonl:1");
    } catch (const meridian::ConfigError&) {
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line);  // read alone, so it parses
    MERIDIAN_CHECK(j.is_object());
    MERIDIAN_CHECK(j.at("type").get<std::string>() == r.type);
    MERIDIAN_CHECK(j.at("node").get<std::int64_t>() == r.node);
    const double t = j.at("t").get<double>();
    MERIDIAN_CHECK(t == r.t_s);
  }
  return 0;
}
