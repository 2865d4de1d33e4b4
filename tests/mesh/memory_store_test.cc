// MemoryStore: the Store contract (tests/store/store_conformance.h), and the LeaseTable and
// ChangeLog behind its leases and watches.
#include "engine/backends/inproc/memory_store.h"

#include <gtest/gtest.h>

#include <limits>

#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"
#include "engine/core/store/lease_table.h"
#include "tests/store/store_conformance.h"

namespace meridian {
namespace {

using testing::StoreBackend;
using testing::StoreConformance;

// The Store seam's default read_prefix (list, then reads) gives the backend's answer.
TEST(MemoryStore, TheSeamsDefaultReadPrefixAgreesWithTheBackends) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  store.set("hb/2", "7");
  store.set("hb/10", "3");
  store.set("hc/1", "x");
  EXPECT_EQ(store.Store::read_prefix("hb/"), store.read_prefix("hb/"));
  EXPECT_EQ(store.read_prefix("hb/").size(), 2u);
}

TEST(MemoryStore, AddOnANonIntegerIsAProtocolError) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  store.set("s", "abc");
  EXPECT_THROW(store.add("s", 1), ProtocolError);
}

// The Store contract (tests/store/store_conformance.h) on the in-memory store.
INSTANTIATE_TEST_SUITE_P(Memory, StoreConformance,
                         ::testing::Values(StoreBackend{"memory",
                                                        [] {
                                                          auto rt =
                                                              std::make_shared<ThreadRuntime>();
                                                          return std::shared_ptr<Store>(
                                                              new MemoryStore(*rt),
                                                              [rt](Store* s) { delete s; });
                                                        },
                                                        {}}));

}  // namespace
}  // namespace meridian

namespace meridian {
namespace {

// The bookkeeping every table-keeping store shares, on a clock the test passes.
TEST(LeaseTable, LeasesEndAfterTheirTtlUnlessKeptAliveAndGiveBackTheirKeys) {
  LeaseTable t;
  const std::int64_t a = t.grant(6.0, 100.0), b = t.grant(6.0, 100.0);
  EXPECT_NE(a, b);
  t.attach(a, "hb/1");
  t.attach(a, "leader");
  t.attach(b, "hb/2");
  EXPECT_DOUBLE_EQ(t.next_deadline_s(), 106.0);
  EXPECT_TRUE(t.keepalive(a, 104.0));  // a now ends at 110
  EXPECT_EQ(t.expire(105.9), std::vector<std::string>{});
  EXPECT_EQ(t.expire(106.0), std::vector<std::string>{"hb/2"});
  EXPECT_FALSE(t.alive(b));
  EXPECT_FALSE(t.keepalive(b, 106.0));
  t.detach("leader");  // written by a plain call: no longer the lease's
  EXPECT_EQ(t.revoke(a), std::vector<std::string>{"hb/1"});
  EXPECT_EQ(t.revoke(a), std::vector<std::string>{});
  EXPECT_EQ(t.next_deadline_s(), std::numeric_limits<double>::infinity());
  // A store that accounts for keepalives itself: no deadline until it sets one.
  const std::int64_t c = t.grant(6.0, 0.0);
  EXPECT_TRUE(t.set_deadline(c, std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(t.expire(1e9).empty());
  EXPECT_TRUE(t.set_deadline(c, 50.0));
  t.attach(c, "hb/3");
  EXPECT_EQ(t.expire(50.0), std::vector<std::string>{"hb/3"});
}

TEST(ChangeLog, ChangesUnderPrefixesAfterARevision) {
  ChangeLog log;
  EXPECT_FALSE(log.changed_since({""}, 0));
  const std::uint64_t r1 = log.record("mesh/hb/1");
  log.record("mesh/report/7/1");
  EXPECT_TRUE(log.changed_since({"mesh/report/"}, r1));
  EXPECT_FALSE(log.changed_since({"mesh/hb/"}, r1));
  EXPECT_TRUE(log.changed_since({"mesh/hb/"}, r1 - 1));
  EXPECT_FALSE(log.changed_since({}, 0));
  // Further behind than the log reaches: "changed" (the watcher re-reads; never a missed change).
  for (std::size_t i = 0; i < ChangeLog::kKept + 1; ++i) log.record("x");
  EXPECT_TRUE(log.changed_since({"mesh/hb/"}, r1));
  EXPECT_FALSE(log.changed_since({"mesh/hb/"}, log.revision() - 1));
}

}  // namespace
}  // namespace meridian
