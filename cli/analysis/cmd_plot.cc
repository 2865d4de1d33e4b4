// `meridian plot RUN_DIR...`: draws each run's figures into RUN_DIR/plots and, for several runs,
// the side-by-side comparisons. Argument parsing only; the figures are analysis/plots.h.
#include <filesystem>
#include <iostream>

#include "analysis/plots.h"
#include "cli/args.h"
#include "cli/command.h"
#include "engine/error.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian plot RUN_DIR... [--out DIR] [--step N] [--size WxH] [--no-svg] [--pdf]\n"
    "                     [--label NAME]... [--title TEXT]\n"
    "  Draws each run's plots (PNG and SVG) into RUN_DIR/plots: active nodes, all-reduce time\n"
    "  histogram and box plot, utilization and MFU over time, a per-node timeline of one outer\n"
    "  step, bytes and bandwidth per node, loss and perplexity (when the run has losses).\n"
    "  RUN_DIR may also be an events.jsonl file (its folder is the run's folder).\n"
    "  --out DIR    one run: its plots go to DIR instead; several runs: the side-by-side\n"
    "               figures (compare_*.png) go to DIR (default: the first run's plots folder)\n"
    "  --step N     the outer step of the timeline (default: the first with a recovery, else\n"
    "               the middle one)\n"
    "  --size WxH   image size in pixels (default 1200x700)\n"
    "  --no-svg     PNG only\n"
    "  --pdf        also PDF (vector, for papers)\n"
    "  --label NAME the run's name in legends and axes (default: its folder's name); with\n"
    "               several runs, once per run in the same order\n"
    "  --title TEXT a title above every figure\n"
    "  Needs gnuplot (apt-get install -y gnuplot-nox).\n";

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

int run_plot(const std::vector<std::string>& args) {
  std::vector<std::string> dirs, labels;
  std::string out;
  analysis::RunPlotOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--out")
      out = value();
    else if (a == "--step")
      options.timeline_step = parse_step(value());
    else if (a == "--size")
      std::tie(options.plot.width_px, options.plot.height_px) = parse_size(value());
    else if (a == "--no-svg")
      options.plot.svg = false;
    else if (a == "--pdf")
      options.plot.pdf = true;
    else if (a == "--label")
      labels.push_back(value());
    else if (a == "--title")
      options.plot.title = value();
    else if (a == "-h" || a == "--help")
      return std::cout << kUsage, kExitOk;
    else if (!a.empty() && a[0] == '-')
      throw ConfigError("unknown option '" + a + "'\n" + kUsage);
    else
      dirs.push_back(a);
  }
  if (dirs.empty()) throw ConfigError(std::string("no run directory given\n") + kUsage);
  if (!labels.empty() && labels.size() != dirs.size())
    throw ConfigError("--label: " + std::to_string(labels.size()) + " labels for " +
                      std::to_string(dirs.size()) + " runs; give one per run, in order");
  analysis::find_gnuplot(options.plot.gnuplot);

  std::vector<analysis::RunData> runs;
  for (const std::string& d : dirs) runs.push_back(analysis::load_run(d));
  for (std::size_t i = 0; i < labels.size(); ++i) runs[i].label = labels[i];
  for (const analysis::RunData& r : runs) {
    const std::string plots_dir =
        runs.size() == 1 && !out.empty() ? out : (std::filesystem::path(r.dir) / "plots").string();
    const auto files = analysis::plot_run(r, plots_dir, options);
    std::cout << r.label << ": " << files.size() << " files in " << plots_dir << "\n";
    for (const std::string& f : files) std::cout << "  " << f << "\n";
  }
  if (runs.size() > 1) {
    if (out.empty()) out = (std::filesystem::path(runs[0].dir) / "plots").string();
    const auto files = analysis::plot_comparison(runs, out, options.plot);
    std::cout << "comparison of " << runs.size() << " runs: " << files.size() << " files in " << out
              << "\n";
    for (const std::string& f : files) std::cout << "  " << f << "\n";
  }
  return kExitOk;
}

MERIDIAN_COMMAND("plot", "draw a run's plots (gnuplot: PNG and SVG), several runs side by side",
                 kUsage, run_plot);

}  // namespace
}  // namespace meridian::cli
