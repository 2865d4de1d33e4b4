// The figures of `meridian plot`: for one run, and side by side for several. Each figure is a
// data file plus a section of one gnuplot script, drawn to PNG and SVG under the output folder.
// Not the statistics (summary.h) and not the HTML (report.h).
#pragma once

#include <cstdint>
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

}  // namespace meridian::analysis
