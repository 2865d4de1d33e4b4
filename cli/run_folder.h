// The rule for every `meridian` command that writes a run folder: a new run never lands silently
// on another run's files (unless --force). Header-only, for any cli/ command; it creates the
// folder and decides nothing about what the command then writes there.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <system_error>

#include "engine/core/error.h"

namespace meridian::cli {

// The default folder of a run named `name`: runs/<name> under the working directory (ignored by
// git; results/ holds only committed, curated outputs).
inline std::string default_run_folder(const std::string& name) { return "runs/" + name; }

// The files whose presence means a folder already holds a run: a simulation's or a node's events
// and summary, a sweep's table, a fine-tune's result.
inline constexpr std::initializer_list<const char*> kRunFolderMarkers = {
    "events.jsonl", "summary.json", "sweep.csv", "result.json", "ensemble.json",
    "calibration.json"};

// Makes `dir` ready for a new run: creates it when missing; when it already holds a run (one of
// kRunFolderMarkers), throws ConfigError naming the folder, the file found, `option` (how the
// user chose the folder) and --force, unless `force`. With `force` the old files stay and the
// run's own files replace theirs. Also refuses a `dir` that is a file.
inline void claim_run_folder(const std::filesystem::path& dir, bool force,
                             const std::string& option = "--out") {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw ConfigError(dir.string() + ": is a file, not a folder (" + option + ")");
  if (!force) {
    for (const char* marker : kRunFolderMarkers)
      if (std::filesystem::exists(dir / marker, ec))
        throw ConfigError(dir.string() + " already holds a run (" + marker +
                          "); choose another folder with " + option +
                          " DIR, or pass --force to write over it");
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ConfigError(dir.string() + ": cannot create the folder: " + ec.message());
}

}  // namespace meridian::cli
