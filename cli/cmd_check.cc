// `meridian check RUN.yaml`: reads and validates a run file without running it, and prints its
// resolved configuration, each value with where it came from (FILE:LINE, --set, or the
// default), and the warnings the run would print. The run file's one strict reader
// (engine/config/run_file.h) and its notes; for the real mode also the trainer's resolution of
// the file where this build has the trainer (cli/run_config_hash.h), as `meridian train` does.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/run_config_hash.h"
#include "engine/config/run_file.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

struct CheckArgs {
  std::string path, mode;
  std::vector<std::string> overrides;
};

std::unique_ptr<Options> options(CheckArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian check",
      std::vector<std::string>{"RUN.yaml [--mode simulate|real] [--set key.path=value ...]"},
      "Reads and validates a run file as `meridian sim` (mode simulate) and `meridian train` "
      "(mode real) would, without running anything. Prints, on stdout, the resolved "
      "configuration: every key with its value and where the value came from (FILE:LINE of the "
      "run file, of a sites file or model config it names, `--set ...`, or `default`); then, on "
      "stderr, the warnings the run would print: sections the mode does not use, and values that "
      "look wrong for the run (a blocking checkpoint longer than the compute it follows, "
      "INTELLECT-1's checkpoint or per-node defaults on a small model). For the real mode it "
      "also resolves the file as a node does (model config, data, store) and prints the "
      "configuration hash the nodes send their store (`meridian store --config` compares the "
      "same).");
  o->argument("RUN.yaml", "the run file", a.path)
      .value("--mode", "M",
             "check for one mode only: simulate or real (default: simulate when the file has a "
             "network section, and real)",
             [&a](const std::string& n, const std::string& v) {
               if (v != "simulate" && v != "real")
                 throw ConfigError(n + ": expected simulate or real, got '" + v + "'");
               a.mode = v;
             })
      .texts("--set", "k=v", "an override, as the run would take it (repeatable)", a.overrides)
      .notes(
          "Exit 0: valid for every mode checked (warnings may remain); 2: the file, an "
          "override or a mode refused it, with the reason.");
  return o;
}

// "key: value  # origin" lines for every leaf of `j`, lists of scalars as one value.
void list(const nlohmann::json& j, const std::string& path, const config::RunFile& f,
          std::vector<std::pair<std::string, std::string>>& out) {
  const auto scalar_list = [](const nlohmann::json& a) {
    for (const auto& v : a)
      if (v.is_structured()) return false;
    return true;
  };
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      list(it.value(), path.empty() ? it.key() : path + "." + it.key(), f, out);
  } else if (j.is_array() && !j.empty() && !scalar_list(j)) {
    for (std::size_t i = 0; i < j.size(); ++i)
      list(j[i], path + "[" + std::to_string(i) + "]", f, out);
  } else {
    const auto g = f.given.find(path);
    out.push_back({path + ": " + j.dump(), g != f.given.end() ? g->second : "default"});
  }
}

int run_check(const std::vector<std::string>& args) {
  CheckArgs a;
  options(a)->parse(args);
  const std::string& path = a.path;
  const std::string& mode_text = a.mode;
  const std::vector<std::string>& overrides = a.overrides;

  const config::RunFile f = config::load_run_file(path, overrides);
  std::vector<std::pair<config::Mode, const char*>> modes;
  const bool has_network = !f.network.nodes.empty();
  if (mode_text == "simulate" || (mode_text.empty() && has_network))
    modes.push_back({config::Mode::kSimulate, "simulate (meridian sim)"});
  if (mode_text == "real" || mode_text.empty())
    modes.push_back({config::Mode::kReal, "real (meridian train)"});
  std::string valid, hash;
  for (const auto& [mode, name] : modes) {
    config::check_for(f, mode);  // a refusal is the ConfigError the run would give
    // A real node resolves more than the file's reader does (its model config, data and store
    // settings): the same resolution, with its refusals, where this build has the trainer.
    if (mode == config::Mode::kReal && run_config_hash_fn())
      hash = run_config_hash_fn()(path, overrides);
    valid += std::string(valid.empty() ? "" : " and ") + name;
  }

  std::vector<std::pair<std::string, std::string>> lines;
  list(nlohmann::json::parse(f.to_json().str()), "", f, lines);
  std::size_t width = 0;
  for (const auto& l : lines) width = std::max(width, l.first.size());
  std::cout << "# " << path << ": valid for " << valid << "\n"
            << (hash.empty() ? ""
                             : "# configuration hash (what a node sends its store): " + hash + "\n")
            << "# the resolved configuration: key: value, and where the value came from\n";
  for (const auto& [text, origin] : lines)
    std::cout << text << std::string(width - text.size() + 2, ' ') << "# " << origin << "\n";
  std::size_t warnings = 0;
  for (const auto& [mode, name] : modes)
    for (const std::string& note : f.notes_for(mode)) {
      std::cerr << "warning (" << name << "): " << note << "\n";
      ++warnings;
    }
  std::cerr << "meridian check: " << path << " is valid for " << valid << "; " << warnings
            << " warning(s)\n";
  return kExitOk;
}

MERIDIAN_COMMAND("check",
                 "validate a run file without running it: resolved values, their origin, warnings",
                 help_of<CheckArgs>(options), run_check);

}  // namespace
}  // namespace meridian::cli
