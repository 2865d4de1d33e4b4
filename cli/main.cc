// `meridian`: one binary that simulates, emulates, trains and plots. Dispatches to the
// registered subcommands and maps errors to exit codes and a one-line message.
#include <algorithm>
#include <iostream>

#include "cli/command.h"
#include "engine/error.h"

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

namespace {

void print_help(std::ostream& os) {
  os << "usage: meridian COMMAND [ARGS...]\n\ncommands:\n";
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (const auto& c : cmds) {
    os << "  " << c.name << std::string(c.name.size() < 10 ? 10 - c.name.size() : 1, ' ')
       << c.summary << "\n";
  }
  os << "\n`meridian help COMMAND` prints a command's usage.\n";
}

}  // namespace
}  // namespace meridian::cli

int main(int argc, char** argv) {
  using namespace meridian::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    if (args.size() >= 2) {
      for (const auto& c : commands())
        if (c.name == args[1]) {
          std::cout << c.usage;
          return kExitOk;
        }
      std::cerr << "meridian: no command '" << args[1] << "'\n";
      return kExitUsage;
    }
    print_help(args.empty() ? std::cerr : std::cout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  for (const auto& c : commands()) {
    if (c.name != args[0]) continue;
    try {
      return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
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
