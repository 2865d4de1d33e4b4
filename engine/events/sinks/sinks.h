// The event sinks that write or keep records: one JSON line per event to a stream, or a vector
// in memory. Thread-safe with a std::mutex held only while one record is written, never across a
// Runtime wait, so they serve threads and SimGrid actors alike. Not part of the engine's core
// (engine/events/event_sink.h is the seam).
#pragma once

#include <iosfwd>
#include <mutex>
#include <string>
#include <vector>

#include "engine/events/event_sink.h"

namespace meridian {

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
