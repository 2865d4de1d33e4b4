// summary.json from an events.jsonl stream, following engine/events/SCHEMA.md's metric
// definitions. Reads only the events (no simulator state), so it applies to any mode's stream.
// Not the analysis/ summarizer: the lead may make one implementation serve both.
#pragma once

#include <iosfwd>
#include <string>

namespace meridian::netsim {

// The summary as pretty-printed JSON text. Throws ProtocolError on a malformed stream.
std::string summarize_events(std::istream& jsonl);

// A short human-readable table of the summary (for stdout).
std::string summary_table(const std::string& summary_json);

}  // namespace meridian::netsim
