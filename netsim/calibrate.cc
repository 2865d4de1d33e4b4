#include "netsim/calibrate.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/util/splitmix64.h"

namespace meridian::netsim::calibrate {
namespace {

double number(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = std::numeric_limits<double>::quiet_NaN();
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(v))
    throw ConfigError(what + ": '" + text + "' is not a finite number");
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double unit(std::uint64_t& state) { return double(splitmix64(state) >> 11) * 0x1.0p-53; }

}  // namespace

double FitInput::value_at(double u) const {
  u = std::clamp(u, 0.0, 1.0);
  if (log) return std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)));
  return lo + u * (hi - lo);
}

FitInput parse_fit(const std::string& text) {
  const std::string what = "--fit '" + text + "'";
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(what + ": expected KEY=LO:HI or KEY=LO:HI:log");
  FitInput in;
  in.key = text.substr(0, eq);
  std::vector<std::string> parts;
  std::stringstream rest(text.substr(eq + 1));
  for (std::string p; std::getline(rest, p, ':');) parts.push_back(p);
  if (parts.size() == 3 && parts[2] == "log")
    in.log = true;
  else if (parts.size() != 2)
    throw ConfigError(what + ": expected KEY=LO:HI or KEY=LO:HI:log");
  in.lo = number(parts[0], what + ": LO");
  in.hi = number(parts[1], what + ": HI");
  if (!(in.lo < in.hi)) throw ConfigError(what + ": LO must be below HI");
  if (in.log && in.lo <= 0) throw ConfigError(what + ": a log range needs LO > 0");
  return in;
}

std::vector<std::string> settings(const std::vector<FitInput>& inputs,
                                  const std::vector<double>& values) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::ostringstream s;
    s.precision(6);
    s << inputs[i].key << "=" << values.at(i);
    out.push_back(s.str());
  }
  return out;
}

const std::vector<std::string>& quantile_names() {
  static const std::vector<std::string> names = {"p5", "p10", "p25", "p50", "p75", "p90", "p95"};
  return names;
}

nlohmann::json Observation::to_json() const {
  nlohmann::json j;
  j["allreduce_s"] = allreduce_s;
  j["outer_step_utilization"] =
      outer_step_utilization ? nlohmann::json(*outer_step_utilization) : nlohmann::json();
  j["source"] = source;
  return j;
}

Observation observation_from_yaml(const std::string& text, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file + ": not YAML: " + e.what());
  }
  if (!root.IsMap())
    throw ConfigError(file + ": expected a mapping with allreduce_s and outer_step_utilization");
  Observation o;
  const auto scalar = [&](const YAML::Node& n, const std::string& key) {
    if (!n.IsScalar()) throw ConfigError(file + ": key '" + key + "': expected a number");
    return number(n.Scalar(), file + ": key '" + key + "'");
  };
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (key == "allreduce_s") {
      if (!it->second.IsMap())
        throw ConfigError(file + ": key 'allreduce_s': expected a mapping of quantiles (p50: 103)");
      for (auto q = it->second.begin(); q != it->second.end(); ++q) {
        const std::string name = q->first.Scalar();
        const auto& names = quantile_names();
        if (std::find(names.begin(), names.end(), name) == names.end())
          throw ConfigError(file + ": key 'allreduce_s." + name +
                            "': unknown quantile (p5, p10, p25, p50, p75, p90 or p95)");
        const double v = scalar(q->second, "allreduce_s." + name);
        if (v <= 0)
          throw ConfigError(file + ": key 'allreduce_s." + name + "': expected seconds > 0");
        o.allreduce_s[name] = v;
      }
    } else if (key == "outer_step_utilization") {
      double u = scalar(it->second, key);
      if (u > 1) u /= 100;  // written as a percentage
      if (!(u > 0 && u < 1))
        throw ConfigError(file + ": key '" + key +
                          "': expected a fraction in (0, 1) or a percentage");
      o.outer_step_utilization = u;
    } else if (key == "source") {
      o.source = it->second.Scalar();
    } else {
      throw ConfigError(file + ": unknown key '" + key +
                        "' (an observation has allreduce_s, outer_step_utilization and source)");
    }
  }
  double last = 0;
  std::string last_name;
  for (const std::string& name : quantile_names()) {
    auto it = o.allreduce_s.find(name);
    if (it == o.allreduce_s.end()) continue;
    if (it->second < last)
      throw ConfigError(file + ": key 'allreduce_s." + name + "': " + std::to_string(it->second) +
                        " s is below " + last_name + " (quantiles must not decrease)");
    last = it->second;
    last_name = name;
  }
  if (o.allreduce_s.empty() && !o.outer_step_utilization)
    throw ConfigError(file +
                      ": nothing to fit to (give allreduce_s quantiles or outer_step_utilization)");
  return o;
}

Observation observation_from_summary(const nlohmann::json& summary, const std::string& file) {
  const nlohmann::json& a = summary.value("allreduce_s", nlohmann::json::object());
  const std::int64_t count = a.value("count", std::int64_t{0});
  if (count < 4)
    throw ConfigError(file + ": " + std::to_string(count) +
                      " outer steps with an all-reduce; a calibration needs at least 4");
  Observation o;
  for (const char* name : {"p5", "p25", "p50", "p75", "p95"}) {
    const nlohmann::json& v = a.value(name, nlohmann::json());
    if (!v.is_number() || !(v.get<double>() > 0))
      throw ConfigError(file + ": all-reduce " + name + " is missing or not positive");
    o.allreduce_s[name] = v.get<double>();
  }
  const nlohmann::json& u = summary.value("outer_step_utilization", nlohmann::json());
  if (u.is_number() && u.get<double>() > 0 && u.get<double>() < 1)
    o.outer_step_utilization = u.get<double>();
  o.source = file;
  return o;
}

nlohmann::json Simulated::to_json() const {
  return {{"allreduce_s", allreduce_s},
          {"outer_step_utilization", outer_step_utilization},
          {"runs", runs}};
}

Simulated simulated_from_summaries(const std::vector<nlohmann::json>& summaries) {
  if (summaries.empty()) throw ConfigError("no simulated run to compare with");
  Simulated s;
  s.runs = summaries.size();
  for (const std::string& name : quantile_names()) {
    std::vector<double> v;
    for (const nlohmann::json& j : summaries) {
      const nlohmann::json& x =
          j.value("allreduce_s", nlohmann::json::object()).value(name, nlohmann::json());
      if (x.is_number()) v.push_back(x.get<double>());
    }
    if (v.size() == summaries.size()) s.allreduce_s[name] = median(v);
  }
  std::vector<double> u;
  for (const nlohmann::json& j : summaries) u.push_back(j.value("outer_step_utilization", 0.0));
  s.outer_step_utilization = median(u);
  return s;
}

double residual(const Observation& observed, const Simulated& simulated) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double sum = 0;
  int terms = 0;
  for (const auto& [name, obs] : observed.allreduce_s) {
    auto it = simulated.allreduce_s.find(name);
    if (it == simulated.allreduce_s.end() || !(it->second > 0)) return kInf;
    const double d = std::log(it->second / obs);
    sum += d * d;
    ++terms;
  }
  if (observed.outer_step_utilization) {
    const double idle_sim = 1 - simulated.outer_step_utilization;
    if (!(idle_sim > 0)) return kInf;
    const double d = std::log(idle_sim / (1 - *observed.outer_step_utilization));
    sum += d * d;
    ++terms;
  }
  return terms ? std::sqrt(sum / terms) : kInf;
}

Search::Search(std::size_t dims, int budget, std::uint64_t seed)
    : dims_(dims), budget_(budget), best_residual_(std::numeric_limits<double>::infinity()) {
  if (dims == 0) throw ConfigError("calibrate: nothing to fit (give --fit KEY=LO:HI)");
  if (budget < 1) throw ConfigError("calibrate: --evaluations must be at least 1");
  // The design: the centre, then a Latin hypercube of max(2 d + 2, 6) points (a third of the
  // budget at most), each axis's strata in a seeded random order.
  const int n = std::max(1, std::min<int>(std::max<int>(2 * int(dims) + 2, 6), budget / 3));
  queue_.push_back(std::vector<double>(dims, 0.5));
  std::uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 1;
  std::vector<std::vector<int>> order(dims);
  for (auto& o : order) {
    for (int k = 0; k < n; ++k) o.push_back(k);
    for (int k = n - 1; k > 0; --k) std::swap(o[k], o[splitmix64(rng) % (k + 1)]);
  }
  for (int k = 0; k < n; ++k) {
    std::vector<double> p(dims);
    for (std::size_t d = 0; d < dims; ++d) p[d] = (order[d][k] + unit(rng)) / n;
    queue_.push_back(p);
  }
}

void Search::fill_poll() {
  queue_.clear();
  if (best_.empty()) return;  // no point had a finite residual: nothing to poll around
  while (step_ >= 1.0 / 64) {
    for (std::size_t d = 0; d < dims_; ++d)
      for (double sign : {+1.0, -1.0}) {
        std::vector<double> p = best_;
        p[d] = std::clamp(p[d] + sign * step_, 0.0, 1.0);
        if (std::find(seen_.begin(), seen_.end(), p) == seen_.end() &&
            std::find(queue_.begin(), queue_.end(), p) == queue_.end())
          queue_.push_back(p);
      }
    if (!queue_.empty()) return;
    step_ /= 2;  // every neighbour at this step was seen already
  }
}

std::optional<std::vector<double>> Search::next() {
  if (evaluations_ >= budget_) return std::nullopt;
  if (queue_.empty()) {
    if (designing_) {
      designing_ = false;
      fill_poll();
    }
    if (queue_.empty()) return std::nullopt;
  }
  pending_ = queue_.front();
  queue_.erase(queue_.begin());
  return pending_;
}

void Search::tell(double r) {
  ++evaluations_;
  seen_.push_back(pending_);
  const bool better = r < best_residual_;
  if (better) {
    best_residual_ = r;
    best_ = pending_;
  }
  if (designing_) return;
  if (better) {
    fill_poll();  // poll around the new best at the same step
  } else if (queue_.empty()) {
    step_ /= 2;  // no neighbour was better: look closer
    fill_poll();
  }
}

}  // namespace meridian::netsim::calibrate
