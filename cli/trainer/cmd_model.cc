// `meridian model NAME|FILE.yaml`: prints a model config's shapes, parameter counts and FLOPs
// per token (PRIME's formula). Counting only; it builds no tensors.
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/torch_commands.h"
#include "engine/core/error.h"
#include "trainer/model_config.h"

namespace meridian::cli {
namespace {

std::unique_ptr<Options> options(std::string& name) {
  auto o = std::make_unique<Options>(
      "meridian model", std::vector<std::string>{"NAME|FILE.yaml"},
      "Prints a model config's shapes, parameter counts and FLOPs per token (PRIME's formula).");
  o->argument("NAME|FILE.yaml",
              "a config in trainer/configs (tiny, small, 150m, 1b, intellect1-10b), or a file",
              name);
  return o;
}

int run_model(const std::vector<std::string>& args) {
  std::string name;
  options(name)->parse(args);
  std::cout << trainer::describe(trainer::load_named_config(name).model);
  return kExitOk;
}

MERIDIAN_COMMAND("model", torch_command_summary("model"), help_of<std::string>(options), run_model);

}  // namespace
}  // namespace meridian::cli
