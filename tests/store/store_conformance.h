// The Store contract (engine/core/store.h), one suite for every backend: each test binary that
// includes this header instantiates StoreConformance with its backends, e.g.
//   INSTANTIATE_TEST_SUITE_P(Memory, StoreConformance, ::testing::Values(StoreBackend{...}));
// Every operation, waits woken by another caller's write, timeouts that name the key, atomic
// adds, compare-and-set, sorted listing, leases that end and wake watchers, revokes, and
// watches that see only their prefixes. Each test gets a fresh, empty store.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/store.h"

namespace meridian::testing {

struct StoreBackend {
  std::string name;
  // A fresh store with no keys (it may share a server with other tests' stores).
  std::function<std::shared_ptr<Store>()> make;
  // Why the backend cannot run here ("" or empty function: it can); the test is skipped.
  std::function<std::string()> unavailable;
};

inline void PrintTo(const StoreBackend& b, std::ostream* os) { *os << b.name; }

class StoreConformance : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override {
    if (GetParam().unavailable)
      if (const std::string why = GetParam().unavailable(); !why.empty()) GTEST_SKIP() << why;
    store_ = GetParam().make();
    ASSERT_NE(store_, nullptr);
  }
  Store& s() { return *store_; }

  std::shared_ptr<Store> store_;
};

TEST_P(StoreConformance, EveryOperation) {
  s().set("a/1", "one");
  s().set("a/2", std::string("t\0o", 3));
  s().set("b", "");
  EXPECT_EQ(s().get("a/1", 5.0), "one");
  EXPECT_EQ(s().get("a/2", 5.0), std::string("t\0o", 3));
  EXPECT_EQ(s().try_get("b"), std::optional<std::string>(""));
  EXPECT_EQ(s().try_get("absent"), std::nullopt);
  s().wait({"a/1", "a/2", "b"}, 5.0);

  EXPECT_EQ(s().add("n", 5), 5);
  EXPECT_EQ(s().add("n", -7), -2);
  EXPECT_EQ(s().get("n", 1.0), "-2");

  EXPECT_EQ(s().compare_set("c", std::nullopt, "first"), std::optional<std::string>("first"));
  EXPECT_EQ(s().compare_set("c", std::nullopt, "second"), std::optional<std::string>("first"));
  EXPECT_EQ(s().compare_set("c", std::string("wrong"), "third"),
            std::optional<std::string>("first"));
  EXPECT_EQ(s().compare_set("c", std::string("first"), "fourth"),
            std::optional<std::string>("fourth"));
  EXPECT_EQ(s().compare_set("absent", std::string("x"), "y"), std::nullopt);
  EXPECT_EQ(s().try_get("absent"), std::nullopt);

  EXPECT_EQ(s().list("a/"), (std::vector<std::string>{"a/1", "a/2"}));
  EXPECT_EQ(s().list(""), (std::vector<std::string>{"a/1", "a/2", "b", "c", "n"}));
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(s().read_prefix("a/"), (KV{{"a/1", "one"}, {"a/2", std::string("t\0o", 3)}}));
  EXPECT_EQ(s().read_prefix("zz"), KV{});
  EXPECT_TRUE(s().erase("a/1"));
  EXPECT_FALSE(s().erase("a/1"));
  EXPECT_EQ(s().list("a/"), (std::vector<std::string>{"a/2"}));
}

TEST_P(StoreConformance, ListAndReadPrefixAreSortedBytewiseAndKeepToThePrefix) {
  for (const char* k : {"hb/2", "hb/10", "hb/1", "hc/1", "h", "join/1"}) s().set(k, k);
  EXPECT_EQ(s().list("hb/"), (std::vector<std::string>{"hb/1", "hb/10", "hb/2"}));
  EXPECT_EQ(s().list("zz"), std::vector<std::string>{});
  EXPECT_EQ(s().list("").size(), 6u);
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(s().read_prefix("hb/"), (KV{{"hb/1", "hb/1"}, {"hb/10", "hb/10"}, {"hb/2", "hb/2"}}));
}

TEST_P(StoreConformance, AddOnANonIntegerIsAnErrorAndChangesNothing) {
  s().set("text", "hello");
  EXPECT_THROW(s().add("text", 1), Error);
  EXPECT_EQ(s().get("text", 1.0), "hello");
  EXPECT_EQ(s().add("n", 0), 0);  // absent counts as 0
}

TEST_P(StoreConformance, ConcurrentAddsAreAtomic) {
  std::vector<std::thread> adders;
  for (int w = 0; w < 4; ++w)
    adders.emplace_back([&] {
      for (int i = 0; i < 50; ++i) s().add("n", 1);
    });
  for (auto& t : adders) t.join();
  EXPECT_EQ(s().add("n", 0), 200);
}

TEST_P(StoreConformance, GetAndWaitWakeOnAnotherCallersWrite) {
  std::string seen;
  std::thread waiter([&] { seen = s().get("late", 30.0); });
  s().set("late", "value");
  waiter.join();
  EXPECT_EQ(seen, "value");
  std::thread many([&] { s().wait({"k1", "k2"}, 30.0); });
  s().set("k1", "x");
  s().add("k2", 1);
  many.join();
  EXPECT_EQ(s().get("k2", 1.0), "1");
}

TEST_P(StoreConformance, WaitsRunOutWithTimeoutErrorNamingTheKey) {
  try {
    s().get("missing/key", 0.05);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/key"), std::string::npos) << e.what();
  }
  s().set("one", "1");
  EXPECT_THROW(s().wait({"one", "never"}, 0.05), TimeoutError);
  EXPECT_EQ(s().get("one", 1.0), "1");  // the store still serves after a timeout
}

// Leases end on the store's clock even when nobody calls, erasing their keys, which wakes a
// watcher of them; a watch of other prefixes sleeps through it.
TEST_P(StoreConformance, LeasesEndAndWakeWatchers) {
  const std::int64_t short_lived = s().lease_grant(0.1);
  const std::int64_t long_lived = s().lease_grant(3600.0);
  EXPECT_GT(short_lived, 0);
  EXPECT_EQ(s().compare_set_leased("hb/1", std::nullopt, "1", short_lived), "1");
  EXPECT_EQ(s().compare_set_leased("leader", std::nullopt, "2", long_lived), "2");
  EXPECT_EQ(s().compare_set_leased("leader", std::nullopt, "3", short_lived), "2");  // taken
  EXPECT_EQ(s().keepalive(short_lived, 0.05), 0.05);  // a store that must see every keepalive
  const std::uint64_t r0 = s().revision();
  EXPECT_EQ(s().watch({"zz/"}, r0, 0.01), r0);  // nothing under it: returns at its timeout
  const std::uint64_t r1 = s().watch({"hb/"}, r0, 30.0);
  EXPECT_EQ(r1, r0 + 1);
  EXPECT_EQ(s().try_get("hb/1"), std::nullopt);
  EXPECT_LT(s().keepalive(short_lived, 0.05), 0.0);
  // An ended lease attaches nothing.
  EXPECT_EQ(s().compare_set_leased("hb/1", std::nullopt, "1", short_lived), std::nullopt);
  EXPECT_EQ(s().try_get("hb/1"), std::nullopt);
  EXPECT_TRUE(s().lease_revoke(long_lived));
  EXPECT_EQ(s().watch({"leader"}, r1, 10.0), r1 + 1);
  EXPECT_EQ(s().try_get("leader"), std::nullopt);
  EXPECT_FALSE(s().lease_revoke(long_lived));   // an ended lease is ignored: says so
  EXPECT_FALSE(s().lease_revoke(short_lived));  // one that ran out too
}

TEST_P(StoreConformance, RevokeErasesAtOnceAndWatchesSeeOnlyTheirPrefixes) {
  const std::int64_t lease = s().lease_grant(3600.0);
  s().compare_set_leased("leader", std::nullopt, "4", lease);
  const std::uint64_t r0 = s().revision();
  s().set("other", "x");
  EXPECT_EQ(s().watch({"leader"}, r0, 0.01), r0 + 1);  // times out: not its prefix
  std::thread revoker([&] { s().lease_revoke(lease); });
  s().watch({"leader"}, r0 + 1, 10.0);
  revoker.join();
  EXPECT_EQ(s().try_get("leader"), std::nullopt);
  EXPECT_EQ(s().revision(), r0 + 2);
}

}  // namespace meridian::testing
