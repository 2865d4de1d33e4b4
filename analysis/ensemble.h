// Ensembles: one scenario simulated under several seeds (`meridian sim FILE --seeds 1-20`), and
// the distributions across them: each run-level figure's median and 90 % interval over the
// seeds, and the per-outer-step all-reduce times of every run pooled. Comparing two geographies
// means comparing two ensembles, not two draws. Not a runner of its own: the command starts one
// `meridian sim` per seed (the sweep's self_runner) and hands the summaries here.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "analysis/sweep.h"

namespace meridian::analysis {

// "1-20", "3", "1,4,9", "1-3,10": seeds in the order given, each at most once. ConfigError
// (naming `option`) for anything else, a descending range, or more than 10,000 seeds.
std::vector<std::int64_t> parse_seed_list(const std::string& option, const std::string& text);

// Runs `meridian sim SCENARIO --out OUT/seed-<S> --force --seed S ARGS...` once per seed with
// `runner`, up to `jobs` at once (each child's output in OUT/seed-<S>.log). Each seed's run is the
// same whatever runs beside it. Returns each seed's exit status, in seed-list order; -1 for a
// seed never started because `stop()` said so (an interrupt). `on_done(k, status)` runs after
// seed k ends, one call at a time.
std::vector<int> run_seeds(const SweepRunner& runner, const std::string& scenario,
                           const std::vector<std::int64_t>& seeds,
                           const std::vector<std::string>& args, const std::string& out, int jobs,
                           const std::function<bool()>& stop,
                           const std::function<void(std::size_t k, int status)>& on_done);

struct EnsembleRun {
  std::int64_t seed = 0;
  std::string dir;                 // the run's folder (relative to the ensemble's)
  std::optional<Summary> summary;  // none when the run failed
};

// ensemble.json: `seeds`, `runs` (seed, folder, status and the run-level figures), `metrics`
// ({median, p5, p25, p75, p95, min, max, count} over the seeds that ran, for
// compute_utilization, outer_step_utilization, mfu, allreduce_s_p50, allreduce_s_iqr (each
// run's p75 - p25 of its outer steps' all-reduce: how much one run varies in time),
// simulated_s, sync_s_per_outer_step, bytes_per_s_mean, bytes_per_s_peak),
// `allreduce_s_pooled` (p10, p50, p90, mean, count over every outer step of every run) and
// `allreduce_s_by_step` (per outer step number, in order: {outer_step, count, p10, p50, p90}
// over the seeds whose run has that step). Percentiles as summary.h's (type 7). Deterministic
// for a seed list: nothing in it depends on wall time.
nlohmann::json ensemble_json(const std::vector<EnsembleRun>& runs, const std::string& scenario,
                             const std::string& command);

// The figures of the ensemble table, in order, formatted (percentages, seconds; "n/a" where
// none): what ensemble.md and the ensemble's report.html both show.
struct EnsembleRow {
  std::string label, median, p5, p95, min, max;
};
std::vector<EnsembleRow> ensemble_rows(const nlohmann::json& ensemble);

// "Ensemble of `x.yaml` over 6 seeds (5 ran)", and the pooled all-reduce sentence below the
// table ("All-reduce time per outer step ... p10 1.0 s, p50 2.0 s, p90 3.0 s.").
std::string ensemble_heading(const nlohmann::json& ensemble);
std::string ensemble_pooled_text(const nlohmann::json& ensemble);

// ensemble.md: the same as a table a person reads (percentages, seconds).
std::string ensemble_markdown(const nlohmann::json& ensemble);

}  // namespace meridian::analysis
