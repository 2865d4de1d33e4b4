// `meridian calibrate`: fits named scenario inputs (access bandwidths, variation parameters, a
// loss class, ...) to what a run has seen, by searching over seeded ensembles of simulations.
// Here: the pieces that do not run a simulator, so that they are tested on their own: the fitted
// inputs and their ranges, the observations, the residual between observed and simulated
// quantiles, and the search (an ask/tell loop). The command (cli/netsim/cmd_calibrate.cc) runs
// one `meridian sim` child per seed and point, as `meridian sim --seeds` does.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace meridian::netsim::calibrate {

// One input to fit: a scenario key (any `--set` key path, e.g. "network.variation.access_cv" or
// "network.access_bandwidth_gbps[1]") and its range. `log`: searched on a log scale (lo > 0).
struct FitInput {
  std::string key;
  double lo = 0, hi = 0;
  bool log = false;

  double value_at(double unit) const;  // unit in [0, 1] (clamped) -> the range
};

// "KEY=LO:HI" or "KEY=LO:HI:log". ConfigError (naming --fit and the text) for a missing '=',
// an empty key, a range that is not two finite numbers with LO < HI, or :log with LO <= 0.
FitInput parse_fit(const std::string& text);

// The `--set` arguments that give `values` (one per input, in order) to the inputs.
std::vector<std::string> settings(const std::vector<FitInput>& inputs,
                                  const std::vector<double>& values);

// What a run saw: quantiles of its per-outer-step all-reduce time (the slowest node's, in
// seconds; any of p5, p10, p25, p50, p75, p90, p95) and its outer-step utilization (in (0, 1)).
struct Observation {
  std::map<std::string, double> allreduce_s;  // "p50" -> 103
  std::optional<double> outer_step_utilization;
  std::string source;  // where the numbers come from (a file, a paper's table)
  nlohmann::json to_json() const;
};

// The quantile names an observation may give, in order.
const std::vector<std::string>& quantile_names();

// From a YAML mapping's text: `allreduce_s: {p50: 103, p25: 93, ...}`,
// `outer_step_utilization: 0.957` (or 95.7 %: a number > 1 is read as a percentage),
// `source: "..."`. ConfigError naming `file` and the key for unknown keys, non-positive or
// non-finite quantiles, quantiles out of order, or neither figure given.
Observation observation_from_yaml(const std::string& text, const std::string& file);

// From a run's summary.json (analysis::to_json of `meridian report`'s summary): the all-reduce
// quantiles p5, p25, p50, p75, p95 and the outer-step utilization. ConfigError when the run has
// fewer than 4 outer steps with an all-reduce (its quantiles say nothing).
Observation observation_from_summary(const nlohmann::json& summary, const std::string& file);

// What an ensemble of simulated runs gives for the same figures: each figure is the median over
// the runs of that run's own value, so a run's spread in time is compared with the observed
// run's spread, not with the spread between seeds.
struct Simulated {
  std::map<std::string, double> allreduce_s;
  double outer_step_utilization = 0;
  std::size_t runs = 0;
  nlohmann::json to_json() const;
};
// ConfigError when `summaries` is empty.
Simulated simulated_from_summaries(const std::vector<nlohmann::json>& summaries);

// The misfit: the root mean square of ln(simulated / observed) over the observed quantiles and,
// when observed, of ln(simulated idle / observed idle) for the utilization (idle = 1 - u: 95 %
// against 97.5 % is a factor 2 of idle time, as 200 s against 100 s is). 0 is a perfect fit;
// 0.1 is about 10 % off on average. Infinity when a simulated figure is missing or not positive.
double residual(const Observation& observed, const Simulated& simulated);

// The search, in the unit cube of the inputs: a Latin hypercube design (its first point the
// centre), then a compass search from the best point (poll ±step along each axis, move on the
// first improvement, halve the step when none; stop below 1/64). Deterministic for a seed.
// Ask with next(), then tell() the residual of the point it gave.
class Search {
 public:
  Search(std::size_t dims, int budget, std::uint64_t seed);
  std::optional<std::vector<double>> next();  // none when the budget is spent or the search ended
  void tell(double residual);
  const std::vector<double>& best() const { return best_; }
  double best_residual() const { return best_residual_; }
  int evaluations() const { return evaluations_; }

 private:
  void fill_poll();
  std::size_t dims_;
  int budget_;
  int evaluations_ = 0;
  std::vector<std::vector<double>> queue_;  // points to ask, in order
  std::vector<std::vector<double>> seen_;   // every point told so far
  std::vector<double> pending_;             // the point last asked
  bool designing_ = true;
  double step_ = 0.25;
  std::vector<double> best_;
  double best_residual_;
};

}  // namespace meridian::netsim::calibrate
