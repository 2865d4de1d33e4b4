// `meridian report`: one self-contained report.html per run (summary table, per-node table, the
// plots embedded as base64 PNG data URIs, the resolved configuration). No scripts, no external
// resources: it opens from disk in any browser. Not the plots themselves (plots.h).
#pragma once

#include <string>
#include <vector>

#include "analysis/plots.h"
#include "engine/core/util/base64.h"

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

// An ensemble's page (`meridian sim --seeds`): the ensemble table of ensemble.md, its figures
// (plot_ensembles, drawn into DIR/plots) and one row per seed with a link to its run (the run's
// report.html where it has one, else its folder). Written to DIR/report.html, or
// options.output (the links then lead from that file's folder). Returns its path.
std::string write_ensemble_report(const std::string& ensemble_dir, const ReportOptions& options);

// The HTML for an ensemble whose figures (PNG paths) are drawn; `runs_href` is the ensemble's
// folder as the page links to it ("" when the page is in it).
std::string ensemble_report_html(const EnsembleData& ensemble,
                                 const std::vector<std::string>& png_files,
                                 const std::string& runs_href);

// Standard base64 (RFC 4648, with padding): engine/core/util/base64.h.
using meridian::base64_encode;

// &, <, >, " escaped.
std::string html_escape(const std::string& s);

}  // namespace meridian::analysis
