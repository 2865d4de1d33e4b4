// Test support for elastic data (engine/core/diloco/data_plan.h): the `data` records of a run, one
// per settled outer step, and the check that every position handed out was trained exactly once.
// Used by the thread clusters (tests/mesh), the thread emulation (tests/trainer) and the real
// processes (tests/gloo), from events in memory or from events.jsonl files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meridian::testing {

// outer step -> the step's `data` record, less `t` and `node`.
using DataRecords = std::map<std::int64_t, nlohmann::json>;

// Adds `record` (an event, any type; only `data` ones count) to `records`. Every node that
// settled a step settled it the same way (one ledger): a gtest failure naming `where` otherwise.
inline void add_data_record(DataRecords& records, nlohmann::json record, const std::string& where) {
  if (record.is_discarded() || record.value("type", "") != "data") return;
  record.erase("t");
  record.erase("node");
  const auto step = record.at("outer_step").get<std::int64_t>();
  const auto [it, fresh] = records.emplace(step, record);
  EXPECT_EQ(it->second, record) << where << " settled outer step " << step << " differently";
}

// Node -> the positions credited to it, step by step (a `trained` list is node, begin, end, ...).
inline std::map<std::int64_t, std::vector<std::int64_t>> credited_positions(
    const DataRecords& records) {
  std::map<std::int64_t, std::vector<std::int64_t>> out;
  for (const auto& [step, r] : records) {
    const auto t = r.at("trained").get<std::vector<std::int64_t>>();
    for (std::size_t i = 0; i + 2 < t.size(); i += 3)
      for (std::int64_t p = t[i + 1]; p < t[i + 2]; ++p) out[t[i]].push_back(p);
  }
  return out;
}

// Every position the run handed out, [0, next) after its last step, was trained by exactly one
// node once, and nothing is owed: no sample lost, none trained twice.
inline void expect_every_position_trained_once(const DataRecords& records) {
  ASSERT_FALSE(records.empty()) << "no data records";
  std::vector<std::int64_t> all;
  for (const auto& [node, ps] : credited_positions(records)) all.insert(all.end(), ps.begin(), ps.end());
  std::sort(all.begin(), all.end());
  const auto& last = records.rbegin()->second;
  EXPECT_EQ(last.at("owed").get<std::int64_t>(), 0);
  std::vector<std::int64_t> want(last.at("next").get<std::size_t>());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
  EXPECT_TRUE(all == want) << all.size() << " positions trained, " << want.size() << " handed out";
}

}  // namespace meridian::testing
