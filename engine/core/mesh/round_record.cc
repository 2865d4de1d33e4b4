// RoundRecord text encoding.
#include "engine/core/mesh/round_record.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "engine/core/error.h"

namespace meridian {
namespace {

std::string join_ids(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

template <typename T>
T parse_int(const std::string& field, const std::string& text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw ProtocolError("round record: field '" + field + "' is not an integer: '" + text + "'");
  return v;
}

// The comma-separated items of a list field ("" has none).
std::vector<std::string> items_of(const std::string& text) {
  std::vector<std::string> items;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    items.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return items;
}

std::vector<std::int64_t> parse_ids(const std::string& field, const std::string& text) {
  std::vector<std::int64_t> ids;
  for (const std::string& item : items_of(text))
    ids.push_back(parse_int<std::int64_t>(field, item));
  return ids;
}

std::string join_steps(const std::vector<std::pair<std::int64_t, int>>& steps) {
  std::string s;
  for (std::size_t i = 0; i < steps.size(); ++i)
    s += (i ? "," : "") + std::to_string(steps[i].first) + ":" + std::to_string(steps[i].second);
  return s;
}

std::string sanitize(std::string s) {
  std::replace(s.begin(), s.end(), ';', ',');
  std::replace(s.begin(), s.end(), '=', ':');
  return s;
}

}  // namespace

const char* round_prev_name(RoundPrev p) {
  switch (p) {
    case RoundPrev::kStart:
      return "start";
    case RoundPrev::kCommit:
      return "commit";
    case RoundPrev::kRetry:
      return "retry";
    case RoundPrev::kFallback:
      return "fallback";
  }
  return "?";
}

int RoundRecord::rank_of(std::int64_t node) const {
  const auto it = std::find(members.begin(), members.end(), node);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

bool RoundRecord::is_joiner(std::int64_t node) const {
  return std::find(joiners.begin(), joiners.end(), node) != joiners.end();
}

bool RoundRecord::abstains(std::int64_t node) const {
  return std::find(abstain.begin(), abstain.end(), node) != abstain.end();
}

int RoundRecord::nonfinite_steps_of(std::int64_t node) const {
  for (const auto& [id, n] : nonfinite_steps)
    if (id == node) return n;
  return 0;
}

int RoundRecord::contributors() const {
  return std::max(1, static_cast<int>(members.size() - abstain.size()));
}

std::string RoundRecord::encode() const {
  return "round=" + std::to_string(round) + ";epoch=" + std::to_string(epoch) +
         ";outer_step=" + std::to_string(outer_step) + ";attempt=" + std::to_string(attempt) +
         ";prev=" + std::to_string(static_cast<int>(prev)) + ";members=" + join_ids(members) +
         ";joiners=" + join_ids(joiners) + ";sources=" + join_ids(sources) +
         ";removed=" + join_ids(removed) +
         (abstain.empty() ? std::string() : ";abstain=" + join_ids(abstain)) +
         (nonfinite_steps.empty() ? std::string() : ";nonfinite=" + join_steps(nonfinite_steps)) +
         ";reason=" + sanitize(reason);
}

RoundRecord RoundRecord::decode(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t semi = text.find(';', pos);
    if (semi == std::string::npos) semi = text.size();
    const std::string item = text.substr(pos, semi - pos);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw ProtocolError("round record: item '" + item + "' has no '='");
    fields[item.substr(0, eq)] = item.substr(eq + 1);
    pos = semi + 1;
  }
  const auto field = [&](const char* name) -> const std::string& {
    const auto it = fields.find(name);
    if (it == fields.end())
      throw ProtocolError(std::string("round record: missing field '") + name + "'");
    return it->second;
  };
  RoundRecord r;
  r.round = parse_int<std::uint64_t>("round", field("round"));
  r.epoch = parse_int<std::uint64_t>("epoch", field("epoch"));
  r.outer_step = parse_int<std::int64_t>("outer_step", field("outer_step"));
  r.attempt = parse_int<int>("attempt", field("attempt"));
  const int prev = parse_int<int>("prev", field("prev"));
  if (prev < 0 || prev > 3) throw ProtocolError("round record: field 'prev' out of range");
  r.prev = static_cast<RoundPrev>(prev);
  r.members = parse_ids("members", field("members"));
  r.joiners = parse_ids("joiners", field("joiners"));
  r.sources = parse_ids("sources", field("sources"));
  r.removed = parse_ids("removed", field("removed"));
  if (const auto it = fields.find("abstain"); it != fields.end()) {
    r.abstain = parse_ids("abstain", it->second);
    for (std::int64_t id : r.abstain)
      if (r.rank_of(id) < 0)
        throw ProtocolError("round record: abstaining node " + std::to_string(id) +
                            " is not a member");
  }
  if (const auto it = fields.find("nonfinite"); it != fields.end()) {
    for (const std::string& item : items_of(it->second)) {
      const std::size_t colon = item.find(':');
      if (colon == std::string::npos)
        throw ProtocolError("round record: field 'nonfinite': item '" + item + "' is not ID:STEPS");
      const auto id = parse_int<std::int64_t>("nonfinite", item.substr(0, colon));
      const int n = parse_int<int>("nonfinite", item.substr(colon + 1));
      if (r.rank_of(id) < 0)
        throw ProtocolError("round record: non-finite node " + std::to_string(id) +
                            " is not a member");
      if (n < 1) throw ProtocolError("round record: field 'nonfinite': '" + item + "' has n < 1");
      r.nonfinite_steps.emplace_back(id, n);
    }
  }
  r.reason = field("reason");
  return r;
}

}  // namespace meridian
