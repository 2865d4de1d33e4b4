// Elastic data (engine/core/diloco/data_plan.h): which positions of the run's data order each node
// trains is a function of the order and of each outer step's membership. The ledger's rules
// alone, then whole clusters with kills, joiners, overlapped and streaming outer steps and a
// resume: every position handed out is trained exactly once or still owed, each node read
// exactly what it was credited with, and every member holds the same ledger.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/core/diloco/data_plan.h"
#include "engine/core/error.h"
#include "tests/mesh/cluster_harness.h"
#include "tests/mesh/data_records.h"

namespace meridian::testing {
namespace {

using Ranges = std::vector<SampleRange>;

TEST(DataLedgerTest, PlansConsecutivePositionsInMemberOrder) {
  DataLedger d(4);
  d.plan(0, {3, 1, 2});
  EXPECT_EQ(d.assigned(0, 3), (Ranges{{0, 4}}));
  EXPECT_EQ(d.assigned(0, 1), (Ranges{{4, 8}}));
  EXPECT_EQ(d.assigned(0, 2), (Ranges{{8, 12}}));
  EXPECT_EQ(d.assigned(0, 7), Ranges{});
  EXPECT_EQ(d.assigned(1, 3), Ranges{});
  EXPECT_EQ(d.next(), 12);
}

TEST(DataLedgerTest, ALostNodesPositionsGoFirstIntoTheNextPlan) {
  DataLedger d(4);
  d.plan(0, {1, 2, 3});
  const DataSettlement s = d.settle(0, {1, 3});  // node 2 was lost
  ASSERT_EQ(s.trained.size(), 2u);
  EXPECT_EQ(s.trained[0], (std::pair<std::int64_t, Ranges>{1, {{0, 4}}}));
  EXPECT_EQ(s.trained[1], (std::pair<std::int64_t, Ranges>{3, {{8, 12}}}));
  EXPECT_EQ(s.returned, (Ranges{{4, 8}}));
  EXPECT_EQ(d.returned(), (Ranges{{4, 8}}));
  d.plan(1, {1, 3, 4});  // node 4 replaced node 2
  EXPECT_EQ(d.assigned(1, 1), (Ranges{{4, 8}}));
  EXPECT_EQ(d.assigned(1, 3), (Ranges{{12, 16}}));
  EXPECT_EQ(d.assigned(1, 4), (Ranges{{16, 20}}));
  EXPECT_TRUE(d.returned().empty());
}

TEST(DataLedgerTest, OwedPositionsAreSplitAcrossNodesLowestFirstAndMerged) {
  DataLedger d(3);
  d.plan(0, {1, 2, 3, 4});
  d.settle(0, {1, 3});  // [3, 6) and [9, 12) owed
  EXPECT_EQ(d.returned(), (Ranges{{3, 6}, {9, 12}}));
  d.plan(1, {1, 3});
  EXPECT_EQ(d.assigned(1, 1), (Ranges{{3, 6}}));
  EXPECT_EQ(d.assigned(1, 3), (Ranges{{9, 12}}));
  d.settle(1, {});  // both lost again: owed again, lowest first
  d.plan(2, {5, 6});
  EXPECT_EQ(d.assigned(2, 5), (Ranges{{3, 6}}));
  EXPECT_EQ(d.assigned(2, 6), (Ranges{{9, 12}}));
  DataLedger e(2);
  e.plan(0, {1, 2, 3});
  e.settle(0, {2});  // [0, 2) and [4, 6) owed
  e.plan(1, {1});    // takes [0, 2): the rest stays owed
  e.settle(1, {});
  EXPECT_EQ(e.returned(), (Ranges{{0, 2}, {4, 6}}));
  e.plan(2, {9});
  e.plan(2, {9, 8});  // planned already: keeps 9's and adds 8
  EXPECT_EQ(e.assigned(2, 9), (Ranges{{0, 2}}));
  EXPECT_EQ(e.assigned(2, 8), (Ranges{{4, 6}}));
  EXPECT_EQ(e.settle(7, {1}).trained.size(), 0u);  // a step not planned settles to nothing
}

TEST(DataLedgerTest, EncodeDecodeRoundTripsAndRejectsBadText) {
  DataLedger d(4);
  d.plan(0, {1, 2, 3});
  d.settle(0, {1, 3});
  d.plan(1, {1, 3, 4});  // planned, not settled (an overlapped run's checkpoint holds this)
  d.settle(1, {3});
  d.plan(2, {3, 5});
  const std::string text = d.encode();
  EXPECT_EQ(DataLedger::decode(text), d);
  EXPECT_EQ(DataLedger::decode(text).encode(), text);
  const auto error = [](const std::string& t) {
    try {
      DataLedger::decode(t);
      return std::string("accepted");
    } catch (const ProtocolError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(error(text.substr(0, text.size() - 1)).find("truncated"), std::string::npos);
  EXPECT_NE(error("data-ledger 2\n").find("expected 'data-ledger 1'"), std::string::npos);
  const std::string head = "data-ledger 1\nper_node 4\nnext 16\n";
  EXPECT_EQ(error(head + "returned\n"), "accepted");
  EXPECT_NE(error(head + "returned 4 8 6 10\n").find("overlap"), std::string::npos);
  EXPECT_NE(error(head + "returned 8 4\n").find("empty or reversed"), std::string::npos);
  EXPECT_NE(error(head + "returned 12 20\n").find("past next 16"), std::string::npos);
  EXPECT_NE(error(head + "returned 4\n").find("without its end"), std::string::npos);
  EXPECT_NE(error(head + "returned -4 0\n").find("non-negative"), std::string::npos);
  EXPECT_NE(error(head + "returned 4 x\n").find("non-negative"), std::string::npos);
  EXPECT_NE(error(head + "returned\nplanned 1 2 0 3\n").find("3 positions planned"),
            std::string::npos);
  EXPECT_NE(error(head + "returned\nplanned 1 2 0 4\nplanned 1 2 4 8\n").find("planned twice"),
            std::string::npos);
  EXPECT_NE(error(head + "returned 0 4\nplanned 1 2 0 4\n").find("overlap"), std::string::npos);
  EXPECT_NE(error(head + "returned\nbogus 1\n").find("expected 'planned'"), std::string::npos);
  EXPECT_NE(error("data-ledger 1\nper_node 0\nnext 0\nreturned\n").find("per_node"),
            std::string::npos);
}

// The `data` records of a cluster's run (tests/mesh/data_records.h: every node that recorded a
// step settled it the same way).
DataRecords data_record(Cluster& c) {
  DataRecords d;
  for (std::int64_t id : c.ids())
    for (const Event& e : c.events(id))
      add_data_record(d, nlohmann::json::parse(e.to_json()), "node " + std::to_string(id));
  return d;
}

std::int64_t next_of(const DataRecords& d) {
  return d.empty() ? 0 : d.rbegin()->second.at("next").get<std::int64_t>();
}

// Every position in [0, next) was trained exactly once (nothing owed at the end), and each node
// that was not killed read exactly the positions it was credited with, in order.
void expect_every_position_once(Cluster& c, const DataRecords& d) {
  expect_every_position_trained_once(d);
  const auto credited = credited_positions(d);
  for (std::int64_t id : c.ids()) {
    if (c.killed(id)) continue;
    const auto it = credited.find(id);
    const std::vector<std::int64_t> none;
    EXPECT_EQ(c.worker(id).positions_read(), it == credited.end() ? none : it->second)
        << "node " << id;
  }
}

ClusterOptions data_options() {
  ClusterOptions o;
  o.initial = 4;
  o.outer_steps = 6;
  o.inner_steps = 3;
  o.on_launch = [](std::int64_t, SyntheticWorker& w) { w.set_samples_per_step(2); };
  return o;
}

TEST(ElasticDataTest, AChurnFreeRunTrainsConsecutivePositionsByRingOrder) {
  Cluster c(data_options());
  c.run_and_check();
  const DataRecords d = data_record(c);
  EXPECT_EQ(next_of(d), 4 * 6 * 3 * 2);
  expect_every_position_once(c, d);
  // Step 0 in the round's member order: 6 positions each.
  const auto members = c.steps().at(0).at(1).members;
  std::vector<std::int64_t> want;
  for (std::size_t k = 0; k < members.size(); ++k)
    want.insert(want.end(), {members[k], static_cast<std::int64_t>(6 * k),
                             static_cast<std::int64_t>(6 * k + 6)});
  EXPECT_EQ(d.at(0).at("trained").get<std::vector<std::int64_t>>(), want);
}

// A node killed in step 2's collective trained positions that no average holds: they are owed
// at once and the next plan hands them out first; a joiner takes its place in the plan.
void expect_churn_keeps_every_position_once(ClusterOptions o) {
  Cluster c(o);
  c.at_step(1, [&c] { c.on_send(4, 2, false, [&c] { c.kill(4); }); });
  c.join_at(2);  // admitted by step 4: an overlapped joiner's first inner steps are step 5's
  c.run_and_check();
  EXPECT_FALSE(c.all_of_type("retry").empty());
  const DataRecords d = data_record(c);
  expect_every_position_once(c, d);
  const auto credited = credited_positions(d);
  // Node 4 read its step-2 positions, which are credited to another node at step 3.
  const auto read4 = c.worker(4).positions_read();
  ASSERT_FALSE(read4.empty());
  const auto credited4 = credited.count(4) ? credited.at(4) : std::vector<std::int64_t>{};
  EXPECT_LT(credited4.size(), read4.size());
  const std::int64_t j = c.joiner_of(2);
  ASSERT_GT(j, 0);
  ASSERT_TRUE(credited.count(j));
  EXPECT_FALSE(credited.at(j).empty());
}

TEST(ElasticDataTest, AKilledNodesPositionsAreTrainedByOthersAndAJoinerGetsItsShare) {
  expect_churn_keeps_every_position_once(data_options());
}

TEST(ElasticDataTest, OverlappedRunsKeepEveryPositionOnceThroughAKillAndAJoiner) {
  for (Overlap ov : {Overlap::kDelayed, Overlap::kEager}) {
    SCOPED_TRACE(overlap_name(ov));
    ClusterOptions o = data_options();
    o.overlap = ov;
    expect_churn_keeps_every_position_once(o);
  }
}

TEST(ElasticDataTest, StreamingRunsKeepEveryPositionOnceThroughAKillAndAJoiner) {
  ClusterOptions o = data_options();
  o.inner_steps = 4;
  o.fragments = 2;
  o.fragment_delay = 1;
  o.fragment_alpha = 0.5f;
  expect_churn_keeps_every_position_once(o);
}

// A run resumed at step 3 from the ledger a checkpoint holds trains, node by node, exactly what
// the whole run trained from step 3 on (blocking, and overlapped with the pending pseudo-gradient:
// the ledger then holds step 3's plan, whose inner steps ran before the checkpoint).
TEST(ElasticDataTest, AResumedRunTrainsWhatTheWholeRunTrained) {
  for (bool pending : {false, true}) {
    SCOPED_TRACE(pending ? "overlapped" : "blocking");
    ClusterOptions o = data_options();
    if (pending) o.overlap = Overlap::kDelayed;
    Cluster whole(o);
    whole.run_and_check();
    const auto ref = whole.steps();
    const DataRecords all = data_record(whole);
    constexpr std::int64_t kDone = 3;
    ClusterOptions r = o;
    resume_from(r, ref, kDone, (kDone + (pending ? 1 : 0)) * o.inner_steps, pending);
    const auto restore = r.on_launch;
    r.on_launch = [restore](std::int64_t id, SyntheticWorker& w) {
      restore(id, w);
      w.set_samples_per_step(2);
    };
    const std::string ledger = ref.at(kDone - 1).at(1).data_ledger;
    ASSERT_FALSE(ledger.empty());
    r.configure = [ledger](DilocoOptions& d) { d.initial_data_ledger = ledger; };
    Cluster resumed(r);
    resumed.run_and_check();
    const DataRecords second = data_record(resumed);
    for (std::int64_t t = kDone; t < o.outer_steps; ++t)
      EXPECT_EQ(second.at(t), all.at(t)) << "step " << t;  // trained, returned, next, owed
    EXPECT_EQ(next_of(second), next_of(all));
    // A ledger planned for another per-node count is refused, naming both.
    ClusterOptions bad = r;
    bad.on_launch = [restore](std::int64_t id, SyntheticWorker& w) {
      restore(id, w);
      w.set_samples_per_step(3);
    };
    EXPECT_NE(node_config_error(bad).find("plans 6 samples per node and outer step, this run 9"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace meridian::testing
