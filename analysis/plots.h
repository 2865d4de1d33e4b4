// The figures of `meridian plot`: for one run, and side by side for several. Each figure is a
// data file plus a section of one gnuplot script, drawn to PNG and SVG under the output folder.
// Not the statistics (summary.h) and not the HTML (report.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/events.h"
#include "analysis/gnuplot.h"
#include "analysis/summary.h"

namespace meridian::analysis {

struct RunData {
  std::string dir;    // the run directory (or the events file's directory)
  std::string label;  // the directory's name: legends and titles
  std::vector<EventRecord> events;
  Summary summary;
};

// Reads DIR/events.jsonl (or an events file) and summarizes it.
RunData load_run(const std::string& run_dir_or_file);

struct RunPlotOptions {
  PlotOptions plot;
  // The outer step drawn in the per-node timeline; default: the first step during which a
  // node recovered, else the middle step.
  std::optional<std::int64_t> timeline_step;
};

// One run's figures into out_dir (created): nodes, allreduce_hist, allreduce_box, utilization,
// timeline, bytes, and loss_vs_tokens / loss_vs_time when the run has losses. Returns the
// files written (PNG and SVG), in that order.
std::vector<std::string> plot_run(const RunData& run, const std::string& out_dir,
                                  const RunPlotOptions& options);

// Several runs side by side into out_dir: compare_nodes, compare_allreduce_hist,
// compare_allreduce_box, compare_utilization.
std::vector<std::string> plot_comparison(const std::vector<RunData>& runs,
                                         const std::string& out_dir, const PlotOptions& options);

// The outer step plot_run's timeline draws by default (see RunPlotOptions); -1 if none.
std::int64_t default_timeline_step(const RunData& run);

// ---- ensembles over seeds (`meridian sim --seeds`, analysis/ensemble.h)

// What a path given to `plot` or `report` holds: an ensemble (a folder with ensemble.json) or a
// run (an events file, a folder with events.jsonl or with a real run's node-<ID>/events.jsonl).
// Anything else is a ConfigError that names the path and what was looked for.
enum class FolderKind { kRun, kEnsemble };
FolderKind folder_kind(const std::string& path);

struct EnsembleData {
  std::string dir;          // the ensemble's folder: ensemble.json, seed-<N>/
  std::string label;        // the folder's name: legends and axes
  nlohmann::json ensemble;  // ensemble.json
};

// Reads DIR/ensemble.json. A file written before the figures existed (no quartiles, no
// per-step band) is a ConfigError that says to rerun `meridian sim --seeds`.
EnsembleData load_ensemble(const std::string& dir);

// Figures of one ensemble, or of several side by side (one box or band per ensemble), into
// out_dir: ensemble_box (compute utilization, MFU and the per-run median all-reduce across the
// seeds: box p25-p75, median line, whiskers p5-p95, a dot per seed) and
// ensemble_allreduce_steps (per outer step, the p10-p90 band over seeds and the median). With
// several ensembles the names start with compare_ (script compare_ensemble.gp, else
// ensemble.gp). Every number drawn is read from ensemble.json, nothing is recomputed.
std::vector<std::string> plot_ensembles(const std::vector<EnsembleData>& ensembles,
                                        const std::string& out_dir, const PlotOptions& options);

}  // namespace meridian::analysis
