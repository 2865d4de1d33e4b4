// Elastic data: which samples each node trains, as a function of the run's data order and the
// membership of each outer step, never of a node id (engine/core/diloco/README.md, "Elastic data").
// Every member holds the same ledger and changes it only at points every member passes with
// the same round record: a plan when an outer step's inner steps start, a settlement when that
// step's average is applied. A joiner receives the ledger with its live recovery, a resumed run
// from its checkpoint. Not a data loader: positions, not samples (the worker maps them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/inner_worker.h"

namespace meridian {

// What settle() did with one outer step's plan.
struct DataSettlement {
  std::int64_t outer_step = 0;
  // Per node whose pseudo-gradient of the step was applied: the positions it trained.
  std::vector<std::pair<std::int64_t, std::vector<SampleRange>>> trained;
  // The positions of planned nodes that contributed nothing (lost, sat out): back to the pool.
  std::vector<SampleRange> returned;
};

// The ledger. Positions [0, next()) have been handed out; of them, returned() are owed again
// (their training was lost) and go first into the next plan, lowest first, so that nothing
// planned is lost and nothing is trained twice: a position is trained by exactly one node,
// once, unless its node's contribution was lost, and then it is handed out again.
class DataLedger {
 public:
  DataLedger() = default;
  // `per_node`: the positions one node trains per outer step (samples per inner step x H), > 0.
  explicit DataLedger(std::int64_t per_node);

  // Plans outer step `step` for `members` (every member of the round, in the round record's
  // order): each gets per_node() positions, the owed ones first, then fresh ones from next().
  // A step planned already keeps its plan and adds the members it lacks, in the same way (a
  // resumed overlapped run: the checkpoint holds the plan of the step whose inner steps ran
  // before it, and a node without that step's pseudo-gradient trains its positions again).
  void plan(std::int64_t step, const std::vector<std::int64_t>& members);
  // `node`'s positions in planned step `step`, in the order it reads them (empty: none).
  std::vector<SampleRange> assigned(std::int64_t step, std::int64_t node) const;
  // Settles planned step `step`: the planned nodes in `credited` trained their positions; every
  // other planned node's are owed again. A step not planned settles to nothing.
  DataSettlement settle(std::int64_t step, const std::vector<std::int64_t>& credited);

  std::int64_t per_node() const { return per_node_; }
  std::int64_t next() const { return next_; }
  const std::vector<SampleRange>& returned() const { return returned_; }
  // Planned, unsettled steps: step -> (node, its ranges), in plan order.
  using Plan = std::vector<std::pair<std::int64_t, std::vector<SampleRange>>>;
  const std::map<std::int64_t, Plan>& planned() const { return planned_; }

  // A line-oriented text ("data-ledger 1" ...) that decode() reads back exactly.
  std::string encode() const;
  // Throws ProtocolError naming what is wrong: a bad line, a negative or empty range, ranges
  // that overlap or lie past next, a node's plan that is not per_node positions.
  static DataLedger decode(std::string_view text);

  bool operator==(const DataLedger&) const = default;

 private:
  void give_back(const std::vector<SampleRange>& ranges);
  std::vector<SampleRange> take(std::int64_t count);

  std::int64_t per_node_ = 0;
  std::int64_t next_ = 0;
  std::vector<SampleRange> returned_;  // sorted, disjoint, not adjacent
  std::map<std::int64_t, Plan> planned_;
};

// Flattens ranges as [begin0, end0, begin1, end1, ...] (events).
std::vector<std::int64_t> flatten(const std::vector<SampleRange>& ranges);

}  // namespace meridian
