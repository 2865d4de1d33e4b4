// FaultPoint (engine/backends/faults/fault_point.h): the point's text and its errors, and where the
// trigger fires on a node's own sequence of calls — inner steps, epochs connected (retries),
// collective messages of each ring phase, recovery messages — with stub workers and transports.
#include "engine/backends/faults/fault_point.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

class StubWorker final : public InnerWorker {
 public:
  InnerStepsResult run_inner_steps(int steps) override {
    log.push_back("steps " + std::to_string(steps));
    InnerStepsResult r;
    r.steps = steps;
    r.tokens = 10 * steps;
    return r;
  }
  std::uint64_t parameter_count() const override { return 0; }
  std::span<float> parameters() override { return {}; }
  std::vector<std::uint64_t> bucket_boundaries() const override { return {0}; }
  std::vector<StateSection> state_sections() override { return {}; }
  std::string progress() const override { return ""; }
  void restore_progress(const std::string&) override {}
  std::vector<std::string>& log;
  explicit StubWorker(std::vector<std::string>& l) : log(l) {}
};

// Accepts every message and delivers nothing.
class StubTransport final : public Transport {
 public:
  explicit StubTransport(std::uint64_t epoch) : epoch_(epoch) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::uint64_t epoch() const override { return epoch_; }
  void send(int, Tag, Payload, double) override {}
  Received recv(int, Tag, std::span<std::byte>, double) override { return {}; }
  std::unique_ptr<PendingExchange> start_exchange(int, Payload, int, std::span<std::byte>,
                                                  Tag) override {
    return nullptr;
  }
  void abort() override {}

 private:
  std::uint64_t epoch_;
};

class StubFactory final : public TransportFactory {
 public:
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override {
    return std::make_unique<StubTransport>(spec.epoch);
  }
};

// A ring message's tag in the given phase (the phase is the bit ring_tag_is_all_gather reads).
Tag ring_message(bool all_gather) {
  const Tag t = make_tag(TagKind::kCollective, all_gather ? (Tag{1} << 31) : 0);
  EXPECT_EQ(ring_tag_is_all_gather(t), all_gather);
  return t;
}

struct Node {
  explicit Node(const std::string& point)
      : trigger(parse_fault_point(point, "--fault-kill"),
                [this](const std::string& what) { log.push_back("FIRE " + what); }),
        worker(stub, trigger),
        factory(stubs, trigger) {}
  std::vector<std::string> log;
  StubWorker stub{log};
  StubFactory stubs;
  FaultTrigger trigger;
  FaultTrigger::Worker worker;
  FaultTrigger::Factory factory;
  std::unique_ptr<Transport> ring;

  // One attempt of a round as DilocoNode runs it: a new epoch connected (before the inner steps
  // on attempt 0), the inner steps on attempt 0, then one reduce-scatter and one all-gather
  // message.
  void attempt(std::uint64_t epoch, bool inner) {
    if (epoch != 0) ring = factory.connect(EpochSpec{epoch, 0, {1, 2}, 1.0});
    if (inner) worker.run_inner_steps(4);
    log.push_back("ring epoch " + std::to_string(ring->epoch()));
    ring->send(1, ring_message(false), Payload{}, 1.0);
    ring->send(1, ring_message(true), Payload{}, 1.0);
  }
};

TEST(FaultPoint, ParsesEveryFormAndRefusesOthersNamingTheOption) {
  const FaultPoint p = parse_fault_point("all-gather:3:1", "--fault-kill");
  EXPECT_EQ(p.phase, FaultPhase::kAllGather);
  EXPECT_EQ(p.n, 3u);
  EXPECT_EQ(p.attempt, 1);
  EXPECT_EQ(describe(p), "the all-gather of outer step 3 (attempt 1)");
  EXPECT_EQ(describe(parse_fault_point("inner:2", "x")), "the inner steps of outer step 2");
  EXPECT_EQ(describe(parse_fault_point("recovery:7", "x")), "outgoing recovery message 7");
  EXPECT_EQ(parse_fault_point("reduce-scatter:1", "x").attempt, 0);
  for (const char* bad : {"", "inner", "inner:0", "inner:2:1", "recovery:1:0", "crash:2",
                          "all-gather:x", "all-gather:2:-1", "all-gather:2:1:0"}) {
    try {
      parse_fault_point(bad, "--fault-kill");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--fault-kill: '" + std::string(bad) + "'", 0), 0u)
          << e.what();
    }
  }
}

TEST(FaultPoint, InnerFiresAfterTheFirstInnerStepOfThatOuterStepOnce) {
  Node n("inner:2");
  n.attempt(1, true);
  n.attempt(0, true);  // outer step 2, same epoch
  n.attempt(0, true);
  const std::vector<std::string> want = {
      "steps 4", "ring epoch 1", "steps 1", "FIRE the inner steps of outer step 2", "steps 3",
      "ring epoch 1", "steps 4", "ring epoch 1"};
  EXPECT_EQ(n.log, want);
}

TEST(FaultPoint, AttemptsCountTheEpochsConnectedAfterTheInnerSteps) {
  Node n("reduce-scatter:2:1");
  n.attempt(1, true);   // outer step 1
  n.attempt(2, true);   // outer step 2, attempt 0, in a new epoch (connected before the steps)
  n.attempt(3, false);  // its retry: attempt 1
  const std::vector<std::string> want = {"steps 4", "ring epoch 1", "steps 4", "ring epoch 2",
                                         "ring epoch 3",
                                         "FIRE the reduce-scatter of outer step 2 (attempt 1)"};
  EXPECT_EQ(n.log, want);
}

// A streaming node runs each outer step's H = 4 inner steps in several calls, its fragments'
// messages between them: given H, the trigger counts outer steps by inner steps, not calls.
TEST(FaultPoint, GivenHAnOuterStepIsHInnerStepsInAnyNumberOfCalls) {
  std::vector<std::string> log;
  StubWorker stub{log};
  StubFactory stubs;
  FaultTrigger trigger(parse_fault_point("all-gather:2", "--fault-kill"),
                       [&](const std::string& what) { log.push_back("FIRE " + what); }, 4);
  FaultTrigger::Worker worker(stub, trigger);
  FaultTrigger::Factory factory(stubs, trigger);
  const auto ring = factory.connect(EpochSpec{1, 0, {1, 2}, 1.0});
  for (int step = 1; step <= 2; ++step)
    for (int part = 0; part < 2; ++part) {  // two fragments: 2 inner steps, then a sync
      worker.run_inner_steps(1);
      worker.run_inner_steps(1);
      ring->send(1, ring_message(true), Payload{}, 1.0);
    }
  const std::vector<std::string> want = {"steps 1", "steps 1", "steps 1", "steps 1",
                                         "steps 1", "steps 1",
                                         "FIRE the all-gather of outer step 2 (attempt 0)",
                                         "steps 1", "steps 1"};
  EXPECT_EQ(log, want);
  Node inner("inner:2");  // without H every call is an outer step: the second call fires
  inner.worker.run_inner_steps(1);
  inner.worker.run_inner_steps(1);
  EXPECT_EQ(inner.log, (std::vector<std::string>{"steps 1", "FIRE the inner steps of outer step 2",
                                                 "steps 1"}));
}

TEST(FaultPoint, AllGatherAndRecoveryMessagesAreTheirOwn) {
  Node ag("all-gather:1");
  ag.attempt(1, true);
  EXPECT_EQ(ag.log.back(), "FIRE the all-gather of outer step 1 (attempt 0)");
  Node rec("recovery:2");
  auto t = rec.factory.connect(EpochSpec{recovery_epoch_id(1, 0, 0), 0, {1, 2}, 1.0});
  t->send(1, make_tag(TagKind::kRecovery, 0), Payload{}, 1.0);
  EXPECT_TRUE(rec.log.empty());
  t->start_exchange(1, Payload{}, 1, {}, make_tag(TagKind::kRecovery, 1));
  EXPECT_EQ(rec.log, std::vector<std::string>{"FIRE outgoing recovery message 2"});
  rec.attempt(1, true);  // ring messages do not count as recovery ones; it fired once
  EXPECT_EQ(rec.log.size(), 3u);
}

}  // namespace
}  // namespace meridian
