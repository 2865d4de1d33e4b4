// `meridian sim SCENARIO.yaml`: runs a scenario on the SimGrid model and writes
// DIR/events.jsonl and DIR/summary.json; progress on stderr, a summary table on stdout.
// Not a sweep driver: one scenario, one run per invocation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "analysis/ensemble.h"
#include "analysis/events.h"
#include "analysis/plots.h"
#include "analysis/summary.h"
#include "analysis/sweep.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/compose/simulation.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/run_folder.h"
#include "engine/error.h"
#include "engine/events/event_sink.h"
#include "engine/events/sinks/sinks.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian sim SCENARIO.yaml [--out DIR] [--force] [--seed N | --seeds LIST]\n"
    "                    [--no-plots] [--jobs N] [--set key.path=value ...] [--simgrid-log L]\n"
    "                    [--print-config]\n"
    "  Simulates the scenario (SimGrid network model, modelled compute, churn trace);\n"
    "  with `worker: torch` every node also trains a real LibTorch model (emulation).\n"
    "  --out DIR      output folder (default: the scenario's output.dir, else runs/<name>)\n"
    "  --force        write into a folder that already holds a run (its events.jsonl and\n"
    "                 summary.json are replaced; other files stay)\n"
    "  --seed N       overrides run.seed\n"
    "  --seeds LIST   an ensemble: one run per seed (1-20, 1,3,5 or 1-3,10) in DIR/seed-<N>/\n"
    "                 (default DIR: runs/<name>-seeds), then DIR/ensemble.json and\n"
    "                 DIR/ensemble.md: each figure's median and 90 % interval over the seeds,\n"
    "                 the per-outer-step all-reduce times of all runs pooled; and its figures\n"
    "                 in DIR/plots (`meridian plot DIR`: box plots across the seeds, the\n"
    "                 per-outer-step all-reduce band)\n"
    "  --no-plots     with --seeds: no figures (then gnuplot is not needed)\n"
    "  --jobs N       with --seeds: seeds run N at a time (default: one per CPU); the ensemble\n"
    "                 is the same for any N\n"
    "  --set k=v      overrides any scenario key, e.g. --set diloco.H=500\n"
    "  --simgrid-log L  SimGrid's log threshold (default critical; info shows deadlocks)\n"
    "  --print-config the resolved configuration (every key, defaults included, as the run's\n"
    "                 `config` record has it) as JSON on stdout, then exit without running\n"
    "  Writes DIR/events.jsonl and DIR/summary.json; prints a summary table.\n";

// `--seeds`: one `meridian sim` child per seed (SimGrid runs once per process), each into
// DIR/seed-<N> with the same settings, then the distributions across them (analysis/ensemble.h).
int run_ensemble(const std::string& path, const std::vector<std::int64_t>& seeds,
                 const std::vector<std::string>& overrides, const std::string& out, bool force,
                 bool plots, const std::string& simgrid_log, int jobs,
                 const std::vector<std::string>& args) {
  const analysis::PlotOptions plot_options;
  try {
    if (plots) analysis::find_gnuplot(plot_options.gnuplot);  // before the seeds run
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (or --no-plots)");
  }
  claim_run_folder(out, force);
  std::string command = "meridian sim";
  for (const std::string& a : args) command += " " + a;
  const analysis::SweepRunner runner = analysis::self_runner();
  InterruptScope interrupt;
  ProgressLine progress;
  std::vector<std::string> child_args = {"--simgrid-log", simgrid_log};
  for (const std::string& o : overrides) child_args.insert(child_args.end(), {"--set", o});
  std::size_t done = 0;
  progress.update(0.0, "0 of " + std::to_string(seeds.size()) + " seeds", true);
  // The runs are listed in seed-list order, so the ensemble does not depend on `jobs`.
  const std::vector<int> codes = analysis::run_seeds(
      runner, path, seeds, child_args, out, jobs, [] { return InterruptScope::received() != 0; },
      [&](std::size_t k, int code) {
        ++done;
        if (code != 0) {
          progress.clear();
          std::cerr << "meridian sim: seed " << seeds[k] << " failed (exit " << code << "), see "
                    << (std::filesystem::path(out) / ("seed-" + std::to_string(seeds[k]) + ".log"))
                           .string()
                    << "\n";
        }
        progress.update(double(done) / seeds.size(),
                        std::to_string(done) + " of " + std::to_string(seeds.size()) + " seeds (" +
                            std::to_string(jobs) + " at a time)",
                        true);
      });
  std::vector<analysis::EnsembleRun> runs;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    if (codes[k] < 0) continue;  // never started
    const std::string name = "seed-" + std::to_string(seeds[k]);
    analysis::EnsembleRun run{seeds[k], name, std::nullopt};
    if (codes[k] == 0)
      run.summary = analysis::summarize(analysis::read_events_file(
          (std::filesystem::path(out) / name / "events.jsonl").string()));
    runs.push_back(std::move(run));
  }
  progress.finish();
  const nlohmann::json e = analysis::ensemble_json(runs, path, command);
  std::ofstream(std::filesystem::path(out) / "ensemble.json") << e.dump(2) << "\n";
  const std::string md = analysis::ensemble_markdown(e);
  std::ofstream(std::filesystem::path(out) / "ensemble.md") << md;
  std::cout << md << "  runs: " << out << "/seed-<N>/\n";
  if (plots) {
    const std::string plots_dir = (std::filesystem::path(out) / "plots").string();
    const auto files =
        analysis::plot_ensembles({analysis::load_ensemble(out)}, plots_dir, plot_options);
    std::cout << "  figures: " << files.size() << " files in " << plots_dir << "\n";
  }
  if (const int sig = InterruptScope::received()) {
    std::cerr << "meridian sim: interrupted (" << InterruptScope::name(sig) << ") after "
              << runs.size() << " of " << seeds.size() << " seeds\n";
    return InterruptScope::exit_code(sig);
  }
  for (const auto& r : runs)
    if (!r.summary) return kExitFailed;
  return kExitOk;
}

int run_sim(const std::vector<std::string>& args) {
  std::string path, out;
  std::vector<std::string> overrides;
  std::string simgrid_log = "critical";
  std::string seeds_text;
  bool force = false, plots = true, print_config = false;
  int jobs = 0;  // --jobs; 0: the default
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--out")
      out = value();
    else if (a == "--seed")
      overrides.push_back("run.seed=" + value());
    else if (a == "--seeds")
      seeds_text = value();
    else if (a == "--set")
      overrides.push_back(value());
    else if (a == "--simgrid-log")
      simgrid_log = value();
    else if (a == "--force")
      force = true;
    else if (a == "--no-plots")
      plots = false;
    else if (a == "--print-config")
      print_config = true;
    else if (a == "--jobs")
      jobs = static_cast<int>(opt::integer_in("--jobs", value(), 1, 256));
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return kExitOk;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "meridian sim: unknown option '" << a << "'\n" << kUsage;
      return kExitUsage;
    } else if (path.empty())
      path = a;
    else {
      std::cerr << "meridian sim: more than one scenario given\n" << kUsage;
      return kExitUsage;
    }
  }
  if (path.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  netsim::Scenario sc = netsim::load_scenario(path, overrides);
  for (const std::string& note : sc.notes_for(config::Mode::kSimulate))
    std::cerr << "meridian sim: " << note << "\n";
  if (print_config) {
    std::cout << nlohmann::json::parse(sc.to_json().str()).dump(2) << "\n";
    return kExitOk;
  }
  if (!seeds_text.empty()) {
    const std::vector<std::int64_t> seeds = analysis::parse_seed_list("--seeds", seeds_text);
    for (const std::string& o : overrides)
      if (o.rfind("run.seed=", 0) == 0) throw ConfigError("--seeds and --seed: give one of them");
    if (jobs == 0)  // default: one child per CPU, no more than there are seeds
      jobs = static_cast<int>(std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1,
                                                       seeds.size()));
    return run_ensemble(path, seeds, overrides, out.empty() ? sc.output_dir + "-seeds" : out, force,
                        plots, simgrid_log, jobs, args);
  }
  if (!plots) throw ConfigError("--no-plots: only with --seeds (a single run draws no figures)");
  if (jobs != 0) throw ConfigError("--jobs: only with --seeds (a single run is one process)");
  if (out.empty()) out = sc.output_dir;
  claim_run_folder(out, force);  // before any work: never over another run unless --force
  // `worker: torch` (real training) is resolved here, before SimGrid starts: it tokenizes the
  // corpus and fails with a clear error when this build has no LibTorch.
  const auto prepare0 = std::chrono::steady_clock::now();
  netsim::SimOptions opts = compose::simulation_options(
      sc, [](const std::string& step) { std::cerr << "meridian sim: " << step << "\n"; });
  const double prepare_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - prepare0).count();
  const std::string events_path = (std::filesystem::path(out) / "events.jsonl").string();
  std::ofstream events(events_path, std::ios::binary | std::ios::trunc);
  if (!events) throw ConfigError(events_path + ": cannot write");

  std::string command = "meridian sim " + path;
  for (auto& a : args)
    if (a != path) command += " " + a;
  JsonlEventSink sink(events);
  InterruptScope interrupt;
  ProgressLine progress;
  opts.command = command;
  opts.simgrid_log = simgrid_log;
  opts.interrupt_reason = [] {
    const int sig = InterruptScope::received();
    return sig ? InterruptScope::name(sig) : std::string();
  };
  opts.on_progress = [&](double sim_s, int done, int total) {
    char text[96];
    std::snprintf(text, sizeof text, "outer step %d/%d  %s simulated", done, total,
                  ProgressLine::duration_text(sim_s).c_str());
    progress.update(total > 0 ? double(done) / total : -1, text);
  };
  const netsim::SimOutcome r = netsim::run_simulation(sc, sink, opts);
  progress.finish();
  events.close();
  const double run_wall_s = progress.elapsed_s();
  std::fprintf(stderr, "%.0f simulated s in %.2f wall s (%.0fx), %llu messages", r.simulated_s,
               run_wall_s + prepare_s, run_wall_s > 0 ? r.simulated_s / run_wall_s : 0.0,
               static_cast<unsigned long long>(r.messages));
  if (prepare_s >= 0.05) std::fprintf(stderr, "; %.2f s of it preparing the workers", prepare_s);
  std::fputc('\n', stderr);
  if (!r.interrupted.empty())
    std::fprintf(stderr, "meridian sim: interrupted (%s) after %d of %d outer steps\n",
                 r.interrupted.c_str(), r.outer_steps, r.outer_steps_planned);

  // summary.json comes from the events alone, by the one implementation of SCHEMA.md's metrics
  // (analysis/), exactly as `meridian report` and `meridian sweep` compute it.
  const analysis::Summary summary = analysis::summarize(analysis::read_events_file(events_path));
  std::ofstream(std::filesystem::path(out) / "summary.json")
      << analysis::to_json(summary).dump(2) << "\n";
  std::cout << analysis::summary_table(summary) << "  events: " << events_path << "\n";
  if (!r.interrupted.empty()) return InterruptScope::exit_code(InterruptScope::received());
  return kExitOk;
}

MERIDIAN_COMMAND("sim", "simulate a scenario on the SimGrid network model", kUsage, run_sim);

}  // namespace
}  // namespace meridian::cli
