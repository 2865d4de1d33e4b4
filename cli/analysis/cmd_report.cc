// `meridian report RUN_DIR`: draws the run's (or the ensemble's) plots and writes
// RUN_DIR/report.html, a single self-contained page. Argument parsing only; the page is
// analysis/report.h.
#include <iostream>

#include "analysis/report.h"
#include "cli/command.h"
#include "cli/options.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

struct ReportArgs {
  std::string dir;
  analysis::ReportOptions report;
};

std::unique_ptr<Options> options(ReportArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian report",
      std::vector<std::string>{"RUN_DIR [--out FILE] [--label NAME] [--title TEXT]"},
      "Writes RUN_DIR/report.html (or FILE): summary table, per-node table, every plot of "
      "`meridian plot` embedded in the page, and the resolved configuration. The page has no "
      "external resources and opens from disk. Needs gnuplot (apt-get install -y gnuplot-nox). "
      "The output folder of a real run (`meridian train`: DIR/node-<ID>/events.jsonl) also gets "
      "RUN_DIR/summary.json, the merged run's figures as a simulation's summary.json has them. "
      "RUN_DIR may also be an ensemble of `meridian sim --seeds` (a folder with ensemble.json): "
      "the page then has the ensemble's table, its figures (`meridian plot` of the ensemble) and "
      "a link to each seed's run.");
  o->argument("RUN_DIR", "a run's output folder, or an ensemble's", a.dir)
      .text("--out", "FILE", "the page (default RUN_DIR/report.html)", a.report.output)
      .text("--label", "NAME",
            "the run's name in the page and its plots (default: its folder's name)", a.report.label)
      .text("--title", "TEXT", "a title above every plot", a.report.plots.plot.title);
  return o;
}

int run_report(const std::vector<std::string>& args) {
  ReportArgs a;
  options(a)->parse(args);
  const std::string& dir = a.dir;
  const analysis::ReportOptions& options = a.report;
  const bool ensemble = analysis::folder_kind(dir) == analysis::FolderKind::kEnsemble;
  std::cout << "report: "
            << (ensemble ? analysis::write_ensemble_report(dir, options)
                         : analysis::write_report(dir, options))
            << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("report",
                 "write a run's or an ensemble's self-contained report.html (tables, plots)",
                 help_of<ReportArgs>(options), run_report);

}  // namespace
}  // namespace meridian::cli
