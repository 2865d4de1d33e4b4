// The store's size over a long run: what the mesh writes per round, per join, per leave and per
// transport epoch is erased once no node can need it (engine/core/mesh/PROTOCOL.md, "Store size"),
// so the key count stays under a bound that does not grow with the number of rounds; and the
// epoch-key rule behind the transports' part of it.
#include "tests/mesh/store_size.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "engine/core/transport.h"
#include "engine/core/util/epoch_keys.h"

namespace meridian::testing {
namespace {

// 150 outer steps with churn all along (run_with_churn). Before the collection rule every
// deathrattle (left/) stayed for good (13 of them by step 140, one more per leave), and so did
// the queue entry (join/) of a joiner that crashed where no round could admit it any more.
TEST(StoreSize, MeshKeysStayBoundedOverManyRoundsWithChurn) {
  ClusterOptions o;
  o.outer_steps = 150;
  o.inner_steps = 1;
  run_with_churn(o);
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
