// The process probe (engine/core/process_probe.h, PROTOCOL.md "A crashed process is refused at
// once"): the coordinator ends the lease of a member whose process answered and now refuses,
// never of one that only ever refused; the other nodes do the same to a coordinator; and
// SocketProcessProbe, the real one, over loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/backends/common/socket_process_probe.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/backends/faults/cuttable_store.h"
#include "engine/backends/inproc/memory_store.h"
#include "engine/backends/runtime_thread/thread_runtime.h"
#include "engine/core/error.h"
#include "engine/core/mesh/elastic_mesh.h"

namespace meridian {
namespace {

using Answer = ProcessProbe::Answer;

// The processes of a test, by address: what a probe of each gets (answered unless set).
class FakeProcesses {
 public:
  void set(const std::string& address, Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[address] = a;
  }
  Answer answer(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = answers_.find(address);
    return it == answers_.end() ? Answer::kAnswered : it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Answer> answers_;
};

class FakeProbe final : public ProcessProbe {
 public:
  FakeProbe(FakeProcesses& world, std::string address)
      : world_(world), address_(std::move(address)) {}
  std::string address() const override { return address_; }
  Answer probe(const std::string& address, double) override { return world_.answer(address); }

 private:
  FakeProcesses& world_;
  std::string address_;
};

// Two nodes of round 0 on one MemoryStore, each with a fake probe; the lease is far longer than
// any wait of these tests, so only the probe can end it.
struct TwoNodes {
  explicit TwoNodes(FakeProcesses& world)
      : store(rt), view1(store), view2(store), probe1(world, "p1"), probe2(world, "p2") {
    MeshOptions o;
    o.heartbeat_interval_s = 0.05;
    o.dead_after_s = 60.0;
    o.initial_world = 2;
    o.admission_timeout_s = 10.0;
    o.round_timeout_s = 10.0;
    o.probe = &probe1;
    a = std::make_unique<ElasticMesh>(view1, rt, sink, o);
    o.probe = &probe2;
    b = std::make_unique<ElasticMesh>(view2, rt, sink, o);
    a->start(true, 1);  // the first to start holds the coordinator role
    b->start(true, 2);
    round0 = a->wait_admitted();
    b->wait_admitted();
  }
  // Node 1 reports round 0 and waits ten probe intervals: node 2 keeps its lease and no process
  // is said gone; once node 2 reports, the next round has both.
  void expect_node_2_kept() {
    a->report(round0, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(store.try_get(a->key_heartbeat(2)));
    EXPECT_TRUE(sink.of_type("process_gone").empty());
    b->report(round0, true);
    EXPECT_EQ(a->next_round(round0).members, (std::vector<std::int64_t>{1, 2}));
  }
  ~TwoNodes() {
    b->stop();
    a->stop();
  }

  ThreadRuntime rt;
  MemoryStore store;
  // Each node's view of the store: cut, the node is a crashed process whose lease runs on.
  CuttableStore view1, view2;
  MemoryEventSink sink;
  FakeProbe probe1, probe2;
  std::unique_ptr<ElasticMesh> a, b;
  RoundRecord round0;
};

TEST(ProcessProbe, AMemberWhoseProcessAnsweredAndNowRefusesIsDeadAtOnce) {
  FakeProcesses world;
  TwoNodes n(world);
  ASSERT_EQ(n.round0.members, (std::vector<std::int64_t>{1, 2}));
  // Node 2's process is gone: its activities end, its lease runs on (only the probe can tell).
  // (Left running, its heartbeat would take a new lease at once, as a live node declared dead
  // does, and could be seen alive again before the coordinator looked: a flaky test.)
  n.view2.cut();
  world.set("p2", Answer::kRefused);
  n.a->report(n.round0, true);
  const RoundRecord next = n.a->next_round(n.round0);  // TimeoutError after 10 s without the probe
  EXPECT_EQ(next.members, std::vector<std::int64_t>{1});
  EXPECT_EQ(next.removed, std::vector<std::int64_t>{2});
  const auto gone = n.sink.of_type("process_gone");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_NE(gone[0].fields.str().find("\"node_gone\":2"), std::string::npos)
      << gone[0].fields.str();
  EXPECT_NE(gone[0].fields.str().find("\"address\":\"p2\""), std::string::npos);
  EXPECT_TRUE(n.sink.of_type("silent").empty()) << "node 2 was not silent for its lease";
}

// An address that never answered (a firewall that rejects, a wrong --host) proves nothing: the
// node's lease decides, and a node that reports is kept.
TEST(ProcessProbe, ARefusalWhereTheProcessNeverAnsweredChangesNothing) {
  FakeProcesses world;
  world.set("p2", Answer::kRefused);
  TwoNodes n(world);
  ASSERT_EQ(n.round0.members, (std::vector<std::int64_t>{1, 2}));
  n.expect_node_2_kept();
}

// A member whose process answered and now does not answer at all (its host dropped off the
// network, a firewall that drops) may be alive behind a cut: only its lease can tell.
TEST(ProcessProbe, AMemberThatAnsweredAndNowIsSilentIsLeftToItsLease) {
  FakeProcesses world;
  TwoNodes n(world);
  ASSERT_EQ(n.round0.members, (std::vector<std::int64_t>{1, 2}));
  world.set("p2", Answer::kUnknown);
  n.expect_node_2_kept();
}

// The coordinator's own crash: the other nodes probe the holder of the role, and a refusal where
// it answered before ends its lease, so one of them takes the role at once instead of after the
// lease (60 s here), and no other node says so a second time.
TEST(ProcessProbe, ACoordinatorWhoseProcessAnsweredAndNowRefusesIsReplacedAtOnce) {
  FakeProcesses world;
  TwoNodes n(world);
  ASSERT_TRUE(n.a->is_leader());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // six probe intervals
  EXPECT_FALSE(n.b->is_leader()) << "node 1's process answers: it keeps the role";
  EXPECT_TRUE(n.sink.of_type("process_gone").empty());
  // Node 1 crashes: its activities end, its lease runs on, its address refuses.
  n.view1.cut();
  world.set("p1", Answer::kRefused);
  const auto start = std::chrono::steady_clock::now();
  while (!n.b->is_leader() && std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(n.b->is_leader()) << "node 2 did not take the role within 10 s";
  const auto gone = n.sink.of_type("process_gone");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_NE(gone[0].fields.str().find("\"node_gone\":1"), std::string::npos)
      << gone[0].fields.str();
  EXPECT_NE(gone[0].fields.str().find("\"address\":\"p1\""), std::string::npos);
}

TEST(SocketProcessProbe, AnswersWhileTheProcessListensAndRefusesOnceItIsGone) {
  SocketProcessProbe prober("127.0.0.1");
  auto other = std::make_unique<SocketProcessProbe>("127.0.0.1");
  const std::string address = other->address();
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  // More probes than the listening backlog holds: each is accepted and closed, none queues.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(prober.probe(address, 10.0), Answer::kAnswered) << i;
  other.reset();  // the listening socket closes, as when its process exits
  EXPECT_EQ(prober.probe(address, 5.0), Answer::kRefused);
  EXPECT_EQ(prober.probe("no port here", 1.0), Answer::kUnknown);
  EXPECT_EQ(prober.probe("127.0.0.1:http", 1.0), Answer::kUnknown);  // names are not looked up
  EXPECT_EQ(prober.probe("", 1.0), Answer::kUnknown);
  EXPECT_THROW(SocketProcessProbe("192.0.2.1"), ConfigError);  // not an address of this machine
}

// A host that drops the probe's SYN (a firewall that drops, a host gone from the network, here a
// listener whose accept queue is full: Linux then drops SYNs) proves nothing: the probe gives up
// at its timeout and answers kUnknown, never kRefused, so the lease decides.
TEST(SocketProcessProbe, AnAddressThatDropsItsSynsIsUnknownNotRefused) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 0), 0);  // room for one connection nobody accepts
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const int filler = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(filler, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  SocketProcessProbe prober("127.0.0.1");
  EXPECT_EQ(prober.probe(address, 0.5), Answer::kUnknown);
  ::close(filler);
  ::close(listener);
}

}  // namespace
}  // namespace meridian
