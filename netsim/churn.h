// Churn traces: CSV with a header `time_s,node,event[,arg]` or `step,node,event[,arg]`. `node`
// names a host slot of the scenario (e.g. us-east-2); events are join, leave (graceful), fail
// (crash) and slow (arg = speed factor in (0, 1], 1 restores). Parsing and validation only;
// replay is in simulation.cc. Not a general availability-trace format.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace meridian::netsim {

enum class ChurnKind { kJoin, kLeave, kFail, kSlow };

struct ChurnEvent {
  double at = 0.0;   // seconds (time_s traces) or inner step (step traces)
  std::string host;  // host slot name
  ChurnKind kind = ChurnKind::kFail;
  double arg = 0.0;  // slow: speed factor
  int line = 0;      // for messages
};

struct ChurnTrace {
  bool by_step = false;            // `at` is an inner step, not a time
  std::vector<ChurnEvent> events;  // sorted by `at` (stable: file order among equal `at`)
};

// `hosts`: the slot names; `running`: those running at the start. The trace is replayed on
// paper to check that joins name stopped hosts and leave/fail/slow name running ones.
ChurnTrace parse_churn(const std::string& text, const std::string& file,
                       const std::vector<std::string>& hosts, const std::set<std::string>& running);
ChurnTrace load_churn(const std::string& path, const std::vector<std::string>& hosts,
                      const std::set<std::string>& running);

const char* churn_kind_name(ChurnKind k);

}  // namespace meridian::netsim
