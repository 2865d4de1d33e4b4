// JsonlEventSink and MemoryEventSink.
#include "engine/backends/event_sinks/sinks.h"

#include <ostream>

namespace meridian {

void JsonlEventSink::emit(const Event& e) {
  std::string line = e.to_json();
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  out_ << line;
  if (flush_ == EventFlush::kEachRecord) out_.flush();
}

void JsonlEventSink::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  out_.flush();
}

void MemoryEventSink::emit(const Event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(e);
}

std::vector<Event> MemoryEventSink::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::vector<Event> MemoryEventSink::of_type(const std::string& type) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  for (const auto& e : events_)
    if (e.type == type) out.push_back(e);
  return out;
}

}  // namespace meridian
