// `meridian report`: one self-contained report.html per run (summary table, per-node table, the
// plots embedded as base64 PNG data URIs, the resolved configuration). No scripts, no external
// resources: it opens from disk in any browser. Not the plots themselves (plots.h).
#pragma once

#include <string>
#include <vector>

#include "analysis/plots.h"

namespace meridian::analysis {

struct ReportOptions {
  RunPlotOptions plots;
  std::string output;  // default: RUN_DIR/report.html
  std::string label;   // the run's name in the page and its plots; default: its folder's name
};

// Draws the run's plots into RUN_DIR/plots and writes the report; returns its path.
std::string write_report(const std::string& run_dir, const ReportOptions& options);

// The HTML for a run whose plots (PNG paths) are already drawn.
std::string report_html(const RunData& run, const std::vector<std::string>& png_files);

// Standard base64 (RFC 4648, with padding).
std::string base64_encode(const std::string& bytes);

// &, <, >, " escaped.
std::string html_escape(const std::string& s);

}  // namespace meridian::analysis
