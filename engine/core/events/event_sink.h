// The event stream every mode writes (events.jsonl): one JSON object per line,
//   {"t": <seconds on the emitting node's Runtime clock>, "node": <node id>, "type": <type>, ...}
// The first record of a file is {"type":"config", ...} with the resolved configuration.
// Event types and their fields are listed in engine/core/events/SCHEMA.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/events/json.h"

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

// Discards everything. Sinks that write or keep records, with their locks, are a backend:
// engine/backends/event_sinks/sinks.h.
class NullEventSink final : public EventSink {
 public:
  void emit(const Event&) override {}
};

}  // namespace meridian
