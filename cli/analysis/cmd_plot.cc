// `meridian plot RUN_DIR...`: draws each run's figures into RUN_DIR/plots and, for several runs,
// the side-by-side comparisons; the same for ensembles over seeds (folders with ensemble.json).
// Argument parsing only; the figures are analysis/plots.h.
#include <filesystem>
#include <iostream>

#include "analysis/plots.h"
#include "cli/command.h"
#include "cli/options.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

// "1200x700" -> {1200, 700}; anything else is a ConfigError.
std::pair<int, int> parse_size(const std::string& s) {
  const auto x = s.find('x');
  try {
    if (x != std::string::npos) {
      std::size_t a = 0, b = 0;
      const int w = std::stoi(s.substr(0, x), &a), h = std::stoi(s.substr(x + 1), &b);
      if (a == x && b == s.size() - x - 1 && w >= 200 && h >= 150 && w <= 8000 && h <= 8000)
        return {w, h};
    }
  } catch (const std::exception&) {
  }
  throw ConfigError("--size '" + s + "': expected WIDTHxHEIGHT in pixels, e.g. 1200x700");
}

std::int64_t parse_step(const std::string& s) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("--step '" + s + "': expected an outer step number (>= 0)");
}

void print_files(const std::string& what, const std::vector<std::string>& files,
                 const std::string& dir) {
  std::cout << what << ": " << files.size() << " files in " << dir << "\n";
  for (const std::string& f : files) std::cout << "  " << f << "\n";
}

// Ensembles (folders with ensemble.json): each one's figures in DIR/plots (or --out for one),
// and with several the side-by-side ones.
int plot_ensembles(const std::vector<std::string>& dirs, const std::vector<std::string>& labels,
                   std::string out, const analysis::PlotOptions& options) {
  std::vector<analysis::EnsembleData> ensembles;
  for (const std::string& d : dirs) ensembles.push_back(analysis::load_ensemble(d));
  for (std::size_t i = 0; i < labels.size(); ++i) ensembles[i].label = labels[i];
  for (const analysis::EnsembleData& e : ensembles) {
    const std::string plots_dir = ensembles.size() == 1 && !out.empty()
                                      ? out
                                      : (std::filesystem::path(e.dir) / "plots").string();
    print_files(e.label + " (ensemble)", analysis::plot_ensembles({e}, plots_dir, options),
                plots_dir);
  }
  if (ensembles.size() > 1) {
    if (out.empty()) out = (std::filesystem::path(ensembles[0].dir) / "plots").string();
    print_files("comparison of " + std::to_string(ensembles.size()) + " ensembles",
                analysis::plot_ensembles(ensembles, out, options), out);
  }
  return kExitOk;
}

struct PlotArgs {
  std::vector<std::string> dirs, labels;
  std::string out;
  analysis::RunPlotOptions plots;
};

std::unique_ptr<Options> options(PlotArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian plot",
      std::vector<std::string>{"RUN_DIR... [--out DIR] [--step N] [--size WxH] [--no-svg] [--pdf] "
                               "[--label NAME]... [--title TEXT]"},
      "Draws each run's plots (PNG and SVG) into RUN_DIR/plots: active nodes, all-reduce time "
      "histogram and box plot, utilization and MFU over time, a per-node timeline of one outer "
      "step, bytes and bandwidth per node, loss and perplexity (when the run has losses). "
      "RUN_DIR may also be an events.jsonl file (its folder is the run's folder), or an ensemble "
      "of `meridian sim --seeds` (a folder with ensemble.json): its figures are ensemble_box "
      "(compute utilization, MFU and median all-reduce across the seeds: box p25-p75, median, "
      "whiskers p5-p95, a dot per seed) and ensemble_allreduce_steps (per outer step the p10-p90 "
      "band over the seeds and the median); several ensembles side by side as "
      "compare_ensemble_*. Give runs or ensembles, not both.");
  o->arguments("RUN_DIR", "runs' output folders (or events.jsonl files), or ensembles", a.dirs)
      .text("--out", "DIR",
            "one run (ensemble): its plots go to DIR instead; several: the side-by-side figures "
            "(compare_*.png) go to DIR (default: the first one's plots folder)",
            a.out)
      .value(
          "--step", "N",
          "the outer step of the timeline (default: the first with a recovery, else the "
          "middle one)",
          [&a](const std::string&, const std::string& v) { a.plots.timeline_step = parse_step(v); })
      .value("--size", "WxH", "image size in pixels (default 1200x700)",
             [&a](const std::string&, const std::string& v) {
               std::tie(a.plots.plot.width_px, a.plots.plot.height_px) = parse_size(v);
             })
      .flag("--no-svg", "PNG only", [&a] { a.plots.plot.svg = false; })
      .flag("--pdf", "also PDF (vector, for papers)", [&a] { a.plots.plot.pdf = true; })
      .texts("--label", "NAME",
             "the run's (ensemble's) name in legends and axes (default: its folder's name); with "
             "several, once per run in the same order",
             a.labels)
      .text("--title", "TEXT", "a title above every figure", a.plots.plot.title)
      .notes("Needs gnuplot (apt-get install -y gnuplot-nox).");
  return o;
}

int run_plot(const std::vector<std::string>& args) {
  PlotArgs a;
  options(a)->parse(args);
  const std::vector<std::string>& dirs = a.dirs;
  const std::vector<std::string>& labels = a.labels;
  std::string& out = a.out;
  analysis::RunPlotOptions& options = a.plots;
  if (!labels.empty() && labels.size() != dirs.size())
    throw ConfigError("--label: " + std::to_string(labels.size()) + " labels for " +
                      std::to_string(dirs.size()) + " runs; give one per run, in order");
  analysis::find_gnuplot(options.plot.gnuplot);

  // Runs or ensembles: each folder says which it is (or why it is neither).
  std::vector<analysis::FolderKind> kinds;
  for (const std::string& d : dirs) kinds.push_back(analysis::folder_kind(d));
  for (std::size_t i = 1; i < dirs.size(); ++i)
    if (kinds[i] != kinds[0])
      throw ConfigError("give runs or ensembles, not both: " + dirs[0] + " is " +
                        (kinds[0] == analysis::FolderKind::kRun ? "a run" : "an ensemble") + ", " +
                        dirs[i] + " " +
                        (kinds[i] == analysis::FolderKind::kRun ? "a run" : "an ensemble"));
  if (kinds[0] == analysis::FolderKind::kEnsemble) {
    if (options.timeline_step)
      throw ConfigError("--step: the timeline is a run's figure; an ensemble has none");
    return plot_ensembles(dirs, labels, out, options.plot);
  }

  std::vector<analysis::RunData> runs;
  for (const std::string& d : dirs) runs.push_back(analysis::load_run(d));
  for (std::size_t i = 0; i < labels.size(); ++i) runs[i].label = labels[i];
  for (const analysis::RunData& r : runs) {
    const std::string plots_dir =
        runs.size() == 1 && !out.empty() ? out : (std::filesystem::path(r.dir) / "plots").string();
    print_files(r.label, analysis::plot_run(r, plots_dir, options), plots_dir);
  }
  if (runs.size() > 1) {
    if (out.empty()) out = (std::filesystem::path(runs[0].dir) / "plots").string();
    print_files("comparison of " + std::to_string(runs.size()) + " runs",
                analysis::plot_comparison(runs, out, options.plot), out);
  }
  return kExitOk;
}

MERIDIAN_COMMAND("plot",
                 "draw a run's or an ensemble's plots (gnuplot: PNG and SVG), several side by side",
                 help_of<PlotArgs>(options), run_plot);

}  // namespace
}  // namespace meridian::cli
