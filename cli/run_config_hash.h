// The configuration hash of a run file as its nodes send it, for `meridian store --config`, which
// needs only the engine: resolving a run file (model presets, data) needs the trainer, so the
// trainer's part of the cli registers the resolver where this build has one
// (cli/trainer/run_config_hash.cc). Not the hash itself: that is trainer::run_config_hash.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace meridian::cli {

// Resolves RUN.yaml with `--set` overrides and returns the hash its nodes send.
using RunConfigHashFn = std::function<std::string(const std::string& run_yaml,
                                                  const std::vector<std::string>& overrides)>;

// The registered resolver; empty in a build without the trainer.
inline RunConfigHashFn& run_config_hash_fn() {
  static RunConfigHashFn fn;
  return fn;
}

inline bool register_run_config_hash(RunConfigHashFn fn) {
  run_config_hash_fn() = std::move(fn);
  return true;
}

}  // namespace meridian::cli
