// The event stream every mode writes (events.jsonl): one JSON object per line,
//   {"t": <seconds on the emitting node's Runtime clock>, "node": <node id>, "type": <type>, ...}
// The first record of a file is {"type":"config", ...} with the resolved configuration.
// Event types and their fields are listed in engine/events/SCHEMA.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <vector>

#include "engine/events/json.h"

namespace meridian {

struct Event {
  double t_s = 0.0;
  std::int64_t node = -1;  // unique node id; -1 for run-level records
  std::string type;
  JsonObject fields;

  std::string to_json() const;
};

// Thread-safety: emit() may be called from any activity; records are written whole.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(const Event& e) = 0;
};

// Discards everything.
class NullEventSink final : public EventSink {
 public:
  void emit(const Event&) override {}
};

// Writes one line per event to a stream owned by the caller.
class JsonlEventSink final : public EventSink {
 public:
  explicit JsonlEventSink(std::ostream& out) : out_(out) {}
  void emit(const Event& e) override;

 private:
  std::mutex mu_;  // held only while writing one line: never across a Runtime wait
  std::ostream& out_;
};

// Keeps events in memory (tests, summaries).
class MemoryEventSink final : public EventSink {
 public:
  void emit(const Event& e) override;
  std::vector<Event> events() const;
  // Events of one type, in emission order.
  std::vector<Event> of_type(const std::string& type) const;

 private:
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace meridian
