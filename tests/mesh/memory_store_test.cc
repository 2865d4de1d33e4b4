// MemoryStore: every operation, waits that end on a write from another activity, timeouts;
// leases and watches (and the LeaseTable and ChangeLog behind them).
#include "engine/store/memory_store.h"

#include <gtest/gtest.h>

#include <limits>

#include "engine/error.h"
#include "engine/runtime/thread_runtime.h"
#include "engine/store/lease_table.h"

namespace meridian {
namespace {

TEST(MemoryStore, SetGetTryGetErase) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  EXPECT_EQ(store.try_get("a"), std::nullopt);
  store.set("a", "1");
  EXPECT_EQ(store.get("a", 0.0), "1");
  EXPECT_EQ(store.try_get("a"), "1");
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.try_get("a"), std::nullopt);
}

TEST(MemoryStore, GetTimesOutNamingTheKey) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  try {
    store.get("missing/key", 0.01);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/key"), std::string::npos);
  }
  EXPECT_THROW(store.wait({"x", "y"}, 0.01), TimeoutError);
}

TEST(MemoryStore, GetAndWaitWakeOnAnotherActivitysWrite) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  auto writer = rt.spawn("writer", [&] {
    store.wait({"go"}, 10.0);
    store.set("x", "7");
    store.set("y", "8");
  });
  store.set("go", "");
  EXPECT_EQ(store.get("x", 10.0), "7");
  store.wait({"x", "y"}, 10.0);
  writer->join();
  EXPECT_EQ(store.try_get("y"), "8");
}

TEST(MemoryStore, AddCountsFromZeroAndRejectsNonIntegers) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  EXPECT_EQ(store.add("n", 1), 1);
  EXPECT_EQ(store.add("n", 5), 6);
  EXPECT_EQ(store.add("n", -6), 0);
  EXPECT_EQ(store.get("n", 0), "0");
  store.set("s", "abc");
  EXPECT_THROW(store.add("s", 1), ProtocolError);
}

TEST(MemoryStore, ConcurrentAddsAreAtomic) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  std::vector<std::unique_ptr<Activity>> workers;
  for (int w = 0; w < 4; ++w)
    workers.push_back(rt.spawn("adder", [&] {
      for (int i = 0; i < 500; ++i) store.add("n", 1);
    }));
  for (auto& w : workers) w->join();
  EXPECT_EQ(store.add("n", 0), 2000);
}

TEST(MemoryStore, CompareSetSucceedsOnlyOnTheExpectedValue) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  EXPECT_EQ(store.compare_set("k", std::nullopt, "a"), "a");      // absent -> created
  EXPECT_EQ(store.compare_set("k", std::nullopt, "b"), "a");      // exists: fails, returns current
  EXPECT_EQ(store.compare_set("k", std::string("x"), "b"), "a");  // wrong expectation
  EXPECT_EQ(store.compare_set("k", std::string("a"), "b"), "b");
  EXPECT_EQ(store.get("k", 0), "b");
  EXPECT_EQ(store.compare_set("absent", std::string("a"), "b"), std::nullopt);
  EXPECT_EQ(store.try_get("absent"), std::nullopt);
}

TEST(MemoryStore, ListReturnsSortedKeysWithThePrefixOnly) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  for (const char* k : {"hb/2", "hb/10", "hb/1", "hc/1", "h", "join/1"}) store.set(k, "");
  EXPECT_EQ(store.list("hb/"), (std::vector<std::string>{"hb/1", "hb/10", "hb/2"}));
  EXPECT_EQ(store.list("zz"), std::vector<std::string>{});
  EXPECT_EQ(store.list("").size(), 6u);
}

// The membership's one read per beat: every counter under a prefix, in key order, with values.
TEST(MemoryStore, ReadPrefixReturnsKeysAndValuesInOneCall) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  store.set("hb/2", "7");
  store.set("hb/10", "3");
  store.set("hc/1", "x");
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(store.read_prefix("hb/"), (KV{{"hb/10", "3"}, {"hb/2", "7"}}));
  EXPECT_EQ(store.read_prefix("zz"), KV{});
  // The Store seam's default (list, then reads) gives the same answer for a wrapper.
  EXPECT_EQ(store.Store::read_prefix("hb/"), store.read_prefix("hb/"));
}

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

TEST(MemoryStore, ALeaseThatIsNotKeptAliveEndsAndErasesItsKeysWakingAWatcher) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  const std::int64_t lease = store.lease_grant(0.05);
  EXPECT_EQ(store.compare_set_leased("hb/1", std::nullopt, "1", lease), "1");
  EXPECT_EQ(store.keepalive(lease, 0.01), 0.01);  // a store that must receive every keepalive
  const std::uint64_t before = store.revision();
  // Nobody else calls: the watcher itself wakes at the lease's end and sees the erase.
  const std::uint64_t after = store.watch({"hb/"}, before, 10.0);
  EXPECT_GT(after, before);
  EXPECT_EQ(store.try_get("hb/1"), std::nullopt);
  EXPECT_LT(store.keepalive(lease, 0.01), 0.0);
  // An ended lease attaches nothing.
  EXPECT_EQ(store.compare_set_leased("hb/1", std::nullopt, "1", lease), std::nullopt);
}

TEST(MemoryStore, RevokeErasesAtOnceAndWatchesSeeOnlyTheirPrefixes) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  const std::int64_t lease = store.lease_grant(3600.0);
  store.compare_set_leased("leader", std::nullopt, "4", lease);
  const std::uint64_t r0 = store.revision();
  store.set("other", "x");
  EXPECT_EQ(store.watch({"leader"}, r0, 0.01), r0 + 1);  // times out: not its prefix
  auto revoker = rt.spawn("revoker", [&] { store.lease_revoke(lease); });
  store.watch({"leader"}, r0 + 1, 10.0);
  revoker->join();
  EXPECT_EQ(store.try_get("leader"), std::nullopt);
  EXPECT_EQ(store.revision(), r0 + 2);
}

}  // namespace
}  // namespace meridian
