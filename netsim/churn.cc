// Churn trace parsing and validation (see churn.h).
#include "netsim/churn.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace meridian::netsim {

const char* churn_kind_name(ChurnKind k) {
  switch (k) {
    case ChurnKind::kJoin:
      return "join";
    case ChurnKind::kLeave:
      return "leave";
    case ChurnKind::kFail:
      return "fail";
    case ChurnKind::kSlow:
      return "slow";
  }
  return "?";
}

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) out.push_back(trim(f));
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

bool parse_double(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return *end == 0 && std::isfinite(v);
}

}  // namespace

ChurnTrace parse_churn(const std::string& text, const std::string& file,
                       const std::vector<std::string>& hosts,
                       const std::set<std::string>& running) {
  ChurnTrace trace;
  std::stringstream in(text);
  std::string line;
  int line_no = 0;
  bool header = false;
  auto fail = [&](int ln, const std::string& what) -> ConfigError {
    return ConfigError(file + ":" + std::to_string(ln) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++line_no;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    auto f = split(t);
    if (!header) {
      if (f.size() < 3 || f.size() > 4 || (f[0] != "time_s" && f[0] != "step") || f[1] != "node" ||
          f[2] != "event" || (f.size() == 4 && f[3] != "arg"))
        throw fail(line_no,
                   "expected the header 'time_s,node,event[,arg]' or "
                   "'step,node,event[,arg]', got '" +
                       t + "'");
      trace.by_step = f[0] == "step";
      header = true;
      continue;
    }
    if (f.size() < 3 || f.size() > 4)
      throw fail(line_no,
                 "expected 3 or 4 comma-separated fields, got " + std::to_string(f.size()));
    ChurnEvent e;
    e.line = line_no;
    if (!parse_double(f[0], e.at) || e.at < 0)
      throw fail(line_no, std::string("column ") + (trace.by_step ? "'step'" : "'time_s'") +
                              ": expected a number >= 0, got '" + f[0] + "'");
    if (trace.by_step && e.at != std::floor(e.at))
      throw fail(line_no, "column 'step': expected an integer, got '" + f[0] + "'");
    e.host = f[1];
    if (std::find(hosts.begin(), hosts.end(), e.host) == hosts.end())
      throw fail(line_no, "column 'node': no host named '" + e.host +
                              "' in the scenario (hosts are <site>-<index>, e.g. " +
                              (hosts.empty() ? std::string("none") : hosts.front()) + ")");
    const std::string& ev = f[2];
    if (ev == "join")
      e.kind = ChurnKind::kJoin;
    else if (ev == "leave")
      e.kind = ChurnKind::kLeave;
    else if (ev == "fail")
      e.kind = ChurnKind::kFail;
    else if (ev == "slow")
      e.kind = ChurnKind::kSlow;
    else
      throw fail(line_no, "column 'event': expected join, leave, fail or slow, got '" + ev + "'");
    const std::string arg = f.size() == 4 ? f[3] : "";
    if (e.kind == ChurnKind::kSlow) {
      if (!parse_double(arg, e.arg) || e.arg <= 0 || e.arg > 1)
        throw fail(line_no,
                   "column 'arg': a slow event needs a speed factor in (0, 1], got '" + arg + "'");
    } else if (!arg.empty()) {
      throw fail(line_no, "column 'arg': only slow events take an argument, got '" + arg + "'");
    }
    trace.events.push_back(e);
  }
  if (!header) throw fail(line_no, "empty trace: expected a header line");
  std::stable_sort(trace.events.begin(), trace.events.end(),
                   [](const ChurnEvent& a, const ChurnEvent& b) { return a.at < b.at; });
  std::set<std::string> up = running;
  for (auto& e : trace.events) {
    const bool on = up.count(e.host) > 0;
    if (e.kind == ChurnKind::kJoin) {
      if (on) throw fail(e.line, "join of host '" + e.host + "', which is already running then");
      up.insert(e.host);
    } else {
      if (!on)
        throw fail(e.line, std::string(churn_kind_name(e.kind)) + " of host '" + e.host +
                               "', which is not running then");
      if (e.kind != ChurnKind::kSlow) up.erase(e.host);
    }
  }
  return trace;
}

ChurnTrace load_churn(const std::string& path, const std::vector<std::string>& hosts,
                      const std::set<std::string>& running) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the churn trace");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_churn(ss.str(), path, hosts, running);
}

}  // namespace meridian::netsim
