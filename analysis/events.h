// Typed reader of events.jsonl (schema: engine/core/events/SCHEMA.md): one record per line, parsed
// with nlohmann_json and checked field by field. Reading only: writing is engine/core/events/.
// A malformed line or a missing required field is a ConfigError naming file, line and field.
#pragma once

#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace meridian::analysis {

// `config` record's `metrics`: what MFU and the DDP comparison need.
struct RunMetrics {
  double param_count = 0;
  double flops_per_token = 0;
  double tokens_per_inner_step = 0;  // per node
  double gpus_per_node = 1;          // 0: trained on CPUs (a real CPU run), MFU undefined
  double peak_flops_per_gpu = 0;
  std::int64_t H = 0;
  std::string codec;             // optional in the reader ("" when absent)
  std::int64_t local_ranks = 1;  // optional (1 when absent)
};

struct ConfigRecord {
  std::string mode;  // simulate, emulate, real
  std::int64_t seed = 0;
  std::string command;
  nlohmann::json versions;  // object; empty when absent
  RunMetrics metrics;
  nlohmann::json config;  // the fully resolved configuration; null when absent
  // Real runs: the wall-clock time (Unix seconds) of this writer's t = 0, so that the files
  // of a run's processes can be put on one time axis. Absent in simulation.
  std::optional<double> clock_origin_unix_s;
};
struct NodeStartedRecord {
  bool initial = false;
  std::string host;  // the simulated host (slot) it runs on; "" when the writer has none
};
struct JoinRequestedRecord {};
struct AdmittedRecord {
  std::int64_t epoch = 0;
  std::int64_t outer_step = 0;
};
struct RecoveryStartedRecord {
  std::vector<std::int64_t> sources;
  double bytes = 0;
};
struct RecoveryFinishedRecord {
  double bytes = 0;
  double elapsed_s = 0;
  std::vector<std::int64_t> sources;
  std::int64_t resumed = 0;
};
struct FailDetectedRecord {
  std::int64_t failed = -1;
  std::string by;
};
struct NodeLeftRecord {
  bool graceful = false;
};
struct EpochFormedRecord {
  std::int64_t epoch = 0;
  std::int64_t outer_step = 0;
  std::vector<std::int64_t> members;
};
struct InnerStepsRecord {
  std::int64_t outer_step = 0;
  std::int64_t steps = 0;
  double tokens = 0;
  double start_s = 0;
  double compute_s = 0;
  std::optional<double> loss;
};
struct AllreduceRecord {
  std::int64_t outer_step = 0;
  std::int64_t bucket = 0;  // -1: aggregated over all buckets
  std::int64_t epoch = 0;
  std::int64_t attempt = 0;
  std::string codec;
  double elements = 0;
  std::int64_t participants = 0;
  double bytes_sent = 0;
  double bytes_received = 0;
  double start_s = 0;
  double elapsed_s = 0;
  std::optional<double> relative_error;
};
struct RetryRecord {
  std::int64_t outer_step = 0;
  std::int64_t attempt = 0;
  std::string reason;
};
struct FallbackRecord {
  std::int64_t outer_step = 0;
  std::string reason;
};
// The non-finite guard (engine/core/diloco): a node whose pseudo-gradient held NaN or Inf sat the
// step out (detected_by "self", action "abstain"), or a receiver found one in a chunk and
// blamed its sender (detected_by "receiver", action "blame"; the mesh evicts it).
struct NonFiniteRecord {
  std::int64_t outer_step = 0;
  std::int64_t node = -1;  // the faulty node
  std::string detected_by;
  std::string action;
};
struct OuterStepRecord {
  std::int64_t outer_step = 0;
  std::int64_t epoch = 0;
  std::int64_t participants = 0;
  double inner_s = 0;
  double allreduce_s = 0;
  double outer_opt_s = 0;
  double tokens = 0;
  std::optional<double> loss;
  // Overlapped runs only: the seconds this step's sync kept the node from computing (the rest
  // of allreduce_s ran beside its inner steps). Blocking: allreduce_s is all exposed.
  std::optional<double> exposed_s;
  double sync_s() const { return exposed_s ? *exposed_s : allreduce_s; }
};
struct CheckpointRecord {
  std::int64_t outer_step = 0;
  double bytes = 0;
  double elapsed_s = 0;
};
struct EvaluationRecord {
  std::int64_t outer_step = 0;
  std::optional<double> val_loss;
};
struct RunFinishedRecord {
  double simulated_s = 0;
  std::int64_t outer_steps = 0;
  std::optional<std::int64_t> outer_steps_planned;  // absent in files of older writers
};
// The last line instead of run_finished when the run was stopped (a signal): how far it got.
struct RunInterruptedRecord {
  std::string reason;  // e.g. "SIGINT", "SIGTERM"
  double simulated_s = 0;
  std::int64_t outer_steps = 0;  // done
  std::optional<std::int64_t> outer_steps_planned;
};
// The last line of a real node's file instead of run_finished when the run did not finish for
// it: it gave up as lost (exit "lost": its store or transports were gone, a record never came)
// or the mesh evicted it (exit "evicted").
struct NodeLostRecord {
  std::string exit;  // "lost" or "evicted"
  std::string reason;
  std::int64_t outer_steps = 0;  // applied by this node
};
// A real node restarted with --resume: the first record of its new life after `config`.
struct RunResumedRecord {
  std::int64_t life = 2;
  std::string via;                              // "checkpoint" or "live_recovery"
  std::optional<std::int64_t> from_outer_step;  // checkpoint resumes: the steps it holds
};
// A type this reader does not know (a newer writer): kept, ignored by the statistics.
struct UnknownRecord {};

using EventBody =
    std::variant<ConfigRecord, NodeStartedRecord, JoinRequestedRecord, AdmittedRecord,
                 RecoveryStartedRecord, RecoveryFinishedRecord, FailDetectedRecord, NodeLeftRecord,
                 EpochFormedRecord, InnerStepsRecord, AllreduceRecord, RetryRecord, FallbackRecord,
                 NonFiniteRecord, OuterStepRecord, CheckpointRecord, EvaluationRecord,
                 RunFinishedRecord, RunInterruptedRecord, NodeLostRecord, RunResumedRecord,
                 UnknownRecord>;

struct EventRecord {
  double t_s = 0;
  std::int64_t node = -1;
  std::string type;
  int line = 0;  // 1-based line in the file it came from
  EventBody body;

  template <typename T>
  const T* as() const {
    return std::get_if<T>(&body);
  }
};

// Parses one JSON line. `where` ("events.jsonl:12") prefixes every error message.
EventRecord parse_event_line(const std::string& line, const std::string& where);

// Reads a whole stream; blank lines are skipped. Errors name `source_name` and the line.
std::vector<EventRecord> read_events(std::istream& in, const std::string& source_name);

// Reads a file; a missing file is a ConfigError. Accepts the events file itself, a run
// directory with DIR/events.jsonl (simulation, emulation), or the output directory of a real
// run, one DIR/node-<ID>/events.jsonl per process: see merge_node_streams.
std::vector<EventRecord> read_events_file(const std::string& path);

// One stream from the per-process streams of a real run: every stream's times (`t` and the
// records' `start_s`) are moved onto the earliest process's clock by the `clock_origin_unix_s`
// of its config record (required when there is more than one stream); the first config record
// is kept and the others dropped; the per-process `run_finished` (or `run_interrupted`: one
// interrupted process makes the run interrupted) records become one at the last
// of them (its `simulated_s` the run's wall time on the common clock; a process that ended with
// `node_lost` has none, its record stays as it is); the result is ordered by
// time (stable). An interruption earlier than a later `run_resumed` was resumed from: it
// does not make the run interrupted. The lives of a resumed node's file (each from its `config`
// record on) are streams of their own (read_events_file splits them). `names` label the streams
// in errors.
std::vector<EventRecord> merge_node_streams(std::vector<std::vector<EventRecord>> streams,
                                            const std::vector<std::string>& names);

// The events.jsonl path for a run directory or an events file.
std::string events_path(const std::string& run_dir_or_file);

// Whether read_events_file has something to read: a file, or a folder with events.jsonl or
// node-<ID>/events.jsonl. Looks only; the content is not checked.
bool has_events(const std::string& run_dir_or_file);

}  // namespace meridian::analysis
