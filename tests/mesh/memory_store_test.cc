// MemoryStore: every operation, waits that end on a write from another activity, timeouts.
#include "engine/store/memory_store.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/runtime/thread_runtime.h"

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
