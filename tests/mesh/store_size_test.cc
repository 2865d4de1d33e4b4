// The store's size over a long run: what the mesh writes per round, per join, per leave and per
// transport epoch is erased once no node can need it (engine/mesh/PROTOCOL.md, "Store size"),
// so the key count stays under a bound that does not grow with the number of rounds. Not a test
// of the values: the fault matrix and the DiLoCo tests check those.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "engine/transport.h"
#include "engine/util/epoch_keys.h"
#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

// Keys by kind ("round", "report", "left", ...): the first path element after "mesh/".
std::map<std::string, std::size_t> keys_by_kind(Store& store) {
  std::map<std::string, std::size_t> out;
  for (const std::string& key : store.list("mesh/")) {
    const std::string rest = key.substr(5);
    ++out[rest.substr(0, rest.find('/'))];
  }
  return out;
}

std::size_t total(const std::map<std::string, std::size_t>& kinds, bool with_claims) {
  std::size_t n = 0;
  for (const auto& [kind, count] : kinds)
    if (with_claims || kind != "id") n += count;
  return n;
}

std::string describe(const std::map<std::string, std::size_t>& kinds) {
  std::string s;
  for (const auto& [kind, count] : kinds) s += kind + "=" + std::to_string(count) + " ";
  return s;
}

// 150 outer steps with churn all along: every 10 steps a node leaves gracefully and two joiners
// arrive, one of which crashes at once. Before the collection rule every deathrattle (left/)
// stayed for good (13 of them by step 140, one more per leave), and so did the queue entry
// (join/) of a joiner that crashed where no round could admit it any more (here: after the
// run's final record).
TEST(StoreSize, MeshKeysStayBoundedOverManyRoundsWithChurn) {
  ClusterOptions o;
  o.initial = 3;
  o.outer_steps = 150;
  o.inner_steps = 1;
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
      seen[step] = keys_by_kind(c.store());
    });
  }
  c.at_step(o.outer_steps - 1, [&] { c.kill(c.add_joiner()); });  // never admitted: the end
  c.start();
  c.join();
  c.check_invariants();
  // Every node has stopped or crashed: their leases end, and the queue entries with them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!c.store().list("mesh/join/").empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polls, with a deadline
  EXPECT_EQ(c.store().list("mesh/join/"), std::vector<std::string>{});
  ASSERT_GE(seen.size(), 13u);
  // Per live node (at most 5: 3 members, a joiner, a leaver): hb/, join/, one report and one
  // ready key per kept round (3); plus 3 records, left/ of the leavers still in a record (2),
  // and claims, next_id, leader, latest. The id/ claims (one per node started, what keeps ids
  // unique for the whole run) are counted apart.
  constexpr std::size_t kBound = 5 * (2 + 2 * 3) + 3 + 2 + 4;
  for (const auto& [step, kinds] : seen) {
    EXPECT_LE(total(kinds, false), kBound) << "step " << step << ": " << describe(kinds);
    EXPECT_LE(kinds.count("left") ? kinds.at("left") : 0, 2u)
        << "step " << step << ": " << describe(kinds);
    EXPECT_LE(kinds.count("join") ? kinds.at("join") : 0, 2u)
        << "step " << step << ": " << describe(kinds);
    EXPECT_LE(kinds.count("round") ? kinds.at("round") : 0, 3u)
        << "step " << step << ": " << describe(kinds);
  }
  std::printf("mesh keys (claims apart) at step 10: %zu, at step %lld: %zu\n",
              total(seen.begin()->second, false), static_cast<long long>(seen.rbegin()->first),
              total(seen.rbegin()->second, false));
}

TEST(EpochKeys, ParsesWhatEpochStorePrefixMakes) {
  EpochSpec spec;
  spec.epoch = ring_epoch_id(17, 3);
  spec.members = {4, 9};
  const std::string prefix = epoch_store_prefix("gloo", spec);
  for (const std::string& key : {prefix, prefix + "0", prefix + "rank_1"}) {
    const auto parsed = parse_epoch_store_key(key);
    ASSERT_TRUE(parsed) << key;
    EXPECT_EQ(parsed->base, "gloo");
    EXPECT_EQ(parsed->epoch, ring_epoch_id(17, 3));
  }
  spec.epoch = recovery_epoch_id(5, 1, 2);
  EXPECT_EQ(parse_epoch_store_key(epoch_store_prefix("a/b", spec) + "1")->epoch, spec.epoch);
  for (const char* bad : {"", "gloo", "gloo/e5", "gloo/e5/0123456789abcdef", "gloo/e/0123456789abcdef/",
                          "gloo/ex/0123456789abcdef/", "gloo/e5/0123456789ABCDEF/",
                          "gloo/e5/0123456789abcde/", "/e5/0123456789abcdef/",
                          "gloo/e99999999999999999999/0123456789abcdef/"})
    EXPECT_FALSE(parse_epoch_store_key(bad)) << bad;
}

TEST(EpochKeys, AnEpochSupersedesOnlyWhatNoNodeCanStillConnect) {
  // Ring epochs: a smaller membership epoch, any shard; never the same epoch's other shards.
  EXPECT_TRUE(epoch_superseded(ring_epoch_id(4, 0), ring_epoch_id(5, 0)));
  EXPECT_TRUE(epoch_superseded(ring_epoch_id(4, 7), ring_epoch_id(5, 0)));
  EXPECT_FALSE(epoch_superseded(ring_epoch_id(5, 1), ring_epoch_id(5, 0)));
  EXPECT_FALSE(epoch_superseded(ring_epoch_id(6, 0), ring_epoch_id(5, 3)));
  // Recoveries: three rounds or more before; rings and recoveries never supersede each other.
  EXPECT_TRUE(epoch_superseded(recovery_epoch_id(7, 3, 2), recovery_epoch_id(10, 0, 0)));
  EXPECT_FALSE(epoch_superseded(recovery_epoch_id(8, 0, 0), recovery_epoch_id(10, 0, 0)));
  EXPECT_FALSE(epoch_superseded(recovery_epoch_id(1, 0, 0), ring_epoch_id(100, 0)));
  EXPECT_FALSE(epoch_superseded(ring_epoch_id(1, 0), recovery_epoch_id(100, 0, 0)));
}

}  // namespace
}  // namespace meridian::testing
