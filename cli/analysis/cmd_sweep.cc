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
#include "cli/command.h"
#include "cli/options.h"
#include "cli/run_folder.h"
#include "cli/scenario_check.h"
#include "cli/slurm.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

struct SweepArgs {
  analysis::SweepOptions sweep;
  std::vector<analysis::SweepAxis> axes;
  bool force = false;
};

std::unique_ptr<Options> options(SweepArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian sweep",
      std::vector<std::string>{"SCENARIO.yaml --set KEY=V1,V2,... [--set ...] [--out DIR] "
                               "[--seed N] [--no-plots] [--title TEXT] [--pdf] [--force] "
                               "[--part I/N|slurm | --gather]"},
      "Runs `meridian sim SCENARIO.yaml --out DIR/<point> --set KEY=V ...` for every point of the "
      "grid (the cartesian product of the --set lists; a single value is applied to every "
      "point), then writes DIR/sweep.csv, DIR/sweep.md and, for each key with several values, "
      "DIR/plots/sweep_<key>.png|svg: utilization and MFU against that value. Every point's "
      "settings are checked (the scenario loaded with them) before any runs. Each point's output "
      "is in DIR/<point>.log. On a terminal, stderr shows a progress line (points done, ETA).");
  analysis::SweepOptions& s = a.sweep;
  o->argument("SCENARIO.yaml", "the scenario", s.scenario)
      .value("--set", "KEY=V1,V2,...", "one axis of the grid (repeatable)",
             [&a](const std::string&, const std::string& v) {
               a.axes.push_back(analysis::parse_sweep_axis(v));
             })
      .text("--out", "DIR", "the sweep's folder (default runs/sweep)", s.out_dir)
      .value("--seed", "N", "overrides run.seed in every point",
             [&s](const std::string& n, const std::string& v) {
               try {
                 std::size_t used = 0;
                 s.seed = std::stoll(v, &used);
                 if (used != v.size()) throw std::invalid_argument(v);
               } catch (const std::exception&) {
                 throw ConfigError(n + " '" + v + "': expected an integer");
               }
             })
      .flag("--no-plots", "no figures (then gnuplot is not needed)", [&s] { s.plots = false; })
      .text("--title", "TEXT", "a title above every sweep plot", s.plot.title)
      .flag("--pdf", "also write each plot as PDF", [&s] { s.plot.pdf = true; })
      .flag("--force", "write into DIR even if it holds another sweep (its points are replaced)",
            a.force)
      .value("--part", "I/N|slurm",
             "run only points number I, I+N, ... of the grid (from 0), each leaving its exit "
             "status in DIR/<point>.exit; no table yet. `slurm`: this task's share of a Slurm job "
             "array (scripts/slurm/README.md)",
             [&s](const std::string& n, const std::string& v) {
               const slurm::Part p = slurm::parse_part(n, v, slurm::process_env());
               s.part_index = p.index;
               s.part_count = p.count;
             })
      .flag("--gather", "run nothing: the table and plots of the points the parts ran in DIR",
            s.gather)
      .notes(
          "Exit status 1 when a point failed (the others are still in the table).\n\n"
          "example:\n"
          "  meridian sweep scenarios/intellect1-global.yaml --set diloco.H=50,100,500 \\\n"
          "    --set diloco.codec=fp32,int8 --out results/sweep-H-codec");
  return o;
}

// Parses the command line into `a`; ConfigError when it will not run.
void parse_sweep_args(const std::vector<std::string>& args, SweepArgs& a) {
  const auto o = options(a);
  o->parse(args);
  analysis::SweepOptions& options = a.sweep;
  if (!std::ifstream(options.scenario))
    throw ConfigError(options.scenario + ": cannot read the scenario file");
  bool have_sim = false;
  for (const Command& c : commands()) have_sim |= c.name == "sim";
  if (!have_sim)
    throw ConfigError(
        "this meridian has no `sim` command (it was built without the simulator); "
        "reconfigure with -DMERIDIAN_WITH_SIMGRID=ON");
  if (a.axes.empty()) throw ConfigError("nothing to sweep: give --set KEY=V1,V2\n" + o->usage());
}

int run_sweep_command(const std::vector<std::string>& args) {
  SweepArgs a;
  parse_sweep_args(args, a);
  analysis::SweepOptions& options = a.sweep;
  const std::vector<analysis::SweepAxis>& axes = a.axes;
  const bool force = a.force;

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

MERIDIAN_COMMAND("sweep", "run `meridian sim` over a grid of settings; table and plots",
                 help_of<SweepArgs>(options), run_sweep_command);

}  // namespace
}  // namespace meridian::cli
