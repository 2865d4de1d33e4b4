// RoundRecord encoding, the mesh's option checks and defaults, and a joiner queued while the
// coordinator looked.
#include "engine/core/mesh/round_record.h"

#include <gtest/gtest.h>

#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/mesh/elastic_mesh.h"
#include "tests/mesh/cluster_harness.h"

namespace meridian {
namespace {

TEST(RoundRecord, RoundTrips) {
  RoundRecord r;
  r.round = 12;
  r.epoch = 3;
  r.outer_step = 40;
  r.attempt = 2;
  r.prev = RoundPrev::kRetry;
  r.members = {5, 1, 9};
  r.joiners = {9};
  r.sources = {5, 1};
  r.removed = {4};
  r.reason = "allreduce failed; a=b";
  const RoundRecord d = RoundRecord::decode(r.encode());
  EXPECT_EQ(d.round, 12u);
  EXPECT_EQ(d.epoch, 3u);
  EXPECT_EQ(d.outer_step, 40);
  EXPECT_EQ(d.attempt, 2);
  EXPECT_EQ(d.prev, RoundPrev::kRetry);
  EXPECT_EQ(d.members, r.members);
  EXPECT_EQ(d.joiners, r.joiners);
  EXPECT_EQ(d.sources, r.sources);
  EXPECT_EQ(d.removed, r.removed);
  EXPECT_EQ(d.reason, "allreduce failed, a:b");  // separators are escaped away
  EXPECT_EQ(d.rank_of(1), 1);
  EXPECT_EQ(d.rank_of(4), -1);
  EXPECT_TRUE(d.is_joiner(9));
}

TEST(RoundRecord, MalformedRecordsAreProtocolErrors) {
  EXPECT_THROW(RoundRecord::decode(""), ProtocolError);
  EXPECT_THROW(RoundRecord::decode("round=1"), ProtocolError);
  RoundRecord r;
  std::string text = r.encode();
  EXPECT_THROW(RoundRecord::decode(text.replace(text.find("epoch=0"), 7, "epoch=x")),
               ProtocolError);
  text = r.encode();
  EXPECT_THROW(RoundRecord::decode(text.replace(text.find("prev=0"), 6, "prev=9")), ProtocolError);
}

// The non-finite rule's counts (`nonfinite=ID:N,...`): round-tripped, absent when empty, and a
// malformed, zero or non-member entry is a ProtocolError naming the field or the node.
TEST(RoundRecord, NonFiniteCountsRoundTrip) {
  RoundRecord r;
  r.members = {5, 1, 9};
  EXPECT_EQ(r.encode().find("nonfinite"), std::string::npos);
  r.nonfinite_steps = {{1, 2}, {9, 1}};
  const RoundRecord d = RoundRecord::decode(r.encode());
  EXPECT_EQ(d.nonfinite_steps, r.nonfinite_steps);
  EXPECT_EQ(d.nonfinite_steps_of(1), 2);
  EXPECT_EQ(d.nonfinite_steps_of(9), 1);
  EXPECT_EQ(d.nonfinite_steps_of(5), 0);
  const std::string text = r.encode();
  const auto with = [&](const std::string& field) {
    std::string t = text;
    return t.replace(t.find("nonfinite=1:2,9:1"), 17, field);
  };
  const auto error_of = [](const std::string& t) {
    try {
      RoundRecord::decode(t);
    } catch (const ProtocolError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(with("nonfinite=4:1")).find("non-finite node 4 is not a member"),
            std::string::npos);
  EXPECT_NE(error_of(with("nonfinite=1:0")).find("'nonfinite'"), std::string::npos);
  EXPECT_NE(error_of(with("nonfinite=1")).find("'nonfinite': item '1' is not ID:STEPS"),
            std::string::npos);
  EXPECT_NE(error_of(with("nonfinite=1:x")).find("'nonfinite' is not an integer"),
            std::string::npos);
}

TEST(ElasticMesh, DefaultsAndOptionChecks) {
  const MeshOptions d;
  EXPECT_EQ(d.heartbeat_interval_s, 2.0);
  EXPECT_EQ(d.dead_after_s, 6.0);
  EXPECT_EQ(d.max_retries, 3);
  EXPECT_EQ(d.nonfinite_evict_after, 3);
  ThreadRuntime rt;
  MemoryStore store(rt);
  NullEventSink sink;
  MeshOptions bad;
  bad.dead_after_s = 1.0;
  EXPECT_THROW(ElasticMesh(store, rt, sink, bad), ConfigError);
  MeshOptions negative;
  negative.nonfinite_evict_after = -1;
  EXPECT_THROW(ElasticMesh(store, rt, sink, negative), ConfigError);
}

TEST(ElasticMesh, NodeIdsAreUniqueAndNeverReused) {
  ThreadRuntime rt;
  MemoryStore store(rt);
  NullEventSink sink;
  MeshOptions o;
  o.heartbeat_interval_s = 0.05;
  o.dead_after_s = 0.2;
  ElasticMesh a(store, rt, sink, o), b(store, rt, sink, o), c(store, rt, sink, o);
  EXPECT_EQ(a.start(true, 2), 2);
  const std::int64_t drawn = b.start(true);  // the counter skips the claimed id 2
  EXPECT_NE(drawn, 2);
  EXPECT_THROW(c.start(true, 2), ConfigError);
  a.stop();
  b.stop();
}

// A joiner registers its lease (hb/) and then queues (join/). Both can land between the
// coordinator's read of the live set and its read of the queue (a slow store widens the window:
// the etcd store hung here). The joiner is not dead: it is counted at the next look, and round 0
// forms with it.
TEST(ElasticMesh, AJoinerQueuedWhileTheCoordinatorLooksIsNotForgotten) {
  ThreadRuntime rt;
  MemoryStore shared(rt);
  testing::NodeStore store(shared);
  NullEventSink sink;
  MeshOptions o;
  o.heartbeat_interval_s = 0.05;
  o.dead_after_s = 0.5;
  o.initial_world = 2;
  o.admission_timeout_s = 5.0;
  ElasticMesh mesh(store, rt, sink, o);
  bool interleaved = false;
  store.before_list([&](const std::string& prefix) {
    if (interleaved || prefix != o.prefix + "join/") return;
    interleaved = true;  // node 2 arrives now: after the live set was read, before the queue
    const std::int64_t lease = shared.lease_grant(3600.0);
    shared.compare_set_leased(mesh.key_heartbeat(2), std::nullopt, "1", lease);
    shared.set(mesh.key_join(2), "2");
  });
  mesh.start(true, 1);
  const RoundRecord r = mesh.wait_admitted();
  EXPECT_TRUE(interleaved);
  EXPECT_EQ(r.round, 0u);
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{1, 2}));
  mesh.stop();
}

}  // namespace
}  // namespace meridian
