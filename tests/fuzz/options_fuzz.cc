// Fuzz target: a command's options (cli/options.h, over CLI11). Input: the arguments after the
// command's name, separated by NUL bytes (at most 64). Parsing either applies them or throws
// ConfigError, never anything else (CLI11's own errors included); an integer it applied is
// within its declared range.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/options.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size && args.size() <= 64; ++i) {
    if (data[i] == 0)
      args.emplace_back();
    else
      args.back() += static_cast<char>(data[i]);
  }
  std::string file, out;
  std::vector<std::string> more, sets;
  double rate = 0;
  std::int64_t count = -1;
  bool force = false;
  meridian::cli::Options o("meridian fuzz", {"FILE [FILE...] [options]"}, "A fuzz target.");
  o.argument("FILE", "the input", file)
      .arguments("MORE", "more inputs", more, 0)
      .text("--out", "DIR", "where it goes", out)
      .number("--rate", "R", "a number", rate)
      .integer("--count", "N", "an integer in [1, 10]", count, 1, 10)
      .flag("--force", "a flag", force)
      .texts("--set", "K=V", "repeatable", sets);
  try {
    o.parse(args);
  } catch (const meridian::ConfigError&) {
    return 0;
  }
  MERIDIAN_CHECK(count == -1 || (count >= 1 && count <= 10));
  return 0;
}
