// RoundRecord encoding and the mesh's option checks and defaults.
#include "engine/mesh/round_record.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/events/event_sink.h"
#include "engine/mesh/elastic_mesh.h"
#include "engine/runtime/thread_runtime.h"
#include "engine/store/memory_store.h"

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
  EXPECT_THROW(RoundRecord::decode(text.replace(text.find("prev=0"), 6, "prev=9")),
               ProtocolError);
}

TEST(ElasticMesh, DefaultsAndOptionChecks) {
  const MeshOptions d;
  EXPECT_EQ(d.heartbeat_interval_s, 2.0);
  EXPECT_EQ(d.dead_after_s, 6.0);
  EXPECT_EQ(d.max_retries, 3);
  ThreadRuntime rt;
  MemoryStore store(rt);
  NullEventSink sink;
  MeshOptions bad;
  bad.dead_after_s = 1.0;
  EXPECT_THROW(ElasticMesh(store, rt, sink, bad), ConfigError);
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

}  // namespace
}  // namespace meridian
