// RoundRecord: the coordinator's decision for one round of the outer loop, as stored under
// <prefix>round/<n> (written once, by compare-and-set from absent). Every member reads the same
// record, so the members, the ring order, the epoch and the outer step are agreed on by
// construction. Not a transport or a schedule: it only names who takes part in what.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meridian {

// How round n-1 ended, as recorded in round n.
enum class RoundPrev : std::uint8_t {
  kStart = 0,     // round 0: nothing before it
  kCommit = 1,    // every live member's all-reduce succeeded: apply the reduced pseudo-gradient
  kRetry = 2,     // some all-reduce failed: redo the same outer step in a new epoch
  kFallback = 3,  // retries exhausted: apply the local pseudo-gradient (event `fallback`)
};

struct RoundRecord {
  std::uint64_t round = 0;
  std::uint64_t epoch = 0;      // a new epoch whenever members change or a round failed
  std::int64_t outer_step = 0;  // the outer step this round computes
  int attempt = 0;              // 0 for a fresh step, k for its k-th retry
  RoundPrev prev = RoundPrev::kStart;
  std::vector<std::int64_t> members;  // node ids in ring order (rank i = members[i])
  std::vector<std::int64_t> joiners;  // members admitted in this round: they recover first
  std::vector<std::int64_t> sources;  // members that serve recovery (previous members)
  std::vector<std::int64_t> removed;  // members of the previous round that are gone
  // Members that sit this retry out: their pseudo-gradient was not finite (the non-finite
  // guard), so they contribute zeros and the others' sum is divided by members - abstain.
  // Empty outside retries; encoded only when not empty.
  std::vector<std::int64_t> abstain;
  // Members that sat out (abstain) the last n >= 1 outer steps in a row, as (id, n), ascending
  // by id: the coordinator's count for MeshOptions::nonfinite_evict_after, kept in the record so
  // that a new coordinator counts on. Updated at outer-step boundaries (commit, fallback),
  // carried unchanged by retries. Encoded only when not empty ("nonfinite=3:2,5:1").
  std::vector<std::pair<std::int64_t, int>> nonfinite_steps;
  // Why the previous round did not commit (retry, fallback), or why a member was evicted.
  std::string reason;

  int rank_of(std::int64_t node) const;  // -1 when not a member
  bool is_joiner(std::int64_t node) const;
  bool abstains(std::int64_t node) const;
  // n of `nonfinite_steps` for `node`; 0 when it is not listed.
  int nonfinite_steps_of(std::int64_t node) const;
  // Members whose pseudo-gradients are averaged: members - abstain (at least 1).
  int contributors() const;

  // "round=..;epoch=..;..." text; decode() throws ProtocolError naming the bad field.
  std::string encode() const;
  static RoundRecord decode(const std::string& text);
};

const char* round_prev_name(RoundPrev p);

}  // namespace meridian
