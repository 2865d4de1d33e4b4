// Ensembles over seeds (see ensemble.h).
#include "analysis/ensemble.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "engine/core/error.h"

namespace meridian::analysis {
namespace {

constexpr std::size_t kMaxSeeds = 10000;

std::int64_t parse_seed(const std::string& option, const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError(option + ": expected seeds as N, A-B or a comma list (e.g. 1-20), got '" +
                      text + "'");
  return std::stoll(text);
}

// The run-level figures summarised across seeds, in the order the table shows them.
struct Figure {
  const char* key;
  const char* label;
  bool percent;
  double (*get)(const Summary&);
};
const Figure kFigures[] = {
    {"compute_utilization", "compute utilization", true,
     [](const Summary& s) { return s.compute_utilization; }},
    {"outer_step_utilization", "outer-step utilization (report form)", true,
     [](const Summary& s) { return s.outer_step_utilization; }},
    {"mfu", "MFU", true, [](const Summary& s) { return s.mfu; }},
    {"allreduce_s_p50", "all-reduce p50 (s)", false,
     [](const Summary& s) { return s.allreduce_s.p50; }},
    {"allreduce_s_iqr", "all-reduce within-run IQR, p75 - p25 (s)", false,
     [](const Summary& s) { return s.allreduce_s.iqr(); }},
    {"simulated_s", "simulated time (s)", false, [](const Summary& s) { return s.simulated_s; }},
    {"sync_s_per_outer_step", "sync a node waited per outer step (s)", false,
     [](const Summary& s) { return s.idle_per_outer_step_s.sync; }},
    {"bytes_per_s_mean", "collective bytes/s per node, mean", false,
     [](const Summary& s) { return s.bytes_per_s_per_node.mean; }},
    {"bytes_per_s_peak", "collective bytes/s per node, peak", false,
     [](const Summary& s) { return s.bytes_per_s_per_node.peak; }},
};

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string fmt(const nlohmann::json& v, bool percent) {
  if (!v.is_number()) return "n/a";
  char buf[32];
  if (percent)
    std::snprintf(buf, sizeof buf, "%.1f %%", 100 * v.get<double>());
  else
    std::snprintf(buf, sizeof buf, "%.1f", v.get<double>());
  return buf;
}

}  // namespace

std::vector<int> run_seeds(const SweepRunner& runner, const std::string& scenario,
                           const std::vector<std::int64_t>& seeds,
                           const std::vector<std::string>& args, const std::string& out, int jobs,
                           const std::function<bool()>& stop,
                           const std::function<void(std::size_t k, int status)>& on_done) {
  std::vector<int> codes(seeds.size(), -1);
  std::atomic<std::size_t> next{0};
  std::mutex mu;  // one on_done at a time
  const auto work_on = [&] {
    for (std::size_t k; (k = next++) < seeds.size() && !(stop && stop());) {
      const std::string name = "seed-" + std::to_string(seeds[k]);
      std::vector<std::string> child = {"sim",
                                        scenario,
                                        "--out",
                                        (std::filesystem::path(out) / name).string(),
                                        "--force",
                                        "--seed",
                                        std::to_string(seeds[k])};
      child.insert(child.end(), args.begin(), args.end());
      codes[k] = runner(child, (std::filesystem::path(out) / (name + ".log")).string());
      std::lock_guard<std::mutex> lock(mu);
      if (on_done) on_done(k, codes[k]);
    }
  };
  std::exception_ptr error;  // the first, rethrown once every worker has ended
  const auto work = [&] {
    try {
      work_on();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      next = seeds.size();  // start nothing more
    }
  };
  std::vector<std::thread> workers;
  for (int j = 1; j < jobs; ++j) workers.emplace_back(work);
  work();
  for (std::thread& t : workers) t.join();
  if (error) std::rethrow_exception(error);
  return codes;
}

std::vector<std::int64_t> parse_seed_list(const std::string& option, const std::string& text) {
  std::vector<std::int64_t> seeds;
  std::set<std::int64_t> seen;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    const auto dash = part.find('-');
    const std::int64_t lo = parse_seed(option, part.substr(0, dash));
    const std::int64_t hi =
        dash == std::string::npos ? lo : parse_seed(option, part.substr(dash + 1));
    if (hi < lo)
      throw ConfigError(option + ": range '" + part + "' runs backwards (write " +
                        std::to_string(hi) + "-" + std::to_string(lo) + ")");
    if (hi - lo >= static_cast<std::int64_t>(kMaxSeeds))
      throw ConfigError(option + ": more than " + std::to_string(kMaxSeeds) + " seeds");
    for (std::int64_t s = lo; s <= hi; ++s) {
      if (!seen.insert(s).second)
        throw ConfigError(option + ": seed " + std::to_string(s) + " is listed twice");
      seeds.push_back(s);
      if (seeds.size() > kMaxSeeds)
        throw ConfigError(option + ": more than " + std::to_string(kMaxSeeds) + " seeds");
    }
  }
  if (seeds.empty()) throw ConfigError(option + ": no seed given");
  return seeds;
}

nlohmann::json ensemble_json(const std::vector<EnsembleRun>& runs, const std::string& scenario,
                             const std::string& command) {
  nlohmann::json j;
  j["scenario"] = scenario;
  j["command"] = command;
  j["seeds"] = nlohmann::json::array();
  j["runs"] = nlohmann::json::array();
  std::vector<double> pooled;
  std::map<std::int64_t, std::vector<double>> by_step;  // outer step -> one time per seed
  for (const EnsembleRun& r : runs) {
    j["seeds"].push_back(r.seed);
    nlohmann::json run = {
        {"seed", r.seed}, {"dir", r.dir}, {"status", r.summary ? "ok" : "failed"}};
    if (r.summary) {
      for (const Figure& f : kFigures) run[f.key] = num(f.get(*r.summary));
      for (const OuterStepStats& st : r.summary->steps) {
        pooled.push_back(st.allreduce_s);
        by_step[st.outer_step].push_back(st.allreduce_s);
      }
    }
    j["runs"].push_back(run);
  }
  j["metrics"] = nlohmann::json::object();
  for (const Figure& f : kFigures) {
    std::vector<double> values;
    for (const EnsembleRun& r : runs)
      if (r.summary && std::isfinite(f.get(*r.summary))) values.push_back(f.get(*r.summary));
    const Distribution d = distribution(values);
    j["metrics"][f.key] = {{"median", num(d.p50)},
                           {"p5", num(percentile(values, 0.05))},
                           {"p25", num(percentile(values, 0.25))},
                           {"p75", num(percentile(values, 0.75))},
                           {"p95", num(percentile(values, 0.95))},
                           {"min", num(d.min)},
                           {"max", num(d.max)},
                           {"count", d.count}};
  }
  const Distribution p = distribution(pooled);
  j["allreduce_s_pooled"] = {{"p10", num(p.p10)},
                             {"p50", num(p.p50)},
                             {"p90", num(p.p90)},
                             {"mean", num(p.mean)},
                             {"count", p.count}};
  j["allreduce_s_by_step"] = nlohmann::json::array();
  for (const auto& [step, values] : by_step) {
    const Distribution d = distribution(values);
    j["allreduce_s_by_step"].push_back({{"outer_step", step},
                                        {"count", d.count},
                                        {"p10", num(d.p10)},
                                        {"p50", num(d.p50)},
                                        {"p90", num(d.p90)}});
  }
  return j;
}

std::vector<EnsembleRow> ensemble_rows(const nlohmann::json& e) {
  std::vector<EnsembleRow> rows;
  for (const Figure& f : kFigures) {
    // An ensemble written before a figure existed has no entry for it: no row.
    if (!e["metrics"].contains(f.key)) continue;
    const auto& m = e["metrics"][f.key];
    rows.push_back({f.label, fmt(m["median"], f.percent), fmt(m["p5"], f.percent),
                    fmt(m["p95"], f.percent), fmt(m["min"], f.percent), fmt(m["max"], f.percent)});
  }
  return rows;
}

std::string ensemble_heading(const nlohmann::json& e) {
  std::size_t ok = 0;
  for (const auto& r : e["runs"]) ok += r["status"] == "ok";
  return "Ensemble of `" + e["scenario"].get<std::string>() + "` over " +
         std::to_string(e["runs"].size()) + " seeds (" + std::to_string(ok) + " ran)";
}

std::string ensemble_pooled_text(const nlohmann::json& e) {
  const auto& p = e["allreduce_s_pooled"];
  return "All-reduce time per outer step (slowest node), every outer step of every run pooled (" +
         std::to_string(p["count"].get<std::size_t>()) + " steps): p10 " + fmt(p["p10"], false) +
         " s, p50 " + fmt(p["p50"], false) + " s, p90 " + fmt(p["p90"], false) + " s.";
}

std::string ensemble_markdown(const nlohmann::json& e) {
  std::ostringstream out;
  out << ensemble_heading(e) << "\n\nCommand: `" << e["command"].get<std::string>()
      << "`\n\n| figure | median | 90 % interval (p5 – p95) | min | max |\n|---|--:|--:|--:|--:|\n";
  for (const EnsembleRow& r : ensemble_rows(e))
    out << "| " << r.label << " | " << r.median << " | " << r.p5 << " – " << r.p95 << " | " << r.min
        << " | " << r.max << " |\n";
  out << "\n" << ensemble_pooled_text(e) << "\n";
  return out.str();
}

}  // namespace meridian::analysis
