// Ensembles: one scenario simulated under several seeds (`meridian sim FILE --seeds 1-20`), and
// the distributions across them: each run-level figure's median and 90 % interval over the
// seeds, and the per-outer-step all-reduce times of every run pooled. Comparing two geographies
// means comparing two ensembles, not two draws. Not a runner of its own: the command starts one
// `meridian sim` per seed (the sweep's self_runner) and hands the summaries here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace meridian::analysis {

// "1-20", "3", "1,4,9", "1-3,10": seeds in the order given, each at most once. ConfigError
// (naming `option`) for anything else, a descending range, or more than 10,000 seeds.
std::vector<std::int64_t> parse_seed_list(const std::string& option, const std::string& text);

struct EnsembleRun {
  std::int64_t seed = 0;
  std::string dir;                 // the run's folder (relative to the ensemble's)
  std::optional<Summary> summary;  // none when the run failed
};

// ensemble.json: `seeds`, `runs` (seed, folder, status and the run-level figures), `metrics`
// ({median, p5, p95, min, max, count} over the seeds that ran, for compute_utilization,
// outer_step_utilization, mfu, allreduce_s_p50, simulated_s) and `allreduce_s_pooled` (p10,
// p50, p90, mean, count over every outer step of every run). Deterministic for a seed list:
// nothing in it depends on wall time.
nlohmann::json ensemble_json(const std::vector<EnsembleRun>& runs, const std::string& scenario,
                             const std::string& command);

// ensemble.md: the same as a table a person reads (percentages, seconds).
std::string ensemble_markdown(const nlohmann::json& ensemble);

}  // namespace meridian::analysis
