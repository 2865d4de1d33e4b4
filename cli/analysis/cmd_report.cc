// `meridian report RUN_DIR`: draws the run's (or the ensemble's) plots and writes
// RUN_DIR/report.html, a single self-contained page. Argument parsing only; the page is
// analysis/report.h.
#include <iostream>

#include "analysis/report.h"
#include "cli/command.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian report RUN_DIR [--out FILE] [--label NAME] [--title TEXT]\n"
    "  Writes RUN_DIR/report.html (or FILE): summary table, per-node table, every plot of\n"
    "  `meridian plot` embedded in the page, and the resolved configuration. The page has no\n"
    "  external resources and opens from disk. Needs gnuplot (apt-get install -y gnuplot-nox).\n"
    "  The output folder of a real run (`meridian train`: DIR/node-<ID>/events.jsonl) also gets\n"
    "  RUN_DIR/summary.json, the merged run's figures as a simulation's summary.json has them.\n"
    "  RUN_DIR may also be an ensemble of `meridian sim --seeds` (a folder with ensemble.json):\n"
    "  the page then has the ensemble's table, its figures (`meridian plot` of the ensemble)\n"
    "  and a link to each seed's run.\n"
    "  --label NAME  the run's name in the page and its plots (default: its folder's name)\n"
    "  --title TEXT  a title above every plot\n";

int run_report(const std::vector<std::string>& args) {
  std::string dir;
  analysis::ReportOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--out") {
      if (i + 1 >= args.size())
        throw ConfigError("--out needs a file name\n" + std::string(kUsage));
      options.output = args[++i];
    } else if (a == "--label" || a == "--title") {
      if (i + 1 >= args.size()) throw ConfigError(a + " needs a value\n" + std::string(kUsage));
      (a == "--label" ? options.label : options.plots.plot.title) = args[++i];
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return kExitOk;
    } else if (!a.empty() && a[0] == '-') {
      throw ConfigError("unknown option '" + a + "'\n" + kUsage);
    } else if (dir.empty()) {
      dir = a;
    } else {
      throw ConfigError("one run directory at a time ('" + dir + "' and '" + a + "')\n" + kUsage);
    }
  }
  if (dir.empty()) throw ConfigError(std::string("no run directory given\n") + kUsage);
  const bool ensemble = analysis::folder_kind(dir) == analysis::FolderKind::kEnsemble;
  std::cout << "report: "
            << (ensemble ? analysis::write_ensemble_report(dir, options)
                         : analysis::write_report(dir, options))
            << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("report",
                 "write a run's or an ensemble's self-contained report.html (tables, plots)",
                 kUsage, run_report);

}  // namespace
}  // namespace meridian::cli
