// What an operator watching a real node's terminal must see as it happens (issue 34): a peer
// declared failed, a round aborted or retried, a fallback, a non-finite pseudo-gradient, a
// membership change, admission and live recovery. Until now these were only in events.jsonl and
// the terminal showed one slow step and "nodes 2". A forwarding sink: every record goes to the
// node's events.jsonl as before; these few also become one line on stderr.
#pragma once

#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/events/event_sink.h"

namespace meridian::cli {

// The line for `e`, or none for a record the terminal does not show. `last_members` holds the
// last epoch's members that were shown (an epoch_formed with the same members is not news).
inline std::optional<std::string> notice_line(const Event& e,
                                              std::vector<std::int64_t>& last_members) {
  static const char* const kShown[] = {
      "fail_detected", "ring_aborted", "retry",    "fallback",         "nonfinite",        "silent",
      "process_gone",  "epoch_formed", "admitted", "recovery_started", "recovery_finished"};
  bool shown = false;
  for (const char* t : kShown) shown |= e.type == t;
  if (!shown) return std::nullopt;  // most records (allreduce, inner_steps): not parsed at all
  const nlohmann::json f = nlohmann::json::parse(e.fields.str(), nullptr, false);
  if (f.is_discarded()) return std::nullopt;
  const auto num = [&](const char* k) { return f.contains(k) ? f[k].dump() : std::string("?"); };
  const auto text = [&](const char* k) {
    return f.contains(k) && f[k].is_string() ? f[k].get<std::string>() : std::string("?");
  };
  const auto step = [&] {  // 0-based in the records, 1-based on the progress line
    return f.contains("outer_step") && f["outer_step"].is_number_integer()
               ? std::to_string(f["outer_step"].get<std::int64_t>() + 1)
               : std::string("?");
  };
  const auto mb = [&](const char* k) {
    std::ostringstream s;
    s.precision(1);
    s << std::fixed << (f.contains(k) && f[k].is_number() ? f[k].get<double>() / 1e6 : 0.0);
    return s.str() + " MB";
  };
  std::ostringstream line;
  line << "node " << e.node << ": ";
  if (e.type == "fail_detected") {
    line << "node " << num("failed") << " declared failed (" << text("by") << ")";
  } else if (e.type == "ring_aborted") {
    line << "outer step " << step() << ": all-reduce aborted: " << text("reason");
  } else if (e.type == "retry") {
    line << "outer step " << step() << ": all-reduce retry " << num("attempt") << " ("
         << text("reason") << ")";
  } else if (e.type == "fallback") {
    line << "outer step " << step() << ": no average; applying its own pseudo-gradient ("
         << text("reason") << ")";
  } else if (e.type == "nonfinite") {
    line << "outer step " << step() << ": non-finite pseudo-gradient of node " << num("faulty")
         << " (found by " << text("detected_by") << ")";
  } else if (e.type == "silent") {
    line << "node " << num("node_silent") << " silent for " << num("silent_s")
         << " s: its lease ended";
  } else if (e.type == "process_gone") {
    line << "node " << num("node_gone") << "'s process is gone (" << text("address")
         << " refused): its lease ended";
  } else if (e.type == "epoch_formed") {
    std::vector<std::int64_t> members;
    if (f.contains("members") && f["members"].is_array())
      for (const auto& m : f["members"])
        if (m.is_number_integer()) members.push_back(m.get<std::int64_t>());
    if (members == last_members) return std::nullopt;
    last_members = members;
    line << "epoch " << num("epoch") << " at outer step " << step() << ": " << members.size()
         << " nodes " << f["members"].dump();
  } else if (e.type == "admitted") {
    line << "admitted at epoch " << num("epoch") << ", outer step " << step();
  } else if (e.type == "recovery_started") {
    line << "live recovery: fetching " << mb("bytes") << " from nodes "
         << (f.contains("sources") ? f["sources"].dump() : "?");
  } else {  // recovery_finished
    line << "live recovery: " << mb("bytes") << " in " << num("elapsed_s") << " s from nodes "
         << (f.contains("sources") ? f["sources"].dump() : "?");
  }
  return line.str();
}

// Forwards every record to `inner`, and writes notice_line's lines to `out` (stderr).
class TerminalNotices final : public EventSink {
 public:
  TerminalNotices(EventSink& inner, std::ostream& out = std::cerr) : inner_(inner), out_(out) {}
  void emit(const Event& e) override {
    inner_.emit(e);
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto line = notice_line(e, last_members_)) out_ << *line << std::endl;
  }

 private:
  EventSink& inner_;
  std::ostream& out_;
  std::mutex mu_;
  std::vector<std::int64_t> last_members_;
};

}  // namespace meridian::cli
