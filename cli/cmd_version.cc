// `meridian version`: the version and the backends this binary was built with.
#include <iostream>

#include "cli/build_info.h"
#include "cli/command.h"

namespace meridian::cli {
namespace {

int run_version(const std::vector<std::string>&) {
  std::cout << "meridian " << kVersion << "\n" << "backends: " << kBackends << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("version", "print the version and the backends built in",
                 "usage: meridian version   (or: meridian --version)\n", run_version);

}  // namespace
}  // namespace meridian::cli
