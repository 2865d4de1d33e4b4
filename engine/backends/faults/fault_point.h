// FaultPoint: a named point of one node's own activity at which a test's action fires, once —
// in the inner steps of the node's N-th outer step, at its first reduce-scatter or all-gather
// message of that outer step's all-reduce (attempt A: 0 the first try, 1 its first retry), or at
// its K-th outgoing live-recovery message (while serving a joiner), or — for a joiner — as it
// starts fetching its state, right after its admission ("admitted"). The action is the test's:
// `meridian train --fault-kill` SIGKILLs its own process there (cli/train/README.md). Counted on
// the node's own calls, so the point does not race other nodes or the wall clock. Not a
// schedule of several faults: one point per node.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/core/inner_worker.h"
#include "engine/core/transport.h"

namespace meridian {

enum class FaultPhase { kInner, kReduceScatter, kAllGather, kRecovery, kAdmitted };

struct FaultPoint {
  FaultPhase phase = FaultPhase::kInner;
  std::uint64_t n = 0;  // the outer step of this node (from 1), or the recovery message (from 1)
  int attempt = 0;      // reduce-scatter / all-gather only
};

// "inner:N", "reduce-scatter:N[:A]", "all-gather:N[:A]", "recovery:K" (N, K >= 1, A >= 0) or
// "admitted";
// ConfigError naming `what` (e.g. "--fault-kill") and the accepted forms otherwise.
FaultPoint parse_fault_point(const std::string& text, const std::string& what);
// "the all-gather of outer step 2 (attempt 0)", for the line a node writes when it fires.
std::string describe(const FaultPoint& p);

// Watches one node: wrap its worker and its transport factory with the classes below; the action
// runs (on the node's activity that reached the point) with describe(point). A node's outer steps
// are its inner-step calls, counted from 1; collective transports connected since the last of
// them are its retries (a retry always forms a new epoch; attempt 0's is connected before the
// inner steps). With several local ranks the shard-0 ring counts. Given H (`inner_steps` > 0),
// an outer step begins only with the call at a multiple of H inner steps of this process: a
// streaming node (diloco.fragments) runs each outer step's H steps in several calls, and its
// fragments' messages between them belong to that step. Overlapped runs (diloco.overlap) are
// not counted right: their next step's inner steps run beside this step's ring.
class FaultTrigger {
 public:
  using Action = std::function<void(const std::string& what)>;
  FaultTrigger(FaultPoint point, Action action, int inner_steps = 0);

  // InnerWorker wrapper: fires after the first of the N-th call's inner steps, then runs the
  // rest (when the action returns).
  class Worker final : public ForwardingWorker {
   public:
    Worker(InnerWorker& inner, FaultTrigger& trigger) : ForwardingWorker(inner), t_(trigger) {}
    InnerStepsResult run_inner_steps(int steps) override;

   private:
    FaultTrigger& t_;
  };

  // TransportFactory wrapper: counts retries and watches outgoing collective / recovery messages.
  class Factory final : public TransportFactory {
   public:
    Factory(TransportFactory& inner, FaultTrigger& trigger) : inner_(inner), t_(trigger) {}
    std::unique_ptr<Transport> connect(const EpochSpec& spec) override;

   private:
    TransportFactory& inner_;
    FaultTrigger& t_;
  };

 private:
  // Fires when this message (collective with its tag, or recovery) is the point.
  void on_send(bool recovery, Tag tag);
  void fire();

  const FaultPoint point_;
  const Action action_;
  std::mutex mu_;
  const int inner_steps_;           // H, or 0: every inner-step call begins an outer step
  std::uint64_t outer_ = 0;         // outer steps begun so far
  std::uint64_t steps_ = 0;         // inner steps so far
  int attempt_ = 0;                 // collective epochs connected since the last one
  std::uint64_t recovery_sent_ = 0;
  bool fired_ = false;
};

}  // namespace meridian
