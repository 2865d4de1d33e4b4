// Test support: a long run with churn on the cluster harness, sampling the store's keys as it
// goes and checking that their number stays under a bound that does not grow with the run
// (engine/core/mesh/PROTOCOL.md, "Store size"). Shared by the in-memory run (tests/mesh) and the
// run on etcd (tests/etcd). Not a check of the values: the fault matrix does that.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {

// Keys by kind ("round", "report", "left", ...): the first path element after "mesh/".
inline std::map<std::string, std::size_t> keys_by_kind(Store& store) {
  std::map<std::string, std::size_t> out;
  for (const std::string& key : store.list("mesh/")) {
    const std::string rest = key.substr(5);
    ++out[rest.substr(0, rest.find('/'))];
  }
  return out;
}

inline std::size_t total(const std::map<std::string, std::size_t>& kinds, bool with_claims) {
  std::size_t n = 0;
  for (const auto& [kind, count] : kinds)
    if (with_claims || kind != "id") n += count;
  return n;
}

inline std::string describe(const std::map<std::string, std::size_t>& kinds) {
  std::string s;
  for (const auto& [kind, count] : kinds) s += kind + "=" + std::to_string(count) + " ";
  return s;
}

// Runs `o` (3 initial nodes) with churn all along: every 10 outer steps a node leaves gracefully
// and two joiners arrive, one of which crashes at once; one more joiner crashes after the run's
// final record, where no round can admit it. Checks the run's invariants, that the key count
// (the id/ claims apart: one per node started, what keeps ids unique) stays under a bound
// independent of the number of rounds at every sample, and that once every node has stopped no
// queue entry is left. Returns the samples: outer step -> keys by kind.
inline std::map<std::int64_t, std::map<std::string, std::size_t>> run_with_churn(
    ClusterOptions o) {
  o.initial = 3;
  Cluster c(o);
  std::mutex mu;
  std::map<std::int64_t, std::map<std::string, std::size_t>> seen;  // step -> keys by kind
  std::int64_t next_leaver = 1;
  for (std::int64_t step = 10; step < o.outer_steps - 5; step += 10) {
    c.at_step(step, [&, step] {
      c.add_joiner();
      c.kill(c.add_joiner());  // dies queued (or just admitted: then a retry removes it)
      c.leave(next_leaver++);
      // Nodes 1, 2, 3 leave first, then the joiners that lived, in order: skip the dead ones.
      while (c.killed(next_leaver)) ++next_leaver;
      std::lock_guard<std::mutex> lock(mu);
      seen[step] = keys_by_kind(c.shared_store());
    });
  }
  c.at_step(o.outer_steps - 1, [&] { c.kill(c.add_joiner()); });  // never admitted: the end
  c.start();
  c.join();
  c.check_invariants();
  // Every node has stopped or crashed: their leases end, and the queue entries with them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!c.shared_store().list("mesh/join/").empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polls, with a deadline
  EXPECT_EQ(c.shared_store().list("mesh/join/"), std::vector<std::string>{});
  EXPECT_GE(seen.size(), static_cast<std::size_t>((o.outer_steps - 6) / 10));
  // Per live node (at most 5: 3 members, a joiner, a leaver): hb/, join/, one report and one
  // ready key per kept round (3, one more while a sweep is under way); plus 4 records, left/ of
  // the leavers still in a record (2), and claims, next_id, leader, latest.
  constexpr std::size_t kBound = 5 * (2 + 2 * 4) + 4 + 2 + 4;
  for (const auto& [step, counts] : seen) {
    const auto& kinds = counts;  // a lambda may not capture a structured binding (clang 14)
    const auto of = [&](const char* kind) { return kinds.count(kind) ? kinds.at(kind) : 0; };
    EXPECT_LE(total(kinds, false), kBound) << "step " << step << ": " << describe(kinds);
    EXPECT_LE(of("left"), 2u) << "step " << step << ": " << describe(kinds);
    EXPECT_LE(of("join"), 2u) << "step " << step << ": " << describe(kinds);
    // 3 kept, and one more between a record's write and the sweep that follows it.
    EXPECT_LE(of("round"), 4u) << "step " << step << ": " << describe(kinds);
  }
  if (!seen.empty())
    std::printf("mesh keys at step %lld: %zu (%zu with claims), at step %lld: %zu (%zu)\n",
                static_cast<long long>(seen.begin()->first), total(seen.begin()->second, false),
                total(seen.begin()->second, true), static_cast<long long>(seen.rbegin()->first),
                total(seen.rbegin()->second, false), total(seen.rbegin()->second, true));
  return seen;
}

}  // namespace meridian::testing
