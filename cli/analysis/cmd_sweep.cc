// `meridian sweep SCENARIO.yaml --set key=v1,v2 ...`: runs `meridian sim` once per grid point
// (as child processes of this binary), then writes the table and the plots. Argument parsing
// only; the sweep is analysis/sweep.h.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "analysis/sweep.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/run_folder.h"
#include "cli/scenario_check.h"
#include "cli/slurm.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian sweep SCENARIO.yaml --set KEY=V1,V2,... [--set ...] [--out DIR]\n"
    "                      [--seed N] [--no-plots] [--title TEXT] [--pdf] [--force]\n"
    "                      [--part I/N|slurm | --gather]\n"
    "  Runs `meridian sim SCENARIO.yaml --out DIR/<point> --set KEY=V ...` for every point of\n"
    "  the grid (the cartesian product of the --set lists; a single value is applied to every\n"
    "  point), then writes DIR/sweep.csv, DIR/sweep.md and, for each key with several values,\n"
    "  DIR/plots/sweep_<key>.png|svg: utilization and MFU against that value.\n"
    "  Every point's settings are checked (the scenario loaded with them) before any runs.\n"
    "  Each point's output is in DIR/<point>.log. Default DIR: runs/sweep. On a terminal, stderr\n"
    "  shows a progress line (points done, ETA).\n"
    "  --title TEXT  a title above every sweep plot\n"
    "  --pdf         also write each plot as PDF\n"
    "  --force       write into DIR even if it holds another sweep (its points are replaced)\n"
    "  --part I/N    run only points number I, I+N, ... of the grid (from 0), each leaving its\n"
    "                exit status in DIR/<point>.exit; no table yet. `--part slurm`: this task's\n"
    "                share of a Slurm job array (scripts/slurm/README.md)\n"
    "  --gather      run nothing: the table and plots of the points the parts ran in DIR\n"
    "  Exit status 1 when a point failed (the others are still in the table).\n"
    "  example: meridian sweep scenarios/intellect1-global.yaml --set diloco.H=50,100,500 \\\n"
    "             --set diloco.codec=fp32,int8 --out results/sweep-H-codec\n";

// Parses the command line into `options`, `axes` and `force`; an exit status when the command
// ends here (--help).
std::optional<int> parse_sweep_args(const std::vector<std::string>& args,
                                    analysis::SweepOptions& options,
                                    std::vector<analysis::SweepAxis>& axes, bool& force) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--set") {
      axes.push_back(analysis::parse_sweep_axis(value()));
    } else if (a == "--out") {
      options.out_dir = value();
    } else if (a == "--seed") {
      const std::string& s = value();
      try {
        std::size_t used = 0;
        options.seed = std::stoll(s, &used);
        if (used != s.size()) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        throw ConfigError("--seed '" + s + "': expected an integer");
      }
    } else if (a == "--force") {
      force = true;
    } else if (a == "--no-plots") {
      options.plots = false;
    } else if (a == "--title") {
      options.plot.title = value();
    } else if (a == "--pdf") {
      options.plot.pdf = true;
    } else if (a == "--part") {
      const slurm::Part p = slurm::parse_part("--part", value(), slurm::process_env());
      options.part_index = p.index;
      options.part_count = p.count;
    } else if (a == "--gather") {
      options.gather = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return kExitOk;
    } else if (!a.empty() && a[0] == '-') {
      throw ConfigError("unknown option '" + a + "'\n" + kUsage);
    } else if (options.scenario.empty()) {
      options.scenario = a;
    } else {
      throw ConfigError("one scenario at a time ('" + options.scenario + "' and '" + a + "')\n" +
                        kUsage);
    }
  }
  if (options.scenario.empty()) throw ConfigError(std::string("no scenario given\n") + kUsage);
  if (!std::ifstream(options.scenario))
    throw ConfigError(options.scenario + ": cannot read the scenario file");
  bool have_sim = false;
  for (const Command& c : commands()) have_sim |= c.name == "sim";
  if (!have_sim)
    throw ConfigError(
        "this meridian has no `sim` command (it was built without the simulator); "
        "reconfigure with -DMERIDIAN_WITH_SIMGRID=ON");
  if (axes.empty())
    throw ConfigError(std::string("nothing to sweep: give --set KEY=V1,V2\n") + kUsage);

  return std::nullopt;
}

int run_sweep_command(const std::vector<std::string>& args) {
  analysis::SweepOptions options;
  std::vector<analysis::SweepAxis> axes;
  bool force = false;
  if (const std::optional<int> done = parse_sweep_args(args, options, axes, force)) return *done;

  // The sweep's folder is claimed once, before any point: its point folders are then its own
  // (each `meridian sim` child is given --force for them).
  if (options.gather && options.part_count > 0)
    throw ConfigError("--part and --gather: give one of them");
  // Parts share the folder: each claims it (none writes a table); the gather writes over none.
  if (!options.gather) claim_run_folder(options.out_dir, force);
  options.command = "meridian sweep";
  for (const std::string& a : args) options.command += " " + a;
  if (const ScenarioCheck& check = scenario_check())
    options.check_point = [&options, &check](const analysis::SweepPoint& point) {
      std::vector<std::string> overrides;
      if (options.seed) overrides.push_back("run.seed=" + std::to_string(*options.seed));
      for (const auto& [k, v] : point.settings) overrides.push_back(k + "=" + v);
      check(options.scenario, overrides);
    };
  // One line on stderr, redrawn in place, for a person watching; nothing in a log or a pipe.
  // The per-point lines wait in `pending` and are printed between redraws (the progress line
  // cleared first), so that they never land after it on the same terminal line.
  std::ostringstream pending;
  const bool tty = ::isatty(STDERR_FILENO);
  if (tty)
    options.on_progress = [&pending](std::size_t done, std::size_t total, double elapsed_s) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
      std::cout << pending.str() << std::flush;
      pending.str("");
      std::fprintf(stderr, "%s%s", analysis::sweep_progress_line(done, total, elapsed_s).c_str(),
                   done == total ? "\n" : "");
      std::fflush(stderr);
    };
  const analysis::SweepResult result =
      analysis::run_sweep(options, axes, analysis::self_runner(),
                          tty ? static_cast<std::ostream&>(pending) : std::cout);
  if (options.part_count > 0) {
    std::cout << "\npart " << options.part_index << " of " << options.part_count << ": "
              << result.points.size() - result.failed() << " of " << result.points.size()
              << " points ok, in " << options.out_dir << "/<point>/\n"
              << "  once every part has run: the same command with --gather instead of --part\n";
    return result.failed() ? kExitFailed : kExitOk;
  }
  std::cout << "\n"
            << result.points.size() - result.failed() << " of " << result.points.size()
            << " points ok; wrote:\n";
  for (const std::string& f : result.files) std::cout << "  " << f << "\n";
  return result.failed() ? kExitFailed : kExitOk;
}

MERIDIAN_COMMAND("sweep", "run `meridian sim` over a grid of settings; table and plots", kUsage,
                 run_sweep_command);

}  // namespace
}  // namespace meridian::cli
