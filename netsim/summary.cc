// Summary metrics from events (see summary.h and engine/events/SCHEMA.md).
// Percentiles use linear interpolation between closest ranks (numpy's default).
#include "netsim/summary.h"

#include <algorithm>
#include <cstdio>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/error.h"

namespace meridian::netsim {

using nlohmann::json;

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

}  // namespace

std::string summarize_events(std::istream& in) {
  json config;
  double end_s = -1;
  int outer_steps = 0;
  std::map<std::int64_t, double> alive_from, alive_to;
  double compute_s = 0;
  std::int64_t tokens = 0, inner_steps = 0;
  // per outer step: inner_s per node, max allreduce_s, participants
  std::map<std::int64_t, std::vector<double>> step_inner;
  std::map<std::int64_t, double> step_ar;
  std::map<std::int64_t, int> step_participants;
  std::map<std::pair<std::int64_t, std::int64_t>, double> bytes_per_node_step;
  std::map<std::pair<std::int64_t, std::int64_t>, int> participants_per_node_step;

  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    json e;
    try {
      e = json::parse(line);
    } catch (const json::exception& ex) {
      throw ProtocolError("events line " + std::to_string(line_no) + ": " + ex.what());
    }
    const std::string type = e.value("type", "");
    const std::int64_t node = e.value("node", std::int64_t{-1});
    const double t = e.value("t", 0.0);
    if (type == "config") {
      config = e;
    } else if (type == "node_started") {
      if (!alive_from.count(node)) alive_from[node] = t;
    } else if (type == "admitted") {
      if (!alive_from.count(node)) alive_from[node] = t;
    } else if (type == "node_left") {
      alive_to[node] = t;
    } else if (type == "inner_steps") {
      compute_s += e.at("compute_s").get<double>();
      tokens += e.at("tokens").get<std::int64_t>();
      inner_steps += e.at("steps").get<std::int64_t>();
    } else if (type == "outer_step") {
      const auto k = e.at("outer_step").get<std::int64_t>();
      step_inner[k].push_back(e.at("inner_s").get<double>());
      step_ar[k] = std::max(step_ar[k], e.at("allreduce_s").get<double>());
      step_participants[k] = std::max(step_participants[k], e.at("participants").get<int>());
      participants_per_node_step[{node, k}] = e.at("participants").get<int>();
    } else if (type == "allreduce") {
      bytes_per_node_step[{node, e.at("outer_step").get<std::int64_t>()}] +=
          e.at("bytes_sent").get<double>();
    } else if (type == "run_finished") {
      end_s = e.at("simulated_s").get<double>();
      outer_steps = e.at("outer_steps").get<int>();
    }
  }
  if (config.is_null()) throw ProtocolError("events: no config record");
  if (end_s < 0) throw ProtocolError("events: no run_finished record");
  const json& m = config.at("metrics");
  const double param_count = m.at("param_count").get<double>();
  const double H = m.at("H").get<double>();

  double alive_total = 0;
  for (auto& [n, from] : alive_from) {
    auto it = alive_to.find(n);
    alive_total += (it != alive_to.end() ? it->second : end_s) - from;
  }

  std::vector<double> ar, util;
  std::vector<double> participants;
  for (auto& [k, inner] : step_inner) {
    const double ti = mean(inner), ta = step_ar[k];
    ar.push_back(ta);
    util.push_back(ti + ta > 0 ? ti / (ti + ta) : 0.0);
    participants.push_back(step_participants[k]);
  }
  double measured = 0, ddp = 0;
  std::vector<double> per_node_step;
  for (auto& [key, bytes] : bytes_per_node_step) {
    per_node_step.push_back(bytes);
    measured += bytes;
    auto p = participants_per_node_step.find(key);
    const double n = p != participants_per_node_step.end() ? p->second : 1;
    ddp += 2.0 * (n - 1) / n * 4.0 * param_count * H;
  }
  const double gpus = m.at("gpus_per_node").get<double>();
  const double peak = m.at("peak_flops_per_gpu").get<double>();
  const double fpt = m.at("flops_per_token").get<double>();

  json s;
  s["compute_utilization"] = alive_total > 0 ? compute_s / alive_total : 0.0;
  s["outer_step_utilization"] = mean(util);
  s["mfu"] = alive_total > 0 ? fpt * double(tokens) / (alive_total * gpus * peak) : 0.0;
  s["allreduce_s"] = {{"p10", percentile(ar, 0.1)},
                      {"p50", percentile(ar, 0.5)},
                      {"p90", percentile(ar, 0.9)},
                      {"mean", mean(ar)}};
  s["inner_step_s"] = inner_steps > 0 ? compute_s / double(inner_steps) : 0.0;
  s["wire_bytes_per_node_per_outer_step"] = mean(per_node_step);
  s["bandwidth_reduction_vs_ddp"] = measured > 0 ? ddp / measured : 0.0;
  s["tokens"] = tokens;
  s["simulated_s"] = end_s;
  s["simulated_days"] = end_s / 86400.0;
  s["nodes"] = {
      {"min",
       participants.empty() ? 0.0 : *std::min_element(participants.begin(), participants.end())},
      {"max",
       participants.empty() ? 0.0 : *std::max_element(participants.begin(), participants.end())},
      {"mean", mean(participants)},
      {"time_averaged_alive", end_s > 0 ? alive_total / end_s : 0.0}};
  s["outer_steps"] = outer_steps;
  const json& net = config.at("config").at("network");
  s["network"] = {{"model", net.at("model")},
                  {"tcp_gamma_bytes", net.at("tcp_gamma_bytes")},
                  {"crosstraffic", net.at("crosstraffic")}};
  s["scenario"] = config.at("config").at("run").at("name");
  s["seed"] = config.at("seed");
  return s.dump(2) + "\n";
}

std::string summary_table(const std::string& summary_json) {
  json s = json::parse(summary_json);
  std::ostringstream os;
  char buf[256];
  auto row = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof buf, "  %-36s %s\n", k, v.c_str());
    os << buf;
  };
  auto num = [&](double v, const char* fmt) {
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  os << "scenario " << s["scenario"].get<std::string>() << " (seed " << s["seed"] << ", "
     << s["network"]["model"].get<std::string>() << ", TCP window "
     << num(s["network"]["tcp_gamma_bytes"].get<double>() / 1048576.0, "%.1f MiB") << ")\n";
  row("simulated time",
      num(s["simulated_s"], "%.0f s") + " (" + num(s["simulated_days"], "%.2f days") + ")");
  row("outer steps", std::to_string(s["outer_steps"].get<int>()));
  row("nodes min / mean / max", num(s["nodes"]["min"], "%.0f") + " / " +
                                    num(s["nodes"]["mean"], "%.2f") + " / " +
                                    num(s["nodes"]["max"], "%.0f"));
  row("inner step", num(s["inner_step_s"], "%.2f s"));
  row("all-reduce p10 / p50 / p90 / mean",
      num(s["allreduce_s"]["p10"], "%.1f") + " / " + num(s["allreduce_s"]["p50"], "%.1f") + " / " +
          num(s["allreduce_s"]["p90"], "%.1f") + " / " + num(s["allreduce_s"]["mean"], "%.1f s"));
  row("outer-step utilization (report form)",
      num(100 * s["outer_step_utilization"].get<double>(), "%.1f %%"));
  row("compute utilization", num(100 * s["compute_utilization"].get<double>(), "%.1f %%"));
  row("MFU", num(100 * s["mfu"].get<double>(), "%.1f %%"));
  row("wire bytes / node / outer step",
      num(s["wire_bytes_per_node_per_outer_step"].get<double>() / 1e9, "%.2f GB"));
  row("bandwidth reduction vs DDP", num(s["bandwidth_reduction_vs_ddp"], "%.0fx"));
  row("tokens", num(s["tokens"].get<double>() / 1e9, "%.2f B"));
  return os.str();
}

}  // namespace meridian::netsim
