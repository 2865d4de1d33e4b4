// Parsing of events.jsonl into typed records. Required fields are the ones SCHEMA.md lists;
// `loss` and `relative_error` may be null (or absent); unknown fields and types are ignored.
// Not a validator of the run's logic (e.g. that outer steps increase): the statistics do that.
#include "analysis/events.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/error.h"

namespace meridian::analysis {
namespace {

using nlohmann::json;

// Where a record stands, for messages ("events.jsonl:12"): put together only when one is needed
// (a file of a long run holds millions of records).
struct Where {
  std::string_view source;
  int line = 0;  // 0: `source` says it all
  std::string text() const {
    return line == 0 ? std::string(source) : std::string(source) + ":" + std::to_string(line);
  }
};

// One JSON object's members in the order they came; a later duplicate wins, as in a parsed
// object. Records have a dozen members: a short vector beats a tree of map nodes.
using Members = std::vector<std::pair<std::string, json>>;

Members members_of(json&& object) {
  Members out;
  out.reserve(object.size());
  for (auto& [key, value] : object.get_ref<json::object_t&>())
    out.emplace_back(key, std::move(value));
  return out;
}

// Reads a line's object into Members through nlohmann's SAX interface, without building the tree
// the ordinary parse builds. It takes what nearly every record is, scalars and arrays of scalars
// at the top level; anything else (an object inside, a top level that is no object, anything
// that is not JSON) stops it, and the caller parses the line the ordinary way, which also words
// every error. The values are the ordinary parse's: the same lexer reads them.
class MembersReader final : public nlohmann::json_sax<json> {
 public:
  explicit MembersReader(Members& out) : out_(out) {}
  bool complete() const { return complete_; }

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override { return value(std::move(v)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return !in_object_ && (in_object_ = true); }
  bool key(string_t& k) override {
    out_.emplace_back(std::move(k), json());
    return true;
  }
  bool end_object() override { return complete_ = true; }
  bool start_array(std::size_t) override {
    if (!in_object_ || in_array_ || out_.empty()) return false;
    out_.back().second = json::array();
    return in_array_ = true;
  }
  bool end_array() override { return !(in_array_ = false); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool value(json v) {
    if (!in_object_ || out_.empty()) return false;  // a top level that is no object
    if (in_array_)
      out_.back().second.push_back(std::move(v));
    else
      out_.back().second = std::move(v);
    return true;
  }

  Members& out_;
  bool in_object_ = false, in_array_ = false, complete_ = false;
};

// Typed access to one record's fields; every failure names the record and the field.
class Fields {
 public:
  Fields(const Members& members, const Where& where, const std::string& type)
      : members_(members), where_(where), type_(type) {}
  // A nested object's fields (its members held here).
  Fields(json&& object, const Where& where, const std::string& type)
      : own_(members_of(std::move(object))), members_(own_), where_(where), type_(type) {}
  Fields(const Fields&) = delete;
  Fields& operator=(const Fields&) = delete;

  // The value of `key`, nullptr when absent.
  const json* find(const char* key) const {
    for (auto it = members_.rbegin(); it != members_.rend(); ++it)
      if (it->first == key) return &it->second;
    return nullptr;
  }
  const json& required(const char* key) const {
    const json* v = find(key);
    if (!v) fail(key, "is missing");
    return *v;
  }
  double number(const char* key) const {
    const json& v = required(key);
    if (!v.is_number()) fail(key, "must be a number, got " + std::string(v.type_name()));
    return v.get<double>();
  }
  std::int64_t integer(const char* key) const {
    const json& v = required(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  bool boolean(const char* key) const {
    const json& v = required(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const json& v = required(key);
    if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::vector<std::int64_t> ids(const char* key) const {
    const json& v = required(key);
    if (!v.is_array()) fail(key, "must be an array of node ids, got " + v.dump());
    std::vector<std::int64_t> out;
    for (const json& e : v) {
      if (!e.is_number_integer()) fail(key, "must hold integer node ids, got " + e.dump());
      out.push_back(e.get<std::int64_t>());
    }
    return out;
  }
  // A number or null; an absent key reads as null.
  std::optional<double> nullable_number(const char* key) const {
    const json* v = find(key);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_number()) fail(key, "must be a number or null, got " + v->dump());
    return v->get<double>();
  }
  Fields object(const char* key) const {
    const json& v = required(key);
    if (!v.is_object()) fail(key, "must be an object, got " + v.dump());
    return Fields(json(v), where_, type_ + "." + key);
  }
  // An integer, or nullopt when the key is absent or null.
  std::optional<std::int64_t> optional_integer(const char* key) const {
    const json* v = find(key);
    if (!v || v->is_null()) return std::nullopt;
    return integer(key);
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  // The value of `key` as it is, or `fallback` when absent.
  json value_or(const char* key, json fallback) const {
    const json* v = find(key);
    return v ? *v : std::move(fallback);
  }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw ConfigError(where_.text() + ": '" + type_ + "' record: field '" + key + "' " + what);
  }

 private:
  Members own_;
  const Members& members_;
  const Where& where_;
  std::string type_;
};

ConfigRecord parse_config(const Fields& f) {
  ConfigRecord r;
  r.mode = f.string("mode");
  if (r.mode != "simulate" && r.mode != "emulate" && r.mode != "real")
    f.fail("mode", "must be simulate, emulate or real, got '" + r.mode + "'");
  if (f.has("seed")) r.seed = f.integer("seed");
  if (f.has("command")) r.command = f.string("command");
  r.versions = f.value_or("versions", json::object());
  r.config = f.value_or("config", json());
  Fields m = f.object("metrics");
  r.metrics.param_count = m.number("param_count");
  r.metrics.flops_per_token = m.number("flops_per_token");
  r.metrics.tokens_per_inner_step = m.number("tokens_per_inner_step");
  r.metrics.gpus_per_node = m.number("gpus_per_node");
  r.metrics.peak_flops_per_gpu = m.number("peak_flops_per_gpu");
  r.metrics.H = m.integer("H");
  if (m.has("codec")) r.metrics.codec = m.string("codec");
  if (m.has("local_ranks")) r.metrics.local_ranks = m.integer("local_ranks");
  if (f.has("clock_origin_unix_s")) r.clock_origin_unix_s = f.number("clock_origin_unix_s");
  if (r.metrics.gpus_per_node < 0 || (r.metrics.gpus_per_node == 0 && r.mode != "real"))
    m.fail("gpus_per_node", "must be > 0 (0 only for a real run trained on CPUs)");
  if (r.metrics.H <= 0) m.fail("H", "must be > 0");
  return r;
}

EventBody parse_body(const std::string& type, const Fields& f) {
  if (type == "config") return parse_config(f);
  if (type == "node_started")
    return NodeStartedRecord{f.boolean("initial"), f.has("host") ? f.string("host") : ""};
  if (type == "join_requested") return JoinRequestedRecord{};
  if (type == "admitted") return AdmittedRecord{f.integer("epoch"), f.integer("outer_step")};
  if (type == "recovery_started") return RecoveryStartedRecord{f.ids("sources"), f.number("bytes")};
  if (type == "recovery_finished")
    return RecoveryFinishedRecord{f.number("bytes"), f.number("elapsed_s"), f.ids("sources"),
                                  f.integer("resumed")};
  if (type == "fail_detected") return FailDetectedRecord{f.integer("failed"), f.string("by")};
  if (type == "node_left") return NodeLeftRecord{f.boolean("graceful")};
  if (type == "epoch_formed")
    return EpochFormedRecord{f.integer("epoch"), f.integer("outer_step"), f.ids("members")};
  if (type == "inner_steps")
    return InnerStepsRecord{f.integer("outer_step"), f.integer("steps"),
                            f.number("tokens"),      f.number("start_s"),
                            f.number("compute_s"),   f.nullable_number("loss")};
  if (type == "allreduce") {
    AllreduceRecord r;
    r.outer_step = f.integer("outer_step");
    r.bucket = f.integer("bucket");
    r.epoch = f.integer("epoch");
    r.attempt = f.integer("attempt");
    r.codec = f.string("codec");
    r.elements = f.number("elements");
    r.participants = f.integer("participants");
    r.bytes_sent = f.number("bytes_sent");
    r.bytes_received = f.number("bytes_received");
    r.start_s = f.number("start_s");
    r.elapsed_s = f.number("elapsed_s");
    r.relative_error = f.nullable_number("relative_error");
    return r;
  }
  if (type == "retry")
    return RetryRecord{f.integer("outer_step"), f.integer("attempt"), f.string("reason")};
  if (type == "fallback") return FallbackRecord{f.integer("outer_step"), f.string("reason")};
  if (type == "nonfinite")
    return NonFiniteRecord{f.integer("outer_step"), f.integer("faulty"), f.string("detected_by"),
                           f.string("action")};
  if (type == "outer_step") {
    OuterStepRecord r;
    r.outer_step = f.integer("outer_step");
    r.epoch = f.integer("epoch");
    r.participants = f.integer("participants");
    r.inner_s = f.number("inner_s");
    r.allreduce_s = f.number("allreduce_s");
    r.outer_opt_s = f.number("outer_opt_s");
    r.tokens = f.number("tokens");
    r.loss = f.nullable_number("loss");
    if (f.has("exposed_s")) r.exposed_s = f.number("exposed_s");
    return r;
  }
  if (type == "checkpoint")
    return CheckpointRecord{f.integer("outer_step"), f.number("bytes"), f.number("elapsed_s")};
  if (type == "evaluation")
    return EvaluationRecord{f.integer("outer_step"), f.nullable_number("val_loss")};
  if (type == "run_finished")
    return RunFinishedRecord{f.number("simulated_s"), f.integer("outer_steps"),
                             f.optional_integer("outer_steps_planned")};
  if (type == "run_interrupted")
    return RunInterruptedRecord{f.string("reason"), f.number("simulated_s"),
                                f.integer("outer_steps"),
                                f.optional_integer("outer_steps_planned")};
  if (type == "run_resumed") {
    RunResumedRecord r{f.integer("life"), f.string("via"), std::nullopt};
    if (r.via != "checkpoint" && r.via != "live_recovery")
      f.fail("via", "must be checkpoint or live_recovery, got '" + r.via + "'");
    if (r.via == "checkpoint") r.from_outer_step = f.integer("from_outer_step");
    if (r.life < 2) f.fail("life", "must be >= 2 (the first life has no run_resumed)");
    return r;
  }
  if (type == "node_lost")
    return NodeLostRecord{f.string("exit"), f.string("reason"), f.integer("outer_steps")};
  return UnknownRecord{};
}

// The members of the object on `line`: read by MembersReader, or, where it stops, by the ordinary
// parse, whose errors name the problem.
Members parse_members(const std::string& line, const Where& where) {
  Members members;
  members.reserve(24);
  MembersReader reader(members);
  if (json::sax_parse(line, &reader) && reader.complete()) return members;
  json obj;
  try {
    obj = json::parse(line);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (406)
    throw ConfigError(where.text() + ": not valid JSON (" + e.what() + ")");
  }
  if (!obj.is_object())
    throw ConfigError(where.text() + ": a record must be a JSON object, got " + obj.dump());
  return members_of(std::move(obj));
}

EventRecord parse_record(const std::string& line, const Where& where) {
  const Members members = parse_members(line, where);
  Fields common(members, where, "record");
  EventRecord r;
  r.type = common.string("type");
  Fields f(members, where, r.type);
  r.t_s = f.number("t");
  r.node = f.integer("node");
  r.body = parse_body(r.type, f);
  return r;
}

}  // namespace

EventRecord parse_event_line(const std::string& line, const std::string& where) {
  return parse_record(line, Where{where});
}

namespace {

// read_events with room for `expected` records made at once: a long run's file holds about a
// million, and a vector grown by doubling moves them all again at every step.
std::vector<EventRecord> read_events(std::istream& in, const std::string& source_name,
                                     std::size_t expected) {
  std::vector<EventRecord> out;
  out.reserve(expected);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    EventRecord r = parse_record(line, Where{source_name, line_no});
    r.line = line_no;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::vector<EventRecord> read_events(std::istream& in, const std::string& source_name) {
  return read_events(in, source_name, 0);
}

std::string events_path(const std::string& run_dir_or_file) {
  namespace fs = std::filesystem;
  if (fs::is_directory(run_dir_or_file))
    return (fs::path(run_dir_or_file) / "events.jsonl").string();
  return run_dir_or_file;
}

namespace {

// Lines in the file `in` reads, which it then rewinds to its start for reading.
std::size_t count_lines(std::istream& in) {
  std::vector<char> block(1 << 20);
  std::size_t lines = 0;
  while (in.read(block.data(), std::streamsize(block.size())) || in.gcount() > 0)
    lines += std::count(block.begin(), block.begin() + in.gcount(), '\n');
  in.clear();
  in.seekg(0);
  return lines + 1;  // a last line without its newline
}

std::vector<EventRecord> read_one_file(const std::string& file) {
  std::ifstream in(file);
  if (!in)
    throw ConfigError(file + ": cannot open the events file (expected RUN_DIR/events.jsonl)");
  return read_events(in, file, count_lines(in));
}

// The lives of one real node's file: a `config` record starts each (a node restarted with
// --resume appends to its file). Simulation files have one. Names are "FILE" for the first life
// and "FILE (life N, line L)" for the others.
void split_lives(std::vector<EventRecord> records, const std::string& file,
                 std::vector<std::vector<EventRecord>>& streams, std::vector<std::string>& names) {
  std::vector<std::size_t> starts;  // where each life begins
  for (std::size_t i = 0; i < records.size(); ++i)
    if (i == 0 || records[i].as<ConfigRecord>()) starts.push_back(i);
  for (std::size_t k = 0; k < starts.size(); ++k)
    names.push_back(k == 0 ? file
                           : file + " (life " + std::to_string(k + 1) + ", from line " +
                                 std::to_string(records[starts[k]].line) + ")");
  if (starts.size() == 1) {  // a simulation's file, or a node never resumed: the whole vector
    streams.push_back(std::move(records));
    return;
  }
  starts.push_back(records.size());
  for (std::size_t k = 0; k + 1 < starts.size(); ++k)
    streams.emplace_back(std::make_move_iterator(records.begin() + starts[k]),
                         std::make_move_iterator(records.begin() + starts[k + 1]));
}

// DIR/node-<ID>/events.jsonl of a real run, in node-id order; empty when there are none.
std::vector<std::string> node_stream_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<long long, std::string>> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("node-", 0) != 0) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const fs::path file = entry.path() / "events.jsonl";
    if (fs::exists(file)) found.push_back({std::stoll(digits), file.string()});
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  for (auto& f : found) files.push_back(std::move(f.second));
  return files;
}

}  // namespace

std::vector<EventRecord> merge_node_streams(std::vector<std::vector<EventRecord>> streams,
                                            const std::vector<std::string>& names) {
  MERIDIAN_CHECK_EQ(streams.size(), names.size());
  if (streams.size() == 1) return std::move(streams.front());
  std::vector<double> origin(streams.size());
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const ConfigRecord* config =
        streams[i].empty() ? nullptr : streams[i].front().as<ConfigRecord>();
    if (!config)
      throw ConfigError(names[i] + ": the first record must be 'config' to merge the streams");
    if (!config->clock_origin_unix_s)
      throw ConfigError(names[i] + ": 'config' has no clock_origin_unix_s: streams of several " +
                        "processes cannot be put on one clock (written by an older meridian?)");
    origin[i] = *config->clock_origin_unix_s;
  }
  const std::size_t first = std::min_element(origin.begin(), origin.end()) - origin.begin();
  std::vector<EventRecord> out;
  std::optional<EventRecord> finished;
  std::optional<std::string> interrupted;  // the reason of the first stream interrupted
  std::int64_t outer_steps = 0;
  std::optional<std::int64_t> planned;
  // The last resume on the common clock: an interruption before it was resumed from.
  double last_resume_s = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < streams.size(); ++i)
    for (const EventRecord& e : streams[i])
      if (e.as<RunResumedRecord>())
        last_resume_s = std::max(last_resume_s, e.t_s + origin[i] - origin[first]);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const double shift_s = origin[i] - origin[first];
    for (EventRecord& e : streams[i]) {
      e.t_s += shift_s;
      // Absolute times inside records move with the clock; durations do not.
      if (auto* r = std::get_if<InnerStepsRecord>(&e.body)) r->start_s += shift_s;
      if (auto* r = std::get_if<AllreduceRecord>(&e.body)) r->start_s += shift_s;
      if (e.as<ConfigRecord>() && i != first) continue;
      const auto* f = e.as<RunFinishedRecord>();
      const auto* x = e.as<RunInterruptedRecord>();
      if (f || x) {
        outer_steps = std::max(outer_steps, f ? f->outer_steps : x->outer_steps);
        if (const auto p = f ? f->outer_steps_planned : x->outer_steps_planned)
          planned = std::max(planned.value_or(*p), *p);
        if (x && !interrupted && e.t_s >= last_resume_s) interrupted = x->reason;
        if (!finished || e.t_s >= finished->t_s) finished = std::move(e);
        continue;
      }
      out.push_back(std::move(e));
    }
  }
  // The last process's final record, spanning the run on the common clock; one process
  // interrupted makes the run interrupted. A final record older than the last resume ended a
  // life that was resumed from: the run went on after it and has not ended (yet).
  if (finished && finished->t_s < last_resume_s) finished.reset();
  if (finished) {
    if (interrupted) {
      finished->type = "run_interrupted";
      finished->body = RunInterruptedRecord{*interrupted, finished->t_s, outer_steps, planned};
    } else {
      finished->body = RunFinishedRecord{finished->t_s, outer_steps, planned};
    }
    out.push_back(std::move(*finished));
  }
  // The config record first, then time order; ties keep node order (streams are by node id).
  std::stable_sort(out.begin(), out.end(), [](const EventRecord& a, const EventRecord& b) {
    const bool ca = a.as<ConfigRecord>() != nullptr, cb = b.as<ConfigRecord>() != nullptr;
    if (ca != cb) return ca;
    return a.t_s < b.t_s;
  });
  return out;
}

bool has_events(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(path)) return true;
  return fs::is_directory(path) &&
         (fs::exists(fs::path(path) / "events.jsonl") || !node_stream_files(path).empty());
}

std::vector<EventRecord> read_events_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "events.jsonl")) {
    const std::vector<std::string> files = node_stream_files(path);
    if (!files.empty()) {
      std::vector<std::vector<EventRecord>> streams;
      std::vector<std::string> names;
      for (const std::string& f : files) split_lives(read_one_file(f), f, streams, names);
      return merge_node_streams(std::move(streams), names);
    }
  }
  // One file: a simulation's, or one real node's, whose lives (if it was resumed) are merged.
  const std::string file = events_path(path);
  std::vector<std::vector<EventRecord>> streams;
  std::vector<std::string> names;
  split_lives(read_one_file(file), file, streams, names);
  if (streams.empty()) return {};
  return merge_node_streams(std::move(streams), names);
}

}  // namespace meridian::analysis
