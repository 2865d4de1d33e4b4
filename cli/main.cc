// `meridian`: one binary that simulates, emulates, trains and plots. Dispatches to the
// registered subcommands and maps errors to exit codes and a one-line message. The conventions
// every command shares are applied here, before the command runs: `--help`/`-h` prints its help
// (stdout, exit 0), `meridian --version`; each command parses its options with cli/options.h.
#include <algorithm>
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "engine/core/error.h"

namespace meridian::cli {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

bool register_command(Command c) {
  registry().push_back(std::move(c));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

std::vector<std::string>& invocation_storage() {
  static std::vector<std::string> v;
  return v;
}

const std::vector<std::string>& invocation() { return invocation_storage(); }

namespace {

void print_help(std::ostream& os) {
  os << "usage: meridian COMMAND [ARGS...]\n\ncommands:\n";
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::size_t width = 0;  // the summaries line up after the longest name
  for (const auto& c : cmds) width = std::max(width, c.name.size());
  for (const auto& c : cmds)
    os << "  " << c.name << std::string(width + 2 - c.name.size(), ' ') << c.summary << "\n";
  os << "\n`meridian help COMMAND` or `meridian COMMAND --help` prints a command's usage;\n"
        "`meridian --version` the version. Options take `--key value` or `--key=value`.\n";
}

}  // namespace
}  // namespace meridian::cli

int main(int argc, char** argv) {
  using namespace meridian::cli;
  invocation_storage().assign(argv, argv + argc);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    if (args.size() >= 2 && !opt::asks_for_help({args[1]})) {
      for (const auto& c : commands())
        if (c.name == args[1]) {
          if (c.elsewhere) return c.run({});  // prints its usage there
          std::cout << c.help();
          return kExitOk;
        }
      std::cerr << "meridian: no command '" << args[1] << "'\n";
      return kExitUsage;
    }
    print_help(args.empty() ? std::cerr : std::cout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") args[0] = "version";
  for (const auto& c : commands()) {
    if (c.name != args[0]) continue;
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (opt::asks_for_help(rest) && !c.elsewhere) {
      std::cout << c.help();
      return kExitOk;
    }
    try {
      return c.run(rest);
    } catch (const meridian::ConfigError& e) {
      std::cerr << "meridian " << c.name << ": " << e.what() << "\n";
      return kExitUsage;
    } catch (const meridian::ProtocolError& e) {
      std::cerr << "meridian " << c.name << ": protocol error: " << e.what() << "\n";
      return kExitFailed;
    } catch (const std::exception& e) {
      std::cerr << "meridian " << c.name << ": " << e.what() << "\n";
      return kExitFailed;
    }
  }
  std::cerr << "meridian: unknown command '" << args[0] << "'\n";
  print_help(std::cerr);
  return kExitUsage;
}
