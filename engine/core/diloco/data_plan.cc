#include "engine/core/diloco/data_plan.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "engine/core/error.h"

namespace meridian {
namespace {

constexpr std::string_view kMagic = "data-ledger 1";

[[noreturn]] void bad(const std::string& what) { throw ProtocolError("data ledger: " + what); }

// Whitespace-separated integers of one line, each >= 0.
std::vector<std::int64_t> integers(std::string_view line, const std::string& where) {
  std::vector<std::int64_t> out;
  std::size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
    if (ec != std::errc() || v < 0 || (end != line.data() + line.size() && *end != ' '))
      bad(where + ": expected non-negative integers, got '" + std::string(line) + "'");
    out.push_back(v);
    i = static_cast<std::size_t>(end - line.data());
  }
  return out;
}

std::vector<SampleRange> ranges_of(const std::vector<std::int64_t>& v, std::size_t from,
                                   const std::string& where) {
  if ((v.size() - from) % 2 != 0) bad(where + ": a range without its end");
  std::vector<SampleRange> out;
  for (std::size_t i = from; i < v.size(); i += 2) {
    if (v[i] >= v[i + 1]) bad(where + ": empty or reversed range");
    out.push_back({v[i], v[i + 1]});
  }
  return out;
}

std::int64_t total(const std::vector<SampleRange>& ranges) {
  std::int64_t n = 0;
  for (const SampleRange& r : ranges) n += r.size();
  return n;
}

void put_ranges(std::ostringstream& os, const std::vector<SampleRange>& ranges) {
  for (const SampleRange& r : ranges) os << ' ' << r.begin << ' ' << r.end;
}

}  // namespace

std::vector<std::int64_t> flatten(const std::vector<SampleRange>& ranges) {
  std::vector<std::int64_t> out;
  out.reserve(2 * ranges.size());
  for (const SampleRange& r : ranges) {
    out.push_back(r.begin);
    out.push_back(r.end);
  }
  return out;
}

DataLedger::DataLedger(std::int64_t per_node) : per_node_(per_node) {
  if (per_node <= 0) throw ConfigError("data ledger: samples per node per outer step must be > 0");
}

void DataLedger::give_back(const std::vector<SampleRange>& ranges) {
  returned_.insert(returned_.end(), ranges.begin(), ranges.end());
  std::sort(returned_.begin(), returned_.end(),
            [](const SampleRange& a, const SampleRange& b) { return a.begin < b.begin; });
  std::vector<SampleRange> merged;
  for (const SampleRange& r : returned_) {
    MERIDIAN_CHECK(merged.empty() || merged.back().end <= r.begin);  // owed at most once
    if (!merged.empty() && merged.back().end == r.begin)
      merged.back().end = r.end;
    else
      merged.push_back(r);
  }
  returned_ = std::move(merged);
}

std::vector<SampleRange> DataLedger::take(std::int64_t count) {
  std::vector<SampleRange> out;
  while (count > 0 && !returned_.empty()) {
    SampleRange& r = returned_.front();
    const std::int64_t n = std::min(count, r.size());
    out.push_back({r.begin, r.begin + n});
    r.begin += n;
    count -= n;
    if (r.size() == 0) returned_.erase(returned_.begin());
  }
  if (count > 0) {
    out.push_back({next_, next_ + count});
    next_ += count;
  }
  return out;
}

void DataLedger::plan(std::int64_t step, const std::vector<std::int64_t>& members) {
  MERIDIAN_CHECK_GT(per_node_, 0);
  Plan& p = planned_[step];
  for (std::int64_t m : members) {
    const bool has = std::any_of(p.begin(), p.end(), [m](const auto& e) { return e.first == m; });
    if (!has) p.emplace_back(m, take(per_node_));
  }
}

std::vector<SampleRange> DataLedger::assigned(std::int64_t step, std::int64_t node) const {
  const auto it = planned_.find(step);
  if (it == planned_.end()) return {};
  for (const auto& [n, ranges] : it->second)
    if (n == node) return ranges;
  return {};
}

DataSettlement DataLedger::settle(std::int64_t step, const std::vector<std::int64_t>& credited) {
  DataSettlement s;
  s.outer_step = step;
  const auto it = planned_.find(step);
  if (it == planned_.end()) return s;
  for (auto& [node, ranges] : it->second) {
    if (std::find(credited.begin(), credited.end(), node) != credited.end()) {
      s.trained.emplace_back(node, ranges);
    } else {
      s.returned.insert(s.returned.end(), ranges.begin(), ranges.end());
      give_back(ranges);
    }
  }
  planned_.erase(it);
  return s;
}

std::string DataLedger::encode() const {
  std::ostringstream os;
  os << kMagic << "\nper_node " << per_node_ << "\nnext " << next_ << "\nreturned";
  put_ranges(os, returned_);
  os << '\n';
  for (const auto& [step, plan] : planned_)
    for (const auto& [node, ranges] : plan) {
      os << "planned " << step << ' ' << node;
      put_ranges(os, ranges);
      os << '\n';
    }
  return os.str();
}

DataLedger DataLedger::decode(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) bad("the text does not end with a newline (truncated?)");
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  if (lines.size() < 4 || lines[0] != kMagic)
    bad("expected '" + std::string(kMagic) + "', per_node, next and returned lines");
  auto keyed = [&](std::size_t i, std::string_view key) {
    const std::string_view l = lines[i];
    if (l.substr(0, key.size()) != key || (l.size() > key.size() && l[key.size()] != ' '))
      bad("line " + std::to_string(i + 1) + ": expected '" + std::string(key) + "'");
    return integers(l.substr(key.size()), std::string(key));
  };
  DataLedger d;
  const auto per_node = keyed(1, "per_node");
  const auto next = keyed(2, "next");
  if (per_node.size() != 1 || per_node[0] == 0) bad("per_node: expected one positive integer");
  if (next.size() != 1) bad("next: expected one integer");
  d.per_node_ = per_node[0];
  d.next_ = next[0];
  d.returned_ = ranges_of(keyed(3, "returned"), 0, "returned");
  std::vector<SampleRange> all = d.returned_;
  for (std::size_t i = 4; i < lines.size(); ++i) {
    const auto v = keyed(i, "planned");
    const std::string where = "line " + std::to_string(i + 1);
    if (v.size() < 2) bad(where + ": expected a step and a node");
    const auto ranges = ranges_of(v, 2, where);
    if (total(ranges) != d.per_node_)
      bad(where + ": node " + std::to_string(v[1]) + " has " + std::to_string(total(ranges)) +
          " positions planned, not per_node " + std::to_string(d.per_node_));
    Plan& p = d.planned_[v[0]];
    for (const auto& [node, r] : p)
      if (node == v[1]) bad(where + ": node " + std::to_string(node) + " planned twice");
    p.emplace_back(v[1], ranges);
    all.insert(all.end(), ranges.begin(), ranges.end());
  }
  std::sort(all.begin(), all.end(),
            [](const SampleRange& a, const SampleRange& b) { return a.begin < b.begin; });
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].end > d.next_)
      bad("range [" + std::to_string(all[i].begin) + ", " + std::to_string(all[i].end) +
          ") lies past next " + std::to_string(d.next_));
    if (i > 0 && all[i - 1].end > all[i].begin)
      bad("ranges [" + std::to_string(all[i - 1].begin) + ", " + std::to_string(all[i - 1].end) +
          ") and [" + std::to_string(all[i].begin) + ", " + std::to_string(all[i].end) +
          ") overlap");
  }
  // The text's returned list is kept as it came only when it is in give_back()'s form.
  std::vector<SampleRange> owed = std::move(d.returned_);
  d.returned_.clear();
  d.give_back(owed);
  return d;
}

}  // namespace meridian
