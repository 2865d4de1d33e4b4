// The typed values of the `meridian` subcommands' options, with errors that name the option and
// what was expected (the commands' options are parsed by cli/options.h, which converts with
// these), and the one convention main() applies before any command runs: --help.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace meridian::cli::opt {

// True when the arguments ask for the command's usage: `--help` or `-h` anywhere before a `--`.
inline bool asks_for_help(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

inline double number(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw ConfigError(option + ": expected a number, got '" + text + "'");
  return v;
}

inline std::uint64_t unsigned_integer(const std::string& option, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError(option + ": expected a non-negative integer, got '" + text + "'");
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw ConfigError(option + ": integer out of range: '" + text + "'");
  }
}

// An integer in [lo, hi] (lo >= 0), digits only.
inline std::uint64_t integer_in(const std::string& option, const std::string& text,
                                std::uint64_t lo, std::uint64_t hi) {
  const bool digits = !text.empty() && text.size() <= 19 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const std::uint64_t v = digits ? std::stoull(text) : 0;
  if (!digits || v < lo || v > hi)
    throw ConfigError(option + ": expected an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got '" + text + "'");
  return v;
}

// A TCP port number in [0, 65535], digits only.
inline std::uint16_t port(const std::string& option, const std::string& text) {
  if (text.empty() || text.size() > 5 ||
      text.find_first_not_of("0123456789") != std::string::npos || std::stoul(text) > 65535)
    throw ConfigError(option + ": expected a port in [0, 65535], got '" + text + "'");
  return static_cast<std::uint16_t>(std::stoul(text));
}

// "25%" → 0.25, "0.25" → 0.25; a bare number above 1 is refused as ambiguous.
inline double fraction(const std::string& option, const std::string& text) {
  if (!text.empty() && text.back() == '%')
    return number(option, text.substr(0, text.size() - 1)) / 100.0;
  const double v = number(option, text);
  if (v > 1)
    throw ConfigError(option + ": write a percentage (e.g. 25%) or a fraction in [0, 1], got '" +
                      text + "'");
  return v;
}

// ConfigError naming `option` when the file `path` could not be written (its folder is missing or
// read-only, or it is a folder or read-only itself): checked with the arguments, before any work,
// instead of finding out when the output is due. Creates and truncates nothing.
inline void check_writable(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code ec;
  const bool ok = fs::exists(file, ec)
                      ? !fs::is_directory(file, ec) && ::access(path.c_str(), W_OK) == 0
                      : fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK) == 0;
  if (!ok) throw ConfigError(option + ": cannot write '" + path + "'");
}

// "1,0.5,2" → {1, 0.5, 2}.
inline std::vector<double> number_list(const std::string& option, const std::string& text) {
  std::vector<double> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(number(option, text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace meridian::cli::opt
