// summarize(): one pass to group the events by node and by outer step, then the SCHEMA.md
// formulas. Every choice the schema leaves open is written next to the code that makes it.
#include "analysis/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "engine/core/error.h"

namespace meridian::analysis {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double safe_div(double a, double b) { return b > 0 ? a / b : kNaN; }

// Bytes of one (node, outer step): aggregated records (bucket -1) win over per-bucket ones
// so that a writer emitting both is not counted twice. All attempts count: retried bytes
// were on the wire too.
struct WireTally {
  double bucket_sent = 0, bucket_received = 0, bucket_s = 0;
  double agg_sent = 0, agg_received = 0, agg_s = 0;
  bool has_agg = false;
  std::int64_t participants = 0;
  double sent() const { return has_agg ? agg_sent : bucket_sent; }
  double received() const { return has_agg ? agg_received : bucket_received; }
  double elapsed_s() const { return has_agg ? agg_s : bucket_s; }
};

struct NodeLife {
  std::optional<double> started, admitted, left, failed, first_event, last_event;
  bool initial = false;
  bool crashed = false;  // node_left with graceful = false
  std::string host;      // node_started.host
};

// The hosts that start the run, in platform order (config.platform.hosts[].host where `start`
// is true): the simulator gives initial node k the k-th of them (netsim/simulation.cc).
std::vector<std::string> starting_hosts(const nlohmann::json& config) {
  std::vector<std::string> out;
  if (!config.is_object() || !config.contains("platform")) return out;
  const nlohmann::json& platform = config["platform"];
  if (!platform.is_object() || !platform.contains("hosts") || !platform["hosts"].is_array())
    return out;
  for (const nlohmann::json& h : platform["hosts"])
    if (h.is_object() && h.value("start", true) && h.contains("host") && h["host"].is_string())
      out.push_back(h["host"].get<std::string>());
  return out;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double h = (static_cast<double>(values.size()) - 1.0) * std::clamp(p, 0.0, 1.0);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (h - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) {
    d.p10 = d.p50 = d.p90 = d.mean = d.min = d.max = kNaN;
    d.p5 = d.p25 = d.p75 = d.p95 = kNaN;
    return d;
  }
  d.p5 = percentile(values, 0.05);
  d.p10 = percentile(values, 0.10);
  d.p25 = percentile(values, 0.25);
  d.p50 = percentile(values, 0.50);
  d.p75 = percentile(values, 0.75);
  d.p90 = percentile(values, 0.90);
  d.p95 = percentile(values, 0.95);
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.min = *std::min_element(values.begin(), values.end());
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

namespace {

// Summary::idle_per_outer_step_s and bytes_per_s_per_node, once per-node totals are known.
void idle_and_rates(Summary& s, const std::map<std::int64_t, NodeStats>& nodes,
                    const std::map<std::pair<std::int64_t, std::int64_t>, WireTally>& wire,
                    const std::vector<EventRecord>& events) {
  double steps = 0, sync = 0, opt = 0, recovery = 0, idle = 0, alive = 0, sent = 0;
  for (const auto& [id, n] : nodes) {
    steps += static_cast<double>(n.outer_steps);
    sync += n.sync_s, opt += n.outer_opt_s, recovery += n.recovery_s, idle += n.idle_s;
    alive += n.alive_s;
    sent += n.bytes_sent;
  }
  s.idle_per_outer_step_s = {safe_div(sync, steps), safe_div(opt, steps),
                             safe_div(recovery, steps), safe_div(idle, steps)};
  s.bytes_per_s_per_node.mean = safe_div(sent, alive);
  for (const EventRecord& e : events)
    if (const auto* r = e.as<OuterStepRecord>(); r && r->allreduce_s > 0)
      if (const auto w = wire.find({e.node, r->outer_step}); w != wire.end())
        s.bytes_per_s_per_node.peak =
            std::max(s.bytes_per_s_per_node.peak, w->second.sent() / r->allreduce_s);
}

}  // namespace

namespace {

// What one pass over the events gathers, per node, per outer step and for the run.
struct Tally {
  const ConfigRecord* config = nullptr;
  const RunFinishedRecord* finished = nullptr;
  const RunInterruptedRecord* interrupted = nullptr;
  double finished_t = 0, last_t = 0, first_t = std::numeric_limits<double>::infinity();

  std::map<std::int64_t, NodeLife> lives;                       // each node's current life
  std::map<std::int64_t, std::vector<NodeLife>> earlier_lives;  // lives before a run_resumed
  std::map<std::int64_t, NodeStats> nodes;
  std::map<std::pair<std::int64_t, std::int64_t>, WireTally> wire;  // (node, outer step)
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> step_participants;
  std::map<std::int64_t, std::vector<const OuterStepRecord*>> by_step;
  std::map<std::int64_t, double> by_step_t;
  double inner_steps_total = 0, inner_compute_total = 0, inner_tokens_total = 0;
  bool any_inner = false;
  std::set<std::pair<std::int64_t, std::int64_t>> retried;  // (outer step, attempt)
  std::set<std::tuple<std::int64_t, std::int64_t, std::string>> non_finite;  // step, node, action

  // Adds one record (the counters it moves directly go to `s`).
  void add(const EventRecord& e, Summary& s) {
    last_t = std::max(last_t, e.t_s);
    if (e.node >= 0) {
      first_t = std::min(first_t, e.t_s);
      if (const auto* r = e.as<RunResumedRecord>()) {  // a new life of the node begins
        if (lives.count(e.node)) earlier_lives[e.node].push_back(std::exchange(lives[e.node], {}));
        s.resumes.push_back({e.node, e.t_s, r->via, r->from_outer_step});
      }
      NodeLife& life = lives[e.node];
      if (!life.first_event) life.first_event = e.t_s;
      life.last_event = e.t_s;
      nodes[e.node].node = e.node;
    }
    if (const auto* r = e.as<ConfigRecord>()) {
      if (!config) config = r;
    } else if (const auto* r = e.as<RunFinishedRecord>()) {
      finished = r;
      finished_t = e.t_s;
    } else if (const auto* r = e.as<RunInterruptedRecord>()) {
      interrupted = r;
      finished_t = e.t_s;
    } else if (!add_life_record(e, s)) {
      add_work_record(e, s);
    }
  }

  // The records of a node's life: start, admission, leave, failure. False for any other.
  bool add_life_record(const EventRecord& e, Summary& s) {
    if (const auto* r = e.as<NodeStartedRecord>()) {
      NodeLife& life = lives[e.node];
      if (!life.started) life.started = e.t_s;
      life.initial = r->initial;
      if (!r->host.empty()) life.host = r->host;
    } else if (e.as<AdmittedRecord>()) {
      NodeLife& life = lives[e.node];
      if (!life.admitted) life.admitted = e.t_s;
      ++s.joins;
    } else if (e.as<NodeLeftRecord>()) {
      NodeLife& life = lives[e.node];
      if (!life.left) life.left = e.t_s;
      if (e.as<NodeLeftRecord>()->graceful)
        ++s.graceful_leaves;
      else
        life.crashed = true;
    } else if (const auto* r = e.as<FailDetectedRecord>()) {
      NodeLife& life = lives[r->failed];
      if (!life.failed || e.t_s < *life.failed) life.failed = e.t_s;
    } else {
      return false;
    }
    return true;
  }

  // The records of the work: recoveries, inner steps, all-reduces, outer steps and their faults.
  void add_work_record(const EventRecord& e, Summary& s) {
    if (const auto* r = e.as<RecoveryFinishedRecord>()) {
      nodes[e.node].recovery_s += r->elapsed_s;
      ++s.recovery.count;
      s.recovery.total_s += r->elapsed_s;
      s.recovery.max_s = std::max(s.recovery.max_s, r->elapsed_s);
      s.recovery.bytes += r->bytes;
    } else if (const auto* r = e.as<InnerStepsRecord>()) {
      any_inner = true;
      nodes[e.node].compute_s += r->compute_s;
      nodes[e.node].tokens += r->tokens;
      inner_steps_total += static_cast<double>(r->steps);
      inner_compute_total += r->compute_s;
      inner_tokens_total += r->tokens;
    } else if (const auto* r = e.as<AllreduceRecord>()) {
      WireTally& w = wire[{e.node, r->outer_step}];
      if (r->bucket < 0) {
        w.has_agg = true;
        w.agg_sent += r->bytes_sent;
        w.agg_received += r->bytes_received;
        w.agg_s += r->elapsed_s;
      } else {
        w.bucket_sent += r->bytes_sent;
        w.bucket_received += r->bytes_received;
        w.bucket_s += r->elapsed_s;
      }
      w.participants = std::max(w.participants, r->participants);
    } else if (const auto* r = e.as<OuterStepRecord>()) {
      by_step[r->outer_step].push_back(r);
      by_step_t[r->outer_step] = std::max(by_step_t[r->outer_step], e.t_s);
      step_participants[{e.node, r->outer_step}] = r->participants;
      NodeStats& n = nodes[e.node];
      n.allreduce_s += r->allreduce_s;
      n.sync_s += r->sync_s();
      n.outer_opt_s += r->outer_opt_s;
      ++n.outer_steps;
    } else if (const auto* r = e.as<RetryRecord>()) {
      retried.insert({r->outer_step, r->attempt});  // every node reports the same retry
    } else if (e.as<FallbackRecord>()) {
      ++s.fallbacks;
    } else if (const auto* r = e.as<NonFiniteRecord>()) {
      non_finite.insert({r->outer_step, r->node, r->action});  // a step's blame may repeat
    } else if (const auto* r = e.as<NodeLostRecord>()) {
      s.lost.push_back("node " + std::to_string(e.node) + " " + r->exit + " after " +
                       std::to_string(r->outer_steps) + " outer steps: " + r->reason);
    }
  }
};

// The run's identity (its `config` record), its span and how it ended.
void run_span(Summary& s, const Tally& t) {
  s.retries = static_cast<std::int64_t>(t.retried.size());
  for (const auto& [step, node, action] : t.non_finite)
    s.non_finite.push_back("outer step " + std::to_string(step) + ": node " + std::to_string(node) +
                           (action == "abstain" ? " sat out"
                            : action == "evict" ? " evicted (non-finite outer steps in a row)"
                                                : " blamed by a receiver"));
  if (!t.config) throw ConfigError("events: no 'config' record (the first line of events.jsonl)");

  s.mode = t.config->mode;
  s.metrics = t.config->metrics;
  s.config = t.config->config;
  s.versions = t.config->versions;
  s.command = t.config->command;
  s.seed = t.config->seed;

  // The run spans from its first node event to run_finished (or its last event if it crashed).
  s.run_start_s = std::isfinite(t.first_t) ? t.first_t : 0.0;
  // run_interrupted ends the run like run_finished, short of its plan.
  s.complete = t.finished != nullptr;
  s.interrupted = !t.finished && t.interrupted;
  if (s.interrupted) s.interrupted_reason = t.interrupted->reason;
  s.outer_steps_planned = t.finished      ? t.finished->outer_steps_planned
                          : t.interrupted ? t.interrupted->outer_steps_planned
                                          : std::nullopt;
  const bool ended = t.finished || t.interrupted;
  s.run_end_s = ended ? std::max(t.finished_t, s.run_start_s) : t.last_t;
  s.simulated_s = t.finished      ? t.finished->simulated_s
                  : t.interrupted ? t.interrupted->simulated_s
                                  : s.run_end_s - s.run_start_s;
}

// Each node's alive intervals (a node's lives, each from its start to its end); returns the
// +1/-1 steps of the alive count at their times, and adds up `alive_total`.
std::vector<std::pair<double, int>> alive_intervals(Summary& s, Tally& t, double& alive_total) {
  std::vector<std::pair<double, int>> deltas;
  const std::vector<std::string> hosts = starting_hosts(s.config);
  for (auto& [id, n] : t.nodes) {
    std::vector<NodeLife> all = t.earlier_lives[id];
    all.push_back(t.lives[id]);
    n.initial = all.front().initial;
    for (const NodeLife& life : all)
      if (!life.host.empty()) n.host = life.host;
    if (n.host.empty() && n.initial && id >= 0 && id < static_cast<std::int64_t>(hosts.size()))
      n.host = hosts[static_cast<std::size_t>(id)];
    n.alive_s = 0;
    for (std::size_t k = 0; k < all.size(); ++k) {
      const NodeLife& life = all[k];
      const bool last_life = k + 1 == all.size();
      // A joiner's wall time counts from its start: waiting for admission and recovering are
      // time its GPUs are held without computing (the simulator's summary counts the same way).
      std::optional<double> start = life.started ? life.started : life.admitted;
      if (!start) start = life.first_event;  // a writer without lifecycle records
      // An earlier life ends with its last record (the process was stopped or killed), the last
      // life with the run unless it left or failed before.
      double end = last_life ? s.run_end_s : life.last_event.value_or(*start);
      std::string reason = last_life ? "run_end" : "stopped";
      if (life.left && *life.left <= end)
        end = *life.left, reason = life.crashed ? "failed" : "left";
      if (life.failed && *life.failed < end) end = *life.failed, reason = "failed";
      end = std::max(end, *start);
      if (k == 0) n.start_s = *start;
      n.end_s = end;
      n.end_reason = reason;
      n.alive_s += end - *start;
      if (end > *start) {
        deltas.push_back({*start, +1});
        deltas.push_back({end, -1});
      }
      if (reason == "failed") ++s.failures;
    }
    alive_total += n.alive_s;
  }
  return deltas;
}

// The node count as a step function of time (and its extremes), from the alive count's steps.
void node_count(Summary& s, std::vector<std::pair<double, int>> deltas) {
  std::sort(deltas.begin(), deltas.end());
  std::int64_t count = 0;
  double t_prev = s.run_start_s;
  s.nodes.min = std::numeric_limits<std::int64_t>::max();
  s.nodes.max = 0;
  std::size_t i = 0;
  s.node_count.push_back({s.run_start_s, 0});
  while (i < deltas.size()) {
    const double t = deltas[i].first;
    if (t > t_prev) {  // only intervals of positive length count towards min/max
      s.nodes.min = std::min(s.nodes.min, count);
      s.nodes.max = std::max(s.nodes.max, count);
    }
    while (i < deltas.size() && deltas[i].first == t) count += deltas[i++].second;
    if (s.node_count.back().first == t)
      s.node_count.back().second = count;
    else
      s.node_count.push_back({t, count});
    t_prev = t;
  }
  if (s.nodes.min == std::numeric_limits<std::int64_t>::max()) s.nodes.min = 0;
}

// Time with no node alive (a whole-run stop before a resume), and the steps trained twice.
void stopped_and_redone(Summary& s, const std::vector<EventRecord>& events) {
  for (std::size_t i = 0; i < s.node_count.size(); ++i) {
    const double t = s.node_count[i].first;
    const double until = i + 1 < s.node_count.size() ? s.node_count[i + 1].first : s.run_end_s;
    if (s.node_count[i].second == 0 && t >= s.run_start_s && until > t)
      s.stopped_s += std::min(until, s.run_end_s) - t;
  }
  std::map<std::int64_t, double> resumed_from;  // checkpoint step -> its first resume's time
  for (const Summary::Resume& r : s.resumes)
    if (r.from_outer_step && !resumed_from.count(*r.from_outer_step))
      resumed_from[*r.from_outer_step] = r.t_s;
  for (const auto& [from, t] : resumed_from) {
    std::int64_t applied_before = 0;  // outer steps done before that resume
    for (const EventRecord& e : events)
      if (const auto* r = e.as<OuterStepRecord>(); r && e.t_s < t)
        applied_before = std::max(applied_before, r->outer_step + 1);
    s.outer_steps_redone += std::max<std::int64_t>(0, applied_before - from);
  }
}

// Utilization, idle time, tokens and MFU, per node and for the run.
void utilization_and_mfu(Summary& s, Tally& t, double alive_total,
                         const std::vector<EventRecord>& events) {
  double compute_total = 0;
  for (auto& [id, n] : t.nodes) {
    compute_total += n.compute_s;
    n.compute_utilization = safe_div(n.compute_s, n.alive_s);
    n.idle_s = std::max(0.0, n.alive_s - n.compute_s - n.sync_s - n.outer_opt_s - n.recovery_s);
    s.idle_s += n.idle_s;
  }
  s.compute_utilization = safe_div(compute_total, alive_total);
  s.inner_step_s = safe_div(t.inner_compute_total, t.inner_steps_total);
  if (s.recovery.count > 0)
    s.recovery.mean_s = s.recovery.total_s / static_cast<double>(s.recovery.count);

  // Tokens: Σ inner_steps.tokens; runs without inner_steps records fall back to outer_step.tokens.
  s.tokens = t.inner_tokens_total;
  if (!t.any_inner)
    for (const EventRecord& e : events)
      if (const auto* r = e.as<OuterStepRecord>()) {
        s.tokens += r->tokens;
        t.nodes[e.node].tokens += r->tokens;
      }

  // MFU = flops_per_token × tokens/s / (mean GPUs × peak), mean GPUs = mean nodes × GPUs/node.
  // With mean nodes = Σ alive / span this is flops_per_token × tokens / (Σ alive × GPUs × peak).
  s.mfu = safe_div(s.metrics.flops_per_token * s.tokens,
                   alive_total * s.metrics.gpus_per_node * s.metrics.peak_flops_per_gpu);
}

// One outer step's figures from every node's record of it.
OuterStepStats outer_step(const Summary& s, std::int64_t step,
                          const std::vector<const OuterStepRecord*>& recs, double t_end_s,
                          double prev_end) {
  OuterStepStats st;
  st.outer_step = step;
  st.t_end_s = t_end_s;
  st.duration_s = st.t_end_s - prev_end;
  double inner_sum = 0, loss_sum = 0;
  int loss_n = 0;
  for (const OuterStepRecord* r : recs) {
    inner_sum += r->inner_s;
    st.allreduce_s = std::max(st.allreduce_s, r->allreduce_s);
    st.sync_s = std::max(st.sync_s, r->sync_s());
    st.participants = std::max(st.participants, r->participants);
    st.tokens += r->tokens;
    if (r->loss) loss_sum += *r->loss, ++loss_n;
  }
  st.inner_s = inner_sum / static_cast<double>(recs.size());
  st.utilization = safe_div(st.inner_s, st.inner_s + st.sync_s);
  st.compute_utilization = safe_div(st.inner_s, st.duration_s);
  st.mfu = safe_div(s.metrics.flops_per_token * st.tokens,
                    st.duration_s * static_cast<double>(st.participants) * s.metrics.gpus_per_node *
                        s.metrics.peak_flops_per_gpu);
  if (loss_n > 0) st.loss = loss_sum / loss_n;
  return st;
}

// The per-outer-step table, and what the run's figures take from it.
void outer_steps(Summary& s, const Tally& t) {
  std::vector<double> slowest_allreduce;
  double prev_end = s.run_start_s, cumulative = 0, util_sum = 0;
  for (const auto& [step, recs] : t.by_step) {
    OuterStepStats st = outer_step(s, step, recs, t.by_step_t.at(step), prev_end);
    prev_end = st.t_end_s;
    cumulative += st.tokens;
    st.cumulative_tokens = cumulative;
    slowest_allreduce.push_back(st.allreduce_s);
    util_sum += std::isfinite(st.utilization) ? st.utilization : 0.0;
    s.steps.push_back(st);
  }
  s.outer_step_utilization = safe_div(util_sum, static_cast<double>(s.steps.size()));
  // Node-count extremes as the report's node-count figure reads them: the participants of each
  // outer step. The alive-count step function would also see the start-up ramp (nodes register
  // one store round trip apart), a transient no outer step ever ran with.
  if (!s.steps.empty()) {
    const auto [lo, hi] = std::minmax_element(s.steps.begin(), s.steps.end(),
                                              [](const OuterStepStats& a, const OuterStepStats& b) {
                                                return a.participants < b.participants;
                                              });
    s.nodes.min = lo->participants;
    s.nodes.max = hi->participants;
    // The mean of the same population, weighted by each step's wall time, so that it lies
    // between them: the alive-time mean also counts the start-up ramp and the tail after the
    // last step (and, before the run's end was fixed, 11 days of a stretched end put it at
    // 0.01 below a minimum of 2; issue 21).
    double weighted = 0, total_s = 0;
    for (const OuterStepStats& st : s.steps) {
      weighted += double(st.participants) * st.duration_s;
      total_s += st.duration_s;
    }
    if (total_s > 0) s.nodes.mean = weighted / total_s;
  }
  s.allreduce_s = distribution(slowest_allreduce);
  s.outer_steps = t.finished      ? t.finished->outer_steps
                  : t.interrupted ? t.interrupted->outer_steps
                                  : static_cast<std::int64_t>(s.steps.size());
  for (auto it = s.steps.rbegin(); it != s.steps.rend(); ++it)
    if (it->loss) {
      s.loss = it->loss;
      s.perplexity = std::exp(*it->loss);
      break;
    }
}

// Wire bytes per node and the fp32 data-parallel comparison, over the same (node, outer step)
// pairs; then the idle breakdown and the byte rates.
void wire_bytes(Summary& s, Tally& t, const std::vector<EventRecord>& events) {
  double sent_total = 0, ddp_total = 0;
  for (const auto& [key, w] : t.wire) {
    NodeStats& n = t.nodes[key.first];
    n.node = key.first;
    n.bytes_sent += w.sent();
    n.bytes_received += w.received();
    n.allreduce_record_s += w.elapsed_s();
    sent_total += w.sent();
    auto p = t.step_participants.find(key);
    const double ranks =
        static_cast<double>(p != t.step_participants.end() ? p->second : w.participants);
    if (ranks > 1)
      ddp_total += 2.0 * (ranks - 1.0) / ranks * 4.0 * s.metrics.param_count *
                   static_cast<double>(s.metrics.H);
  }
  s.wire_bytes_per_node_per_outer_step = safe_div(sent_total, static_cast<double>(t.wire.size()));
  idle_and_rates(s, t.nodes, t.wire, events);
  if (sent_total > 0) s.bandwidth_reduction_vs_ddp = ddp_total / sent_total;
}

// Validation loss per outer step (the mean over the nodes that evaluated it), its curve against
// time and tokens, and when it first reached the trainer's target loss.
void validation(Summary& s, const std::vector<EventRecord>& events) {
  std::map<std::int64_t, std::pair<double, int>> val;  // outer step -> (Σ val_loss, count)
  std::map<std::int64_t, double> val_t;                 // outer step -> last evaluation's t
  for (const auto& e : events)
    if (const auto* r = e.as<EvaluationRecord>(); r && r->val_loss) {
      auto& v = val[r->outer_step];
      v.first += *r->val_loss;
      ++v.second;
      auto [it, fresh] = val_t.emplace(r->outer_step, e.t_s);
      if (!fresh) it->second = std::max(it->second, e.t_s);
    }
  if (!val.empty()) s.val_loss = val.rbegin()->second.first / val.rbegin()->second.second;
  for (OuterStepStats& st : s.steps)
    if (auto it = val.find(st.outer_step); it != val.end()) {
      st.val_loss = it->second.first / it->second.second;
      s.val_curve.push_back(
          {st.outer_step, val_t[st.outer_step] - s.run_start_s, st.cumulative_tokens, *st.val_loss});
    }
  if (s.config.is_object() && s.config.contains("trainer") && s.config["trainer"].is_object() &&
      s.config["trainer"].contains("target_loss") &&
      s.config["trainer"]["target_loss"].is_number()) {
    const double target = s.config["trainer"]["target_loss"].get<double>();
    s.target_loss = target;
    for (const Summary::ValPoint& p : s.val_curve)
      if (p.val_loss <= target) {
        s.target_reached = p;
        break;
      }
  }
}

}  // namespace

Summary summarize(const std::vector<EventRecord>& events) {
  Summary s;
  Tally t;
  for (const EventRecord& e : events) t.add(e, s);
  run_span(s, t);
  double alive_total = 0;
  node_count(s, alive_intervals(s, t, alive_total));
  stopped_and_redone(s, events);
  const double span_s = s.run_end_s - s.run_start_s;
  s.nodes.alive_mean = safe_div(alive_total, span_s);
  s.nodes.mean = s.nodes.alive_mean;  // replaced by the participants' mean when steps finished
  utilization_and_mfu(s, t, alive_total, events);
  outer_steps(s, t);
  wire_bytes(s, t, events);
  for (auto& [id, n] : t.nodes) s.per_node.push_back(n);
  validation(s, events);
  return s;
}

namespace {
nlohmann::ordered_json num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}
nlohmann::ordered_json num(const std::optional<double>& v) {
  return v ? num(*v) : nlohmann::ordered_json(nullptr);
}

// The resolved configuration's value at `path`, or null.
nlohmann::json config_value(const Summary& s, std::initializer_list<const char*> path) {
  const nlohmann::json* v = &s.config;
  for (const char* k : path) {
    if (!v->is_object() || !v->contains(k)) return nullptr;
    v = &(*v)[k];
  }
  return *v;
}

using OJ = nlohmann::ordered_json;

OJ resumes_json(const Summary& s) {
  OJ resumes = OJ::array();
  for (const Summary::Resume& r : s.resumes)
    resumes.push_back(
        {{"node", r.node},
         {"t_s", num(r.t_s - s.run_start_s)},
         {"via", r.via},
         {"from_outer_step", r.from_outer_step ? OJ(*r.from_outer_step) : OJ(nullptr)}});
  return resumes;
}

// The validation curve and the target loss, when the run has them.
void add_validation(const Summary& s, OJ& j) {
  if (!s.val_curve.empty()) {
    OJ curve = OJ::array();
    for (const Summary::ValPoint& p : s.val_curve)
      curve.push_back({{"outer_step", p.outer_step},
                       {"t_s", num(p.t_s)},
                       {"tokens", num(p.tokens)},
                       {"val_loss", num(p.val_loss)}});
    j["val_curve"] = curve;
  }
  if (s.target_loss) {
    const auto& r = s.target_reached;
    j["target"] = {{"val_loss", num(*s.target_loss)},
                   {"reached", r.has_value()},
                   {"outer_step", r ? OJ(r->outer_step) : OJ(nullptr)},
                   {"time_s", r ? num(r->t_s) : OJ(nullptr)},
                   {"tokens", r ? num(r->tokens) : OJ(nullptr)}};
  }
}

OJ node_json(const NodeStats& n) {
  return {{"node", n.node},
          {"host", n.host.empty() ? OJ(nullptr) : OJ(n.host)},
          {"initial", n.initial},
          {"start_s", num(n.start_s)},
          {"end_s", num(n.end_s)},
          {"end", n.end_reason},
          {"alive_s", num(n.alive_s)},
          {"compute_s", num(n.compute_s)},
          {"allreduce_s", num(n.allreduce_s)},
          {"outer_opt_s", num(n.outer_opt_s)},
          {"recovery_s", num(n.recovery_s)},
          {"idle_s", num(n.idle_s)},
          {"compute_utilization", num(n.compute_utilization)},
          {"tokens", num(n.tokens)},
          {"bytes_sent", num(n.bytes_sent)},
          {"bytes_received", num(n.bytes_received)},
          {"outer_steps", n.outer_steps}};
}

}  // namespace

nlohmann::ordered_json to_json(const Summary& s) {
  using J = nlohmann::ordered_json;
  J j;
  j["mode"] = s.mode;
  j["seed"] = s.seed;
  if (const auto name = config_value(s, {"run", "name"}); name.is_string()) j["scenario"] = name;
  if (const auto net = config_value(s, {"network"}); net.is_object()) {
    J echo = J::object();  // what the simulator was given (issue: echoed into the results)
    for (const char* k : {"model", "tcp_gamma_bytes", "crosstraffic"})
      if (net.contains(k)) echo[k] = net[k];
    j["network"] = echo;
  }
  j["simulated_s"] = num(s.simulated_s);
  j["outer_steps"] = s.outer_steps;
  j["outer_steps_planned"] =
      s.outer_steps_planned ? J(*s.outer_steps_planned) : J(nullptr);  // unknown in old files
  j["resumes"] = resumes_json(s);
  j["stopped_s"] = num(s.stopped_s);
  j["outer_steps_redone"] = s.outer_steps_redone;
  j["complete"] = s.complete;
  j["interrupted"] = s.interrupted;
  j["interrupted_reason"] = s.interrupted ? J(s.interrupted_reason) : J(nullptr);
  j["tokens"] = num(s.tokens);
  j["compute_utilization"] = num(s.compute_utilization);
  J per_node = J::object();
  for (const NodeStats& n : s.per_node)
    per_node[std::to_string(n.node)] = num(n.compute_utilization);
  j["compute_utilization_per_node"] = per_node;
  j["outer_step_utilization"] = num(s.outer_step_utilization);
  j["mfu"] = num(s.mfu);
  j["allreduce_s"] = {{"p5", num(s.allreduce_s.p5)},
                      {"p10", num(s.allreduce_s.p10)},
                      {"p25", num(s.allreduce_s.p25)},
                      {"p50", num(s.allreduce_s.p50)},
                      {"p75", num(s.allreduce_s.p75)},
                      {"p90", num(s.allreduce_s.p90)},
                      {"p95", num(s.allreduce_s.p95)},
                      {"mean", num(s.allreduce_s.mean)},
                      {"count", s.allreduce_s.count}};
  j["inner_step_s"] = num(s.inner_step_s);
  j["wire_bytes_per_node_per_outer_step"] = num(s.wire_bytes_per_node_per_outer_step);
  j["bandwidth_reduction_vs_ddp"] = num(s.bandwidth_reduction_vs_ddp);
  j["nodes"] = {{"min", s.nodes.min},
                {"max", s.nodes.max},
                {"mean", num(s.nodes.mean)},
                {"alive_mean", num(s.nodes.alive_mean)}};
  j["recovery"] = {{"count", s.recovery.count},
                   {"total_s", num(s.recovery.total_s)},
                   {"mean_s", num(s.recovery.mean_s)},
                   {"max_s", num(s.recovery.max_s)},
                   {"bytes", num(s.recovery.bytes)}};
  j["idle_s"] = num(s.idle_s);
  j["idle_per_outer_step_s"] = {{"sync", num(s.idle_per_outer_step_s.sync)},
                                {"outer_opt", num(s.idle_per_outer_step_s.outer_opt)},
                                {"recovery", num(s.idle_per_outer_step_s.recovery)},
                                {"other", num(s.idle_per_outer_step_s.other)}};
  j["bytes_per_s_per_node"] = {{"mean", num(s.bytes_per_s_per_node.mean)},
                               {"peak", num(s.bytes_per_s_per_node.peak)}};
  j["retries"] = s.retries;
  j["fallbacks"] = s.fallbacks;
  j["failures"] = s.failures;
  j["non_finite"] = s.non_finite;
  j["lost"] = s.lost;
  j["joins"] = s.joins;
  j["loss"] = num(s.loss);
  j["perplexity"] = num(s.perplexity);
  j["val_loss"] = num(s.val_loss);
  add_validation(s, j);
  J nodes = J::array();
  for (const NodeStats& n : s.per_node) nodes.push_back(node_json(n));
  j["per_node"] = nodes;
  return j;
}

std::string node_label(const NodeStats& n) {
  return n.host.empty() ? "node " + std::to_string(n.node) : n.host;
}

std::string outer_steps_text(const Summary& s) {
  return std::to_string(s.outer_steps) +
         (s.outer_steps_planned ? " of " + std::to_string(*s.outer_steps_planned) + " planned"
                                : "");
}

std::string resumes_text(const Summary& s) {
  if (s.resumes.empty()) return "never";
  std::set<std::int64_t> from;
  std::set<std::int64_t> live;
  for (const Summary::Resume& r : s.resumes) {
    if (r.from_outer_step)
      from.insert(*r.from_outer_step);
    else
      live.insert(r.node);
  }
  std::string out;
  for (const std::int64_t f : from)
    out += std::string(out.empty() ? "" : ", ") + "after outer step " + std::to_string(f);
  if (!live.empty())
    out += std::string(out.empty() ? "" : ", ") + std::to_string(live.size()) +
           " node(s) by live recovery";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                " (%zu node restart(s); %.1f s with no node alive; %lld outer step(s) redone)",
                s.resumes.size(), s.stopped_s, static_cast<long long>(s.outer_steps_redone));
  return out + buf;
}

std::string run_end_text(const Summary& s) {
  if (s.complete) return "";
  if (s.interrupted)
    return "Interrupted (" + s.interrupted_reason + ") after " + outer_steps_text(s) +
           " outer steps";
  if (!s.lost.empty()) {
    std::string nodes;
    for (const std::string& l : s.lost) nodes += (nodes.empty() ? "" : "; ") + l;
    return "Incomplete: no node finished the run after " + outer_steps_text(s) + " outer steps (" +
           nodes + ")";
  }
  return "Incomplete: the events stop after " + outer_steps_text(s) +
         " outer steps without a final record (the run crashed, was killed, or is still running)";
}

std::string summary_table(const Summary& s) {
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
  // Counts of any size (a 10B run's tokens, an emulation's few thousand): three digits and a
  // prefix, k M G T (tokens: B for billions, as the field says).
  auto scaled = [&](double v, const char* unit, const char* giga) {
    if (!std::isfinite(v)) return std::string("n/a");
    const char* prefix[] = {"", "k", "M", giga, "T"};
    int k = 0;
    while (k < 4 && std::fabs(v) >= 999.5) v /= 1000, ++k;
    std::snprintf(buf, sizeof buf, "%.3g %s%s", v, prefix[k], unit);
    return std::string(buf);
  };
  auto pct = [&](double v) { return std::isfinite(v) ? num(100 * v, "%.1f %%") : "n/a"; };
  const auto name = config_value(s, {"run", "name"});
  os << (s.mode.empty() ? "run" : s.mode) << " "
     << (name.is_string() ? name.get<std::string>() : "") << " (seed " << s.seed;
  const auto net = config_value(s, {"network"});
  if (net.is_object() && net.contains("model") && net.contains("tcp_gamma_bytes"))
    os << ", " << net["model"].get<std::string>() << ", TCP window "
       << num(net["tcp_gamma_bytes"].get<double>() / 1048576.0, "%.1f MiB");
  os << ")\n";
  if (!s.complete) os << "  ** " << run_end_text(s) << " **\n";
  row("simulated time",
      num(s.simulated_s, "%.0f s") + " (" + num(s.simulated_s / 86400, "%.2f days") + ")");
  row("outer steps", outer_steps_text(s));
  if (!s.resumes.empty()) row("resumed", resumes_text(s));
  row("nodes min / mean / max", num(double(s.nodes.min), "%.0f") + " / " +
                                    num(s.nodes.mean, "%.2f") + " / " +
                                    num(double(s.nodes.max), "%.0f"));
  row("inner step", num(s.inner_step_s, s.inner_step_s < 0.1 ? "%.4f s" : "%.2f s"));
  row("all-reduce p10 / p50 / p90 / mean",
      num(s.allreduce_s.p10, "%.1f") + " / " + num(s.allreduce_s.p50, "%.1f") + " / " +
          num(s.allreduce_s.p90, "%.1f") + " / " + num(s.allreduce_s.mean, "%.1f s"));
  row("all-reduce p5 / p25 / p75 / p95",
      num(s.allreduce_s.p5, "%.1f") + " / " + num(s.allreduce_s.p25, "%.1f") + " / " +
          num(s.allreduce_s.p75, "%.1f") + " / " + num(s.allreduce_s.p95, "%.1f s"));
  row("outer-step utilization (report form)", pct(s.outer_step_utilization));
  row("compute utilization", pct(s.compute_utilization));
  const auto& idle = s.idle_per_outer_step_s;
  row("idle per outer step",
      "sync " + num(idle.sync, "%.1f") + ", outer opt " + num(idle.outer_opt, "%.1f") +
          ", recovery " + num(idle.recovery, "%.1f") + ", other " + num(idle.other, "%.1f s"));
  row("collective B/s / node, mean / peak", scaled(s.bytes_per_s_per_node.mean, "B/s", "G") +
                                                " / " +
                                                scaled(s.bytes_per_s_per_node.peak, "B/s", "G"));
  row("MFU", pct(s.mfu));
  row("wire bytes / node / outer step", scaled(s.wire_bytes_per_node_per_outer_step, "B", "G"));
  if (s.bandwidth_reduction_vs_ddp)
    row("bandwidth reduction vs DDP", num(*s.bandwidth_reduction_vs_ddp, "%.0fx"));
  row("tokens", scaled(s.tokens, "", "B"));
  if (s.retries || s.fallbacks)
    row("retries / fallbacks", std::to_string(s.retries) + " / " + std::to_string(s.fallbacks));
  for (const std::string& line : s.non_finite) row("non-finite pseudo-gradient", line);
  for (const std::string& line : s.lost) row("node lost", line);
  if (s.loss) row("final loss (train, mean over nodes)", num(*s.loss, "%.4f"));
  if (s.val_loss) row("final validation loss", num(*s.val_loss, "%.4f"));
  if (s.target_loss) {
    const std::string label = "time to validation loss " + num(*s.target_loss, "%.3g");
    row(label.c_str(),
        s.target_reached ? num(s.target_reached->t_s, "%.1f") + " s (modelled), " +
                               scaled(s.target_reached->tokens, "", "B") + " tokens, outer step " +
                               std::to_string(s.target_reached->outer_step)
                         : std::string("not reached"));
  }
  return os.str();
}

}  // namespace meridian::analysis
