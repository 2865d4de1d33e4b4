// `meridian version`: the version and the backends this binary was built with.
#include <iostream>

#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/options.h"

namespace meridian::cli {
namespace {

std::unique_ptr<Options> options() {
  return std::make_unique<Options>("meridian version",
                                   std::vector<std::string>{"(or: meridian --version)"},
                                   "Prints the version and the backends this binary was built "
                                   "with.");
}

int run_version(const std::vector<std::string>& args) {
  options()->parse(args);
  std::cout << "meridian " << kVersion << "\n" << "backends: " << kBackends << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND(
    "version", "print the version and the backends built in", [] { return options()->help(); },
    run_version);

}  // namespace
}  // namespace meridian::cli
