// `meridian model NAME|FILE.yaml`: prints a model config's shapes, parameter counts and FLOPs
// per token (PRIME's formula). Counting only; it builds no tensors.
#include <iostream>

#include "cli/command.h"
#include "cli/torch_commands.h"
#include "engine/core/error.h"
#include "trainer/model_config.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian model NAME|FILE.yaml\n"
    "  NAME is a config in trainer/configs (tiny, small, 150m, 1b, intellect1-10b)\n";

int run_model(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  try {
    std::cout << trainer::describe(trainer::load_named_config(args[0]).model);
  } catch (const ConfigError& e) {
    std::cerr << "meridian model: " << e.what() << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

MERIDIAN_COMMAND("model", torch_command_summary("model"), kUsage, run_model);

}  // namespace
}  // namespace meridian::cli
