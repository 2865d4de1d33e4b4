// The commands that need LibTorch: registered by their own files in meridian-torch, and listed
// (and handed to meridian-torch) by the front `meridian` (cli/elsewhere.cc). Their one-line
// summaries live here, once, for both.
#pragma once

#include <string_view>

namespace meridian::cli {

struct TorchCommand {
  const char* name;
  const char* summary;
};

inline constexpr TorchCommand kTorchCommands[] = {
    {"corpus", "tokenize a training corpus into the cache and print its size"},
    {"finetune", "train/adapt the model on the general or domain corpus (Spectrum-aware)"},
    {"model", "print a model's parameter count and FLOPs per token"},
    {"train", "a node of a real run (RUN.yaml), or one LibTorch worker alone (loss curve as CSV)"},
    {"train-diloco",
     "emulate DiLoCo: N LibTorch nodes as threads, in-process ring, optional churn"},
};

// The summary of torch command `name` ("" for another name).
inline const char* torch_command_summary(std::string_view name) {
  for (const TorchCommand& c : kTorchCommands)
    if (name == c.name) return c.summary;
  return "";
}

}  // namespace meridian::cli
