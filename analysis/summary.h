// The run statistics of engine/core/events/SCHEMA.md ("Metrics derived from it"), computed once
// here from typed events, plus the per-outer-step and per-node series the plots draw. Not a plotter
// and not a reader: see plots.h and events.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/events.h"

namespace meridian::analysis {

// Percentile p in [0, 1] of `values` (any order) by linear interpolation between order
// statistics: with x sorted and h = (n - 1) p, x[floor h] + (h - floor h)(x[floor h + 1] -
// x[floor h]) (Hyndman-Fan type 7, numpy's default). NaN for no values.
double percentile(std::vector<double> values, double p);

struct Distribution {
  std::size_t count = 0;
  double p10 = 0, p50 = 0, p90 = 0, mean = 0, min = 0, max = 0;  // NaN when count == 0
  double p5 = 0, p25 = 0, p75 = 0, p95 = 0;                      // likewise
  double iqr() const { return p75 - p25; }
};
Distribution distribution(const std::vector<double>& values);

// One node's life in the run. Alive = from node_started (joiners too: waiting for admission
// and recovery are held, idle time) to node_left, the first fail_detected naming it, or the
// run's end, whichever is first.
struct NodeStats {
  std::int64_t node = -1;
  // The host it ran on: node_started.host, else (simulate and emulate runs of writers without
  // it) the config record's platform: initial node k ran on the k-th host that starts. "" when
  // unknown (real runs, joiners of such writers).
  std::string host;
  bool initial = false;
  double start_s = 0, end_s = 0, alive_s = 0;
  // Of its last life: "left", "failed" (crash or fail_detected) or "run_end"; an earlier life
  // of a node restarted with --resume ends "stopped" (its last record) unless it left or failed.
  // start_s is its first life's start, end_s its last's end, alive_s the sum over its lives.
  std::string end_reason;
  double compute_s = 0;    // Σ inner_steps.compute_s
  double allreduce_s = 0;  // Σ outer_step.allreduce_s
  double sync_s = 0;       // Σ outer_step.exposed_s (overlapped), else Σ allreduce_s
  double outer_opt_s = 0;  // Σ outer_step.outer_opt_s
  double recovery_s = 0;   // Σ recovery_finished.elapsed_s
  double idle_s = 0;  // alive time not in compute, sync, outer_opt, recovery (clamped at 0)
  double tokens = 0;
  double bytes_sent = 0, bytes_received = 0;  // Σ allreduce records (see wire bytes rule)
  double allreduce_record_s = 0;  // Σ elapsed_s of the same allreduce records (bandwidth)
  std::int64_t outer_steps = 0;
  double compute_utilization = 0;  // compute_s / alive_s
};

// One outer step, across the nodes that completed it (its `outer_step` records).
struct OuterStepStats {
  std::int64_t outer_step = 0;
  double t_end_s = 0;             // latest outer_step record's t
  double duration_s = 0;          // t_end_s minus the previous step's t_end_s (or the run's start)
  std::int64_t participants = 0;  // largest `participants` reported
  double inner_s = 0;             // mean outer_step.inner_s (T_inner)
  double allreduce_s = 0;         // largest outer_step.allreduce_s (T_allreduce, slowest node)
  double tokens = 0;              // Σ outer_step.tokens
  double cumulative_tokens = 0;
  double sync_s = 0;               // largest outer_step exposed_s (overlap), else = allreduce_s
  double utilization = 0;          // T_inner / (T_inner + sync_s)
  double compute_utilization = 0;  // inner_s / duration_s
  double mfu = 0;  // flops_per_token × tokens / (duration × participants × GPUs × peak)
  std::optional<double> loss;      // mean of the nodes' non-null losses
  std::optional<double> val_loss;  // mean of the step's `evaluation` records (emulation)
};

struct Summary {
  std::string mode;
  RunMetrics metrics;
  nlohmann::json config;  // the resolved configuration from the config record (null if none)
  nlohmann::json versions;
  std::string command;
  std::int64_t seed = 0;

  double run_start_s = 0, run_end_s = 0;
  double simulated_s = 0;  // run_finished.simulated_s, else run_end_s - run_start_s
  std::int64_t outer_steps = 0;
  // How the run ended: `complete` when it has a run_finished record; `interrupted` when it has
  // run_interrupted instead (reason: e.g. "SIGINT"); neither when the events simply stop (a
  // crash, a kill -9, a file still being written): incomplete.
  bool complete = false;
  bool interrupted = false;
  std::string interrupted_reason;                   // "" unless interrupted
  std::optional<std::int64_t> outer_steps_planned;  // from the final record; unknown without
  double tokens = 0;

  double compute_utilization = 0;
  double outer_step_utilization = 0;
  double mfu = 0;
  Distribution allreduce_s;  // per outer step, the slowest node's outer_step.allreduce_s
  double inner_step_s = 0;   // Σ compute_s / Σ steps over inner_steps records
  double wire_bytes_per_node_per_outer_step = 0;
  std::optional<double> bandwidth_reduction_vs_ddp;

  struct {
    std::int64_t min = 0, max = 0;
    double mean = 0;        // participants weighted by step wall time (README, "Definitions")
    double alive_mean = 0;  // the alive-node count, time-weighted over [run_start_s, run_end_s]
  } nodes;
  struct {
    std::int64_t count = 0;
    double total_s = 0, mean_s = 0, max_s = 0, bytes = 0;
  } recovery;
  double idle_s = 0;  // Σ NodeStats::idle_s
  // Seconds a node spent not computing, per outer step it applied (Σ over nodes / Σ of their
  // outer steps), by cause: the sync it waited for (exposed all-reduce, or the whole ring when
  // blocking), the outer optimizer, recovering as a joiner, and the rest (barriers, admission,
  // checkpoints, the tail).
  struct {
    double sync = 0, outer_opt = 0, recovery = 0, other = 0;
  } idle_per_outer_step_s;
  // Collective bytes sent per node per second: `mean` over the nodes' alive time (Σ bytes_sent /
  // Σ alive_s); `peak`, the largest rate of one node in one outer step while its all-reduce ran
  // (bytes sent in that step / its outer_step.allreduce_s).
  struct {
    double mean = 0, peak = 0;
  } bytes_per_s_per_node;
  // retries: distinct (outer step, attempt) retried; fallbacks: fallback records;
  // failures: nodes whose life ended by a fail_detected or a node_left with graceful = false.
  std::int64_t retries = 0, fallbacks = 0, failures = 0, joins = 0, graceful_leaves = 0;
  // Non-finite pseudo-gradients (event `nonfinite`), one line each, by outer step:
  // "outer step 2: node 3 sat out" or "outer step 0: node 3 blamed by a receiver".
  std::vector<std::string> non_finite;
  // Nodes whose file ends with `node_lost`, one line each: "node 3 lost after 4 outer steps:
  // <reason>" (exit "lost" or "evicted").
  std::vector<std::string> lost;
  // Real runs restarted with --resume (`run_resumed` records), in time order: where and how each
  // node's new life began. stopped_s: time between the run's start and end with no node alive
  // (the run was down until the resume); outer_steps_redone: outer steps applied before a resume
  // from an earlier checkpoint and trained again after it (per distinct checkpoint step).
  struct Resume {
    std::int64_t node = -1;
    double t_s = 0;
    std::string via;
    std::optional<std::int64_t> from_outer_step;
  };
  std::vector<Resume> resumes;
  double stopped_s = 0;
  std::int64_t outer_steps_redone = 0;

  std::optional<double> loss;        // last outer step with a loss
  std::optional<double> perplexity;  // exp(loss)
  std::optional<double> val_loss;    // mean of the last outer step's `evaluation` records

  // Validation loss against the modelled clock and tokens (emulation): one point per outer
  // step with `evaluation` records. t_s: the step's last evaluation, from the run's start;
  // tokens: all nodes' tokens to the end of that step (cumulative_tokens).
  struct ValPoint {
    std::int64_t outer_step = 0;
    double t_s = 0, tokens = 0, val_loss = 0;
  };
  std::vector<ValPoint> val_curve;
  // The run file's train.target_loss (echoed as config.trainer.target_loss) (absent: none) and the first point at or below it.
  std::optional<double> target_loss;
  std::optional<ValPoint> target_reached;

  std::vector<NodeStats> per_node;    // by node id
  std::vector<OuterStepStats> steps;  // by outer step
  // Alive-node count as a step function: (time, count from that time on), starting at
  // run_start_s.
  std::vector<std::pair<double, std::int64_t>> node_count;
};

// Computes every statistic. Throws ConfigError when the events lack a config record.
Summary summarize(const std::vector<EventRecord>& events);

// summary.json: the SCHEMA.md keys plus per-node and recovery details, and the run's name, seed
// and network model echoed from the config record; NaN becomes null.
nlohmann::ordered_json to_json(const Summary& s);

// The node's name in figures and tables: its host ("us-east-0"), else "node N".
std::string node_label(const NodeStats& n);

// "160 of 904 planned" when the plan is known, else "160".
std::string outer_steps_text(const Summary& s);

// "" for a complete run; else one sentence for the top of a report or table: "Interrupted
// (SIGINT) after 160 of 904 planned outer steps", or "Incomplete: ..." when the events stop
// without a final record (naming the nodes that gave up as lost, when some did).
std::string run_end_text(const Summary& s);
// "after outer step 20 (3 node restart(s); 41.2 s with no node alive; 4 outer step(s) redone)", or
// "never": the run's resumes (Summary::resumes) in words.
std::string resumes_text(const Summary& s);

// The headline numbers as an aligned text table (what `meridian sim` prints on stdout).
std::string summary_table(const Summary& s);

}  // namespace meridian::analysis
