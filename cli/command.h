// The `meridian` command registry. Each subcommand lives in its own cli/cmd_<name>.cc and
// registers itself with MERIDIAN_COMMAND; main() dispatches. cli/ is the composition root: the
// only place (with tests/support) that names concrete backends.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace meridian::cli {

// Receives the arguments after the subcommand name; returns the process exit code.
using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;  // one line for `meridian help`
  std::function<std::string()> help;  // `meridian help NAME`, `meridian NAME --help`
  CommandFn run;
  // Runs in meridian-torch (cli/elsewhere.cc): `run` replaces this process by it, whatever the
  // arguments (--help included).
  bool elsewhere = false;
};

bool register_command(Command c);
const std::vector<Command>& commands();
// This process's command line as main() received it (argv[0] first).
const std::vector<std::string>& invocation();

// Exit codes: 0 ok, 1 run failed (e.g. peers lost beyond retries), 2 bad usage or input.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

}  // namespace meridian::cli

#define MERIDIAN_CLI_CONCAT2_(a, b) a##b
#define MERIDIAN_CLI_CONCAT_(a, b) MERIDIAN_CLI_CONCAT2_(a, b)
#define MERIDIAN_COMMAND(...)                                                    \
  static const bool MERIDIAN_CLI_CONCAT_(meridian_command_registered_, __LINE__) = \
      ::meridian::cli::register_command(::meridian::cli::Command{__VA_ARGS__})
