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
#include <optional>
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
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/run_folder.h"
#include "cli/slurm.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"

namespace meridian::cli {
namespace {

// An ensemble's settings: `--seeds` and what goes with it.
struct EnsembleArgs {
  std::string path;  // the scenario
  std::vector<std::int64_t> seeds;
  std::vector<std::string> overrides;
  std::string out;
  bool force = false, plots = true, gather = false;
  std::optional<slurm::Part> part;  // --part: only this share of the seeds
  std::string simgrid_log;
  int jobs = 1;
  std::string command;  // the command line, for ensemble.json
};

std::filesystem::path seed_file(const EnsembleArgs& e, std::int64_t seed, const char* suffix) {
  return std::filesystem::path(e.out) / ("seed-" + std::to_string(seed) + suffix);
}

// Runs the seeds (those of --part, when given) as `meridian sim` children, each into
// DIR/seed-<N> (SimGrid runs once per process). Returns each seed's exit status, -1 for a seed
// this process did not run.
std::vector<int> run_seeds(const EnsembleArgs& e) {
  std::vector<std::int64_t> mine;
  std::vector<std::size_t> index;  // mine[k] is e.seeds[index[k]]
  for (std::size_t k = 0; k < e.seeds.size(); ++k)
    if (!e.part || slurm::owns(*e.part, k)) {
      mine.push_back(e.seeds[k]);
      index.push_back(k);
    }
  ProgressLine progress;
  std::vector<std::string> child_args = {"--simgrid-log", e.simgrid_log};
  for (const std::string& o : e.overrides) child_args.insert(child_args.end(), {"--set", o});
  std::size_t done = 0;
  progress.update(0.0, "0 of " + std::to_string(mine.size()) + " seeds", true);
  // The runs are listed in seed-list order, so the ensemble does not depend on `jobs`.
  const std::vector<int> codes = analysis::run_seeds(
      analysis::self_runner(), e.path, mine, child_args, e.out, e.jobs,
      [] { return InterruptScope::received() != 0; },
      [&](std::size_t k, int code) {
        ++done;
        if (code != 0) {
          progress.clear();
          std::cerr << "meridian sim: seed " << mine[k] << " failed (exit " << code << "), see "
                    << seed_file(e, mine[k], ".log").string() << "\n";
        }
        progress.update(double(done) / mine.size(),
                        std::to_string(done) + " of " + std::to_string(mine.size()) + " seeds (" +
                            std::to_string(e.jobs) + " at a time)",
                        true);
      });
  progress.finish();
  std::vector<int> all(e.seeds.size(), -1);
  for (std::size_t k = 0; k < mine.size(); ++k) all[index[k]] = codes[k];
  return all;
}

// DIR/ensemble.json and .md (and the figures) from the seeds' runs; `codes` as run_seeds().
int write_ensemble(const EnsembleArgs& e, const std::vector<int>& codes) {
  std::vector<analysis::EnsembleRun> runs;
  for (std::size_t k = 0; k < e.seeds.size(); ++k) {
    if (codes[k] < 0) continue;  // never started
    const std::string name = "seed-" + std::to_string(e.seeds[k]);
    analysis::EnsembleRun run{e.seeds[k], name, std::nullopt};
    if (codes[k] == 0)
      run.summary = analysis::summarize(analysis::read_events_file(
          (std::filesystem::path(e.out) / name / "events.jsonl").string()));
    runs.push_back(std::move(run));
  }
  const nlohmann::json j = analysis::ensemble_json(runs, e.path, e.command);
  std::ofstream(std::filesystem::path(e.out) / "ensemble.json") << j.dump(2) << "\n";
  const std::string md = analysis::ensemble_markdown(j);
  std::ofstream(std::filesystem::path(e.out) / "ensemble.md") << md;
  std::cout << md << "  runs: " << e.out << "/seed-<N>/\n";
  if (e.plots) {
    const std::string plots_dir = (std::filesystem::path(e.out) / "plots").string();
    const auto files = analysis::plot_ensembles({analysis::load_ensemble(e.out)}, plots_dir,
                                                analysis::PlotOptions());
    std::cout << "  figures: " << files.size() << " files in " << plots_dir << "\n";
  }
  if (const int sig = InterruptScope::received()) {
    std::cerr << "meridian sim: interrupted (" << InterruptScope::name(sig) << ") after "
              << runs.size() << " of " << e.seeds.size() << " seeds\n";
    return InterruptScope::exit_code(sig);
  }
  for (const auto& r : runs)
    if (!r.summary) return kExitFailed;
  return kExitOk;
}

// --gather: the exit status each part wrote beside its seeds (DIR/seed-<N>.exit); ConfigError
// naming the seeds that have none (their part has not run, or ran with other --seeds).
std::vector<int> gathered_codes(const EnsembleArgs& e) {
  std::error_code ec;
  if (!std::filesystem::is_directory(e.out, ec))
    throw ConfigError("--gather: " + e.out + " is not a folder (--out: where the parts ran)");
  std::vector<int> codes;
  std::string missing;
  for (std::int64_t seed : e.seeds) {
    const std::optional<int> code = analysis::read_exit_status(seed_file(e, seed, ".exit"));
    if (!code || *code < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(seed);
    codes.push_back(code && *code >= 0 ? *code : -1);
  }
  if (!missing.empty())
    throw ConfigError("--gather: " + e.out + " has no finished run of seed(s) " + missing +
                      " (no seed-<N>.exit): a part has not finished, did not start, or ran other "
                      "--seeds; run it (--part I/N) and gather again");
  return codes;
}

// `--seeds`: the whole ensemble in this process's children, one part of it (`--part`: a task of
// a job array; each seed's exit status is written to DIR/seed-<N>.exit), or the ensemble of
// parts that ran (`--gather`). A gathered ensemble is the one a single process would have made.
int run_ensemble(const EnsembleArgs& e) {
  if (e.plots && !e.part) {
    try {
      analysis::find_gnuplot(analysis::PlotOptions().gnuplot);  // before the seeds run
    } catch (const ConfigError& err) {
      throw ConfigError(std::string(err.what()) + " (or --no-plots)");
    }
  }
  if (e.gather) return write_ensemble(e, gathered_codes(e));
  claim_run_folder(e.out, e.force);
  InterruptScope interrupt;
  const std::vector<int> codes = run_seeds(e);
  if (!e.part) return write_ensemble(e, codes);
  int ok = 0, failed = 0;
  std::string ran;
  for (std::size_t k = 0; k < e.seeds.size(); ++k) {
    if (codes[k] < 0) continue;
    analysis::write_exit_status(seed_file(e, e.seeds[k], ".exit"), codes[k]);
    (codes[k] == 0 ? ok : failed) += 1;
    ran += (ran.empty() ? "" : ",") + std::to_string(e.seeds[k]);
  }
  std::cout << "part " << e.part->index << " of " << e.part->count << ": seeds "
            << (ran.empty() ? "(none)" : ran) << " ran, " << ok << " ok, " << failed
            << " failed, in " << e.out << "/seed-<N>/\n"
            << "  once every part has run: meridian sim " << e.path
            << " --seeds <the same LIST> --out " << e.out << " --gather\n";
  if (const int sig = InterruptScope::received()) return InterruptScope::exit_code(sig);
  return failed == 0 ? kExitOk : kExitFailed;
}

// What `meridian sim` was asked.
struct SimArgs {
  std::string path, out;
  std::vector<std::string> overrides;  // --set, and --seed as run.seed=
  std::string simgrid_log = "critical";
  std::string seeds_text;
  bool force = false, plots = true, print_config = false, gather = false;
  std::optional<slurm::Part> part;
  int jobs = 0;  // --jobs; 0: the default
};

std::unique_ptr<Options> options(SimArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian sim",
      std::vector<std::string>{"SCENARIO.yaml [--out DIR] [--force] [--seed N | --seeds LIST] "
                               "[--no-plots] [--jobs N] [--set key.path=value ...] "
                               "[--simgrid-log L] [--print-config] [--part I/N|slurm | --gather]"},
      "Simulates the scenario (SimGrid network model, modelled compute, churn trace); with "
      "`worker: torch` every node also trains a real LibTorch model (emulation). Writes "
      "DIR/events.jsonl and DIR/summary.json; prints a summary table.");
  o->argument("SCENARIO.yaml", "the scenario (a run file)", a.path)
      .text("--out", "DIR", "output folder (default: the scenario's output.dir, else runs/<name>)",
            a.out)
      .flag("--force",
            "write into a folder that already holds a run (its events.jsonl and summary.json are "
            "replaced; other files stay)",
            a.force)
      .value("--seed", "N", "overrides run.seed",
             [&a](const std::string&, const std::string& v) {
               a.overrides.push_back("run.seed=" + v);
             })
      .text("--seeds", "LIST",
            "an ensemble: one run per seed (1-20, 1,3,5 or 1-3,10) in DIR/seed-<N>/ (default "
            "DIR: runs/<name>-seeds), then DIR/ensemble.json and DIR/ensemble.md: each figure's "
            "median and 90 % interval over the seeds, the per-outer-step all-reduce times of all "
            "runs pooled; and its figures in DIR/plots (`meridian plot DIR`: box plots across "
            "the seeds, the per-outer-step all-reduce band)",
            a.seeds_text)
      .flag("--no-plots", "with --seeds: no figures (then gnuplot is not needed)",
            [&a] { a.plots = false; })
      .integer("--jobs", "N",
               "with --seeds: seeds run N at a time (default: one per CPU); the ensemble is the "
               "same for any N",
               a.jobs, 1, 256)
      .value("--part", "I/N|slurm",
             "with --seeds: run only seeds number I, I+N, I+2N, ... of LIST (from 0), each into "
             "DIR/seed-<N> with its exit status in DIR/seed-<N>.exit; no ensemble yet. `slurm`: "
             "this task's share of a Slurm job array (sbatch --array; scripts/slurm/ensemble.sh "
             "submits one and its gather)",
             [&a](const std::string& n, const std::string& v) {
               a.part = slurm::parse_part(n, v, slurm::process_env());
             })
      .flag("--gather",
            "with --seeds: run nothing; the ensemble of the parts that ran in DIR (every seed "
            "must have run), the same as one process would have made",
            a.gather)
      .texts("--set", "k=v", "overrides any scenario key, e.g. --set diloco.H=500 (repeatable)",
             a.overrides)
      .text("--simgrid-log", "L",
            "SimGrid's log threshold (default critical; info shows "
            "deadlocks)",
            a.simgrid_log)
      .flag("--print-config",
            "the resolved configuration (every key, defaults included, as the run's `config` "
            "record has it) as JSON on stdout, then exit without running",
            a.print_config);
  return o;
}

// --seeds: the ensemble's settings, checked.
EnsembleArgs ensemble_args(const SimArgs& a, const netsim::Scenario& sc,
                           const std::vector<std::string>& args) {
  const std::vector<std::int64_t> seeds = analysis::parse_seed_list("--seeds", a.seeds_text);
  for (const std::string& o : a.overrides)
    if (o.rfind("run.seed=", 0) == 0) throw ConfigError("--seeds and --seed: give one of them");
  if (a.part && a.gather) throw ConfigError("--part and --gather: give one of them");
  EnsembleArgs e;
  e.path = a.path;
  e.seeds = seeds;
  e.overrides = a.overrides;
  e.out = a.out.empty() ? sc.output_dir + "-seeds" : a.out;
  e.force = a.force;
  e.plots = a.plots;
  e.gather = a.gather;
  e.part = a.part;
  e.simgrid_log = a.simgrid_log;
  // Default: one child per CPU, no more than there are seeds.
  e.jobs = a.jobs != 0 ? a.jobs
                       : static_cast<int>(std::clamp<std::size_t>(
                             std::thread::hardware_concurrency(), 1, seeds.size()));
  e.command = "meridian sim";
  for (const std::string& arg : args) e.command += " " + arg;
  return e;
}

// One run of the scenario: events.jsonl and summary.json in its folder, the summary's table on
// stdout.
int run_one(const SimArgs& a, netsim::Scenario& sc, const std::vector<std::string>& args) {
  if (a.part || a.gather)
    throw ConfigError(std::string(a.gather ? "--gather" : "--part") + ": only with --seeds");
  if (!a.plots) throw ConfigError("--no-plots: only with --seeds (a single run draws no figures)");
  if (a.jobs != 0) throw ConfigError("--jobs: only with --seeds (a single run is one process)");
  const std::string out = a.out.empty() ? sc.output_dir : a.out;
  claim_run_folder(out, a.force);  // before any work: never over another run unless --force
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

  std::string command = "meridian sim " + a.path;
  for (auto& arg : args)
    if (arg != a.path) command += " " + arg;
  JsonlEventSink sink(events);
  InterruptScope interrupt;
  ProgressLine progress;
  opts.command = command;
  opts.simgrid_log = a.simgrid_log;
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

int run_sim(const std::vector<std::string>& args) {
  SimArgs a;
  options(a)->parse(args);
  netsim::Scenario sc = netsim::load_scenario(a.path, a.overrides);
  for (const std::string& note : sc.notes_for(config::Mode::kSimulate))
    std::cerr << "meridian sim: " << note << "\n";
  if (a.print_config) {
    std::cout << nlohmann::json::parse(sc.to_json().str()).dump(2) << "\n";
    return kExitOk;
  }
  if (!a.seeds_text.empty()) return run_ensemble(ensemble_args(a, sc, args));
  return run_one(a, sc, args);
}

MERIDIAN_COMMAND("sim", "simulate a scenario on the SimGrid network model",
                 help_of<SimArgs>(options), run_sim);

}  // namespace
}  // namespace meridian::cli
