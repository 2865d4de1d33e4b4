// The event sinks that write or keep records: one JSON line per event to a stream, or a vector
// in memory. Thread-safe with a std::mutex held only while one record is written, never across a
// Runtime wait, so they serve threads and SimGrid actors alike. Not part of the engine's core
// (engine/core/events/event_sink.h is the seam).
#pragma once

#include <iosfwd>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/events/event_sink.h"

namespace meridian {

// When a JsonlEventSink hands its records to the operating system.
enum class EventFlush {
  // After every record: a process killed at any point (SIGKILL) leaves every record it emitted
  // in its file, whole (the kernel holds what was written; not an fsync: a machine's crash may
  // still lose the last ones). The mode of a real node (`meridian train`).
  kEachRecord,
  // When the stream's buffer fills and at its end (simulations, which write many records and
  // are not killed mid-run: bench/event_sink_bench.cc measures what a flush costs).
  kBuffered,
};

// Writes one line per event to a stream owned by the caller.
class JsonlEventSink final : public EventSink {
 public:
  explicit JsonlEventSink(std::ostream& out, EventFlush flush = EventFlush::kBuffered)
      : out_(out), flush_(flush) {}
  void emit(const Event& e) override;
  // Hands every record written so far to the operating system (before a process ends itself
  // without unwinding: a fault point's SIGKILL, _exit).
  void flush();

 private:
  std::mutex mu_;  // held only while writing one line: never across a Runtime wait
  std::ostream& out_;
  const EventFlush flush_;
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
