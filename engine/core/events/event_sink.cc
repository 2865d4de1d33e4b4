// Event records as JSON lines.
#include "engine/core/events/event_sink.h"

namespace meridian {

std::string Event::to_json() const {
  JsonObject head;
  head.add("t", t_s).add("node", node).add("type", type);
  std::string s = head.str();
  if (!fields.empty()) {
    s.pop_back();  // '}'
    std::string f = fields.str();
    s += "," + f.substr(1);
  }
  return s;
}

}  // namespace meridian
