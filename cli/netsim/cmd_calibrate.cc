// `meridian calibrate SCENARIO.yaml --fit KEY=LO:HI ... --observed FILE`: fits scenario inputs
// to what a run has seen (its events, or a YAML of quantiles) by searching over seeded ensembles,
// and writes the calibrated scenario and a page comparing observed and simulated figures.
// The search, the observations and the residual are netsim/calibrate.h; the simulations are
// `meridian sim` children (analysis::run_seeds), as for `meridian sim --seeds`.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "analysis/ensemble.h"
#include "analysis/events.h"
#include "analysis/summary.h"
#include "analysis/sweep.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/interrupt.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/run_folder.h"
#include "engine/config/reader.h"
#include "engine/core/error.h"
#include "netsim/calibrate.h"
#include "netsim/scenario.h"

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;
namespace cal = netsim::calibrate;

struct CalibrateArgs {
  std::string scenario, observed, out, seeds_text = "1-10", simgrid_log = "critical";
  std::vector<cal::FitInput> inputs;
  std::vector<std::string> overrides;
  std::vector<std::string> args;  // as given, for the command line
  int evaluations = 40, jobs = 0;
  std::uint64_t search_seed = 1;
  bool force = false;
};

std::unique_ptr<Options> options(CalibrateArgs& o) {
  auto opts = std::make_unique<Options>(
      "meridian calibrate",
      std::vector<std::string>{"SCENARIO.yaml --fit KEY=LO:HI[:log] [--fit ...] --observed FILE "
                               "[--seeds LIST] [--evaluations N] [--search-seed N] [--jobs N] "
                               "[--set key.path=value ...] [--out DIR] [--force] "
                               "[--simgrid-log L]"},
      "Fits scenario inputs to what a run has seen. Each point of the search is an ensemble "
      "(`meridian sim --seeds`); its figures are the medians over the seeds of each run's own "
      "all-reduce quantiles and outer-step utilization, compared with the observed ones by the "
      "root mean square of their log ratios (idle time 1 - u for the utilization).");
  opts->argument("SCENARIO.yaml", "the scenario whose inputs are fitted", o.scenario)
      .value(
          "--fit", "KEY=LO:HI[:log]",
          "an input to fit and its range, any `--set` key path, e.g. "
          "network.access_bandwidth_gbps[0]=0.5:8 (a list's element), "
          "network.variation.access_cv=0:1; :log searches the range on a log scale "
          "(repeatable)",
          [&o](const std::string&, const std::string& v) { o.inputs.push_back(cal::parse_fit(v)); })
      .text("--observed", "FILE",
            "what was seen: a run folder (a simulation's, or a real run's output folder of "
            "node-<ID>/events.jsonl) or its events.jsonl or summary.json (the all-reduce p5, "
            "p25, p50, p75, p95 and the outer-step utilization), or a YAML file: allreduce_s: "
            "{p5: .., p25: .., p50: .., p75: .., p95: ..}, outer_step_utilization: 0.957, "
            "source: \"...\" (any subset of p5, p10, p25, p50, p75, p90, p95)",
            o.observed)
      .text("--seeds", "LIST", "seeds of each point's ensemble (default 1-10; 1-20, 1,3,5, 1-3,10)",
            o.seeds_text)
      .integer("--evaluations", "N",
               "points to simulate (default 40): a Latin hypercube design, then a compass search "
               "from the best point; the scenario as given is simulated once more, for the page",
               o.evaluations, 1, 10000)
      .integer("--search-seed", "N", "seeds the design (default 1); same arguments, same result",
               o.search_seed, 0, ~std::uint64_t{0})
      .integer("--jobs", "N", "simulations at a time (default: one per CPU)", o.jobs, 1, 256)
      .texts("--set", "k=v", "fixed overrides of the scenario (as for `meridian sim`)", o.overrides)
      .text("--out", "DIR", "the output folder (default runs/<name>-calibration)", o.out)
      .flag("--force", "write over a folder that holds a calibration", o.force)
      .text("--simgrid-log", "L", "SimGrid's log threshold in the simulations (default critical)",
            o.simgrid_log)
      .notes(
          "Writes DIR/calibrated.yaml (the scenario with the fitted values, their provenance "
          "in its header, relative paths rebased to DIR), DIR/calibration.md (observed "
          "against simulated, as given and fitted; also on stdout), DIR/calibration.json and "
          "DIR/evaluations.jsonl (every point: values, figures, residual). Progress on a "
          "terminal. Exit 0 when a fit was found.");
  return opts;
}

// A parsed command line.
CalibrateArgs parse_options(const std::vector<std::string>& args) {
  CalibrateArgs o;
  o.args = args;
  options(o)->parse(args);
  if (o.inputs.empty()) throw ConfigError("nothing to fit: give --fit KEY=LO:HI");
  if (o.observed.empty()) throw ConfigError("no observations: give --observed FILE");
  for (std::size_t i = 0; i < o.inputs.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (o.inputs[i].key == o.inputs[j].key)
        throw ConfigError("--fit: '" + o.inputs[i].key + "' is given twice");
  return o;
}

// What was seen, from a run folder, its events or summary, or a YAML of quantiles.
cal::Observation load_observation(const std::string& path) {
  fs::path p = path;
  std::error_code ec;
  const auto from_events = [&] {
    return cal::observation_from_summary(
        analysis::to_json(analysis::summarize(analysis::read_events_file(p.string()))), p.string());
  };
  if (fs::is_directory(p, ec)) {  // a simulation's folder, or a real run's (node-<ID>/ files)
    if (!analysis::has_events(p.string()))
      throw ConfigError("--observed: '" + p.string() +
                        "' holds no events.jsonl (a simulation's) and no node-<ID>/events.jsonl "
                        "(a real run's)");
    return from_events();
  }
  if (!fs::exists(p, ec)) throw ConfigError("--observed: '" + p.string() + "' does not exist");
  const std::string ext = p.extension().string();
  if (ext == ".jsonl") return from_events();
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  if (ext == ".json") {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(p.string() + ": not JSON: " + e.what());
    }
    return cal::observation_from_summary(j, p.string());
  }
  cal::Observation o = cal::observation_from_yaml(text.str(), p.string());
  if (o.source.empty()) o.source = p.string();
  return o;
}

std::string yaml_quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

// A fitted network.variation key needs a source: the scenario's own (`sc`, as loaded with the
// fixed overrides), plus what was fitted.
std::vector<std::string> source_overrides(const CalibrateArgs& o, const netsim::Scenario& sc,
                                          const cal::Observation& observed) {
  std::string fitted;
  for (const cal::FitInput& in : o.inputs)
    if (in.key.rfind("network.variation.", 0) == 0)
      fitted += (fitted.empty() ? "" : ", ") + in.key.substr(18);
  if (fitted.empty()) return {};
  std::string source = sc.network.variation.source;
  source += (source.empty() ? "" : "; ") + fitted + ": fitted by meridian calibrate to " +
            observed.source;
  return {"network.variation.source=" + yaml_quoted(source)};
}

struct Evaluation {
  int index = 0;  // 0: the scenario as given
  std::vector<double> values;
  std::string status = "ok";  // or why it has no figures
  double residual = std::numeric_limits<double>::infinity();
  std::optional<cal::Simulated> simulated;
  double wall_s = 0;

  nlohmann::json to_json(const std::vector<cal::FitInput>& inputs) const {
    nlohmann::json v = nlohmann::json::object();
    for (std::size_t i = 0; i < values.size(); ++i) v[inputs[i].key] = values[i];
    return {{"index", index},
            {"values", v},
            {"status", status},
            {"residual", std::isfinite(residual) ? nlohmann::json(residual) : nlohmann::json()},
            {"simulated", simulated ? simulated->to_json() : nlohmann::json()},
            {"wall_s", wall_s}};
  }
};

// Runs the ensemble of one point and compares it with the observations.
class Evaluator {
 public:
  Evaluator(const CalibrateArgs& o, const cal::Observation& observed,
            std::vector<std::int64_t> seeds, std::vector<std::string> fixed, int jobs)
      : o_(o),
        observed_(observed),
        seeds_(std::move(seeds)),
        fixed_(std::move(fixed)),
        jobs_(jobs),
        runner_(analysis::self_runner()) {}

  // `settings`: the point's overrides (none for the scenario as given). `on_seed(done)` after
  // each seed's run.
  Evaluation run(int index, const std::vector<double>& values,
                 const std::vector<std::string>& settings,
                 const std::function<void(std::size_t)>& on_seed) {
    Evaluation ev;
    ev.index = index;
    ev.values = values;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> overrides = fixed_;
    overrides.insert(overrides.end(), settings.begin(), settings.end());
    try {
      netsim::load_scenario(o_.scenario, overrides);  // a point outside what the scenario allows
    } catch (const ConfigError& e) {
      ev.status = std::string("not a valid scenario: ") + e.what();
      return ev;
    }
    const fs::path dir = fs::path(o_.out) / "work" / ("eval-" + std::to_string(index));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw ConfigError(dir.string() + ": cannot create the folder: " + ec.message());
    std::vector<std::string> args = {"--simgrid-log", o_.simgrid_log};
    for (const std::string& s : overrides) args.insert(args.end(), {"--set", s});
    std::size_t done = 0;
    const std::vector<int> codes = analysis::run_seeds(
        runner_, o_.scenario, seeds_, args, dir.string(), jobs_,
        [] { return InterruptScope::received() != 0; }, [&](std::size_t, int) { on_seed(++done); });
    std::vector<nlohmann::json> summaries;
    for (std::size_t k = 0; k < seeds_.size() && ev.status == "ok"; ++k) {
      const std::string name = "seed-" + std::to_string(seeds_[k]);
      if (codes[k] != 0) {
        ev.status = codes[k] < 0 ? "interrupted"
                                 : "seed " + std::to_string(seeds_[k]) + " failed (exit " +
                                       std::to_string(codes[k]) + ")";
        break;
      }
      std::ifstream in(dir / name / "summary.json");
      try {
        summaries.push_back(nlohmann::json::parse(in));
      } catch (const nlohmann::json::exception& e) {
        ev.status = "seed " + std::to_string(seeds_[k]) + ": summary.json: " + e.what();
      }
    }
    if (ev.status == "ok") {
      ev.simulated = cal::simulated_from_summaries(summaries);
      ev.residual = cal::residual(observed_, *ev.simulated);
      fs::remove_all(dir, ec);  // the runs are rebuilt by `meridian sim calibrated.yaml --seeds`
    }
    ev.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ev;
  }

 private:
  const CalibrateArgs& o_;
  const cal::Observation& observed_;
  std::vector<std::int64_t> seeds_;
  std::vector<std::string> fixed_;
  int jobs_;
  analysis::SweepRunner runner_;
};

// The scenario file with the fitted values set, its relative paths rebased to `out`.
std::string calibrated_yaml(const CalibrateArgs& o, const std::vector<std::string>& settings,
                            const std::string& header) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(o.scenario);
  } catch (const YAML::Exception& e) {
    throw ConfigError(o.scenario + ": " + e.what());
  }
  for (const std::string& s : settings) config::apply_override(root, s, "calibrate");
  const fs::path from = fs::absolute(fs::path(o.scenario)).parent_path();
  const fs::path to = fs::absolute(fs::path(o.out));
  const auto rebase = [&](YAML::Node node) {
    if (!node || !node.IsScalar() || node.Scalar().empty()) return;
    const fs::path p = node.Scalar();
    if (p.is_absolute()) return;
    node = (from / p).lexically_normal().lexically_relative(to).string();
  };
  rebase(root["network"]["sites_from"]);
  rebase(root["network"]["platform_xml"]);
  rebase(root["churn"]["trace"]);
  rebase(root["output"]["dir"]);
  if (root["model"] && root["model"].IsMap()) {
    const YAML::Node config = root["model"]["config"];
    if (config && config.IsScalar() && config.Scalar().find('/') != std::string::npos)
      rebase(root["model"]["config"]);
  }
  YAML::Emitter e;
  e << root;
  return header + e.c_str() + "\n";
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// calibration.md: the inputs, and observed against simulated figures, as given and fitted.
std::string page(const CalibrateArgs& o, const cal::Observation& observed, const Evaluation& given,
                 const Evaluation& best, int evaluations, double wall_s,
                 const std::string& command) {
  std::ostringstream m;
  m << "# Calibration of `" << o.scenario << "`\n\n"
    << "Observed: `" << o.observed << "` (" << observed.source << "). Each point: seeds "
    << o.seeds_text << "; " << evaluations << " points in " << ProgressLine::duration_text(wall_s)
    << ". Command: `" << command << "`\n\n"
    << "| input | range | fitted |\n|---|---|---|\n";
  for (std::size_t i = 0; i < o.inputs.size(); ++i)
    m << "| `" << o.inputs[i].key << "` | " << fmt("%g", o.inputs[i].lo) << " to "
      << fmt("%g", o.inputs[i].hi) << (o.inputs[i].log ? " (log)" : "") << " | "
      << (best.values.empty() ? "n/a" : fmt("%.4g", best.values[i])) << " |\n";
  m << "\n| figure | observed | as given | fitted |\n|---|---|---|---|\n";
  const auto sim = [](const Evaluation& e, const std::string& q) -> std::string {
    if (!e.simulated || !e.simulated->allreduce_s.count(q)) return "n/a";
    return fmt("%.1f", e.simulated->allreduce_s.at(q));
  };
  for (const std::string& q : cal::quantile_names()) {
    const auto it = observed.allreduce_s.find(q);
    m << "| all-reduce " << q << " (s) | "
      << (it == observed.allreduce_s.end() ? "" : fmt("%.1f", it->second)) << " | " << sim(given, q)
      << " | " << sim(best, q) << " |\n";
  }
  const auto util = [](const Evaluation& e) {
    return e.simulated ? fmt("%.1f %%", 100 * e.simulated->outer_step_utilization) : "n/a";
  };
  m << "| outer-step utilization | "
    << (observed.outer_step_utilization ? fmt("%.1f %%", 100 * *observed.outer_step_utilization)
                                        : "")
    << " | " << util(given) << " | " << util(best) << " |\n"
    << "| residual (RMS of log ratios) | | "
    << (std::isfinite(given.residual) ? fmt("%.3f", given.residual) : given.status) << " | "
    << (std::isfinite(best.residual) ? fmt("%.3f", best.residual) : "n/a") << " |\n\n"
    << "Each simulated figure is the median over the seeds of that run's own figure (a run's "
       "spread in time against the observed run's). The calibrated scenario: `calibrated.yaml`; "
       "every point: `evaluations.jsonl`.\n";
  return m.str();
}

// calibration.json, calibrated.yaml and calibration.md (also on stdout) from the search.
int write_results(const CalibrateArgs& o, const cal::Observation& observed, const Evaluation& given,
                  const Evaluation& best, int evaluations, double wall_s,
                  const std::string& command, const std::vector<std::string>& fixed) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const cal::FitInput& in : o.inputs)
    inputs.push_back({{"key", in.key}, {"lo", in.lo}, {"hi", in.hi}, {"log", in.log}});
  const bool found = !best.values.empty() && std::isfinite(best.residual);
  const nlohmann::json j = {{"scenario", o.scenario},
                            {"command", command},
                            {"observed", observed.to_json()},
                            {"inputs", inputs},
                            {"seeds", o.seeds_text},
                            {"search_seed", o.search_seed},
                            {"evaluations", evaluations},
                            {"wall_s", wall_s},
                            {"interrupted", InterruptScope::received() != 0},
                            {"as_given", given.to_json(o.inputs)},
                            {"best", found ? best.to_json(o.inputs) : nlohmann::json()}};
  std::ofstream(fs::path(o.out) / "calibration.json") << j.dump(2) << "\n";
  const std::string md = page(o, observed, given, best, evaluations, wall_s, command);
  std::ofstream(fs::path(o.out) / "calibration.md") << md;
  std::cout << md;
  std::error_code ec;
  fs::remove(fs::path(o.out) / "work", ec);  // empty unless a point failed (its logs stay)
  if (found) {
    std::ostringstream h;
    h << "# Calibrated by meridian calibrate from " << o.scenario << "\n"
      << "# observed: " << o.observed << " (" << observed.source << ")\n"
      << "# residual " << fmt("%.4f", best.residual) << " (RMS of log ratios), seeds "
      << o.seeds_text << ", " << evaluations << " points\n"
      << "# command: " << command << "\n# fitted (searched range):\n";
    for (std::size_t i = 0; i < o.inputs.size(); ++i)
      h << "#   " << o.inputs[i].key << " = " << fmt("%.6g", best.values[i]) << "  ("
        << fmt("%g", o.inputs[i].lo) << " to " << fmt("%g", o.inputs[i].hi) << ")\n";
    h << "# Everything else as in the scenario; relative paths rebased to this folder.\n";
    std::vector<std::string> settings = fixed;
    for (const std::string& s : cal::settings(o.inputs, best.values)) settings.push_back(s);
    std::ofstream(fs::path(o.out) / "calibrated.yaml") << calibrated_yaml(o, settings, h.str());
    std::cerr << "meridian calibrate: " << (fs::path(o.out) / "calibrated.yaml").string() << "\n";
  }
  if (const int sig = InterruptScope::received()) {
    std::cerr << "meridian calibrate: interrupted (" << InterruptScope::name(sig) << ") after "
              << evaluations << " points\n";
    return InterruptScope::exit_code(sig);
  }
  if (!found) {
    std::cerr << "meridian calibrate: no point could be simulated (see "
              << (fs::path(o.out) / "evaluations.jsonl").string() << ")\n";
    return kExitFailed;
  }
  return kExitOk;
}

int run_calibrate(const std::vector<std::string>& args) {
  CalibrateArgs o = parse_options(args);
  const std::vector<std::int64_t> seeds = analysis::parse_seed_list("--seeds", o.seeds_text);
  const netsim::Scenario sc = netsim::load_scenario(o.scenario, o.overrides);
  const cal::Observation observed = load_observation(o.observed);
  if (o.out.empty()) o.out = sc.output_dir + "-calibration";
  if (o.jobs == 0)
    o.jobs = static_cast<int>(
        std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, seeds.size()));
  std::vector<std::string> fixed = o.overrides;
  for (const std::string& s : source_overrides(o, sc, observed)) fixed.push_back(s);
  std::vector<double> centre;
  for (const cal::FitInput& in : o.inputs) centre.push_back(in.value_at(0.5));
  std::vector<std::string> centre_settings = fixed;
  for (const std::string& s : cal::settings(o.inputs, centre)) centre_settings.push_back(s);
  try {
    netsim::load_scenario(o.scenario, centre_settings);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("the centre of the --fit ranges is not a valid scenario: ") +
                      e.what());
  }
  claim_run_folder(o.out, o.force);
  std::string command = "meridian calibrate";
  for (const std::string& a : o.args) command += " " + a;

  Evaluator evaluator(o, observed, seeds, fixed, o.jobs);
  cal::Search search(o.inputs.size(), o.evaluations, o.search_seed);
  InterruptScope interrupt;
  ProgressLine progress;
  std::ofstream log(fs::path(o.out) / "evaluations.jsonl");
  const std::size_t total = (o.evaluations + 1) * seeds.size();
  const auto on_seed = [&](int index, std::size_t done) {
    const double best = search.best_residual();
    progress.update(double(index * seeds.size() + done) / total,
                    "point " + std::to_string(index) + " of " + std::to_string(o.evaluations) +
                        (std::isfinite(best) ? ", best residual " + fmt("%.3f", best) : ""));
  };
  const Evaluation given = evaluator.run(0, {}, {}, [&](std::size_t d) { on_seed(0, d); });
  log << given.to_json(o.inputs).dump() << "\n";
  Evaluation best;
  int index = 0;
  while (!InterruptScope::received()) {
    const std::optional<std::vector<double>> u = search.next();
    if (!u) break;
    ++index;
    std::vector<double> values;
    for (std::size_t i = 0; i < u->size(); ++i)  // 6 digits: what `settings` writes
      values.push_back(std::stod(fmt("%.6g", o.inputs[i].value_at((*u)[i]))));
    Evaluation ev = evaluator.run(index, values, cal::settings(o.inputs, values),
                                  [&](std::size_t d) { on_seed(index, d); });
    if (ev.status == "interrupted") break;
    search.tell(ev.residual);
    log << ev.to_json(o.inputs).dump() << "\n" << std::flush;
    if (ev.residual < best.residual) best = ev;
  }
  progress.finish();
  return write_results(o, observed, given, best, index, progress.elapsed_s(), command, fixed);
}

MERIDIAN_COMMAND("calibrate", "fit scenario inputs to what a run has seen (seeded ensembles)",
                 help_of<CalibrateArgs>(options), run_calibrate);

}  // namespace
}  // namespace meridian::cli
