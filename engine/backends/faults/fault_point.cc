// FaultPoint: parsing, and the worker / transport wrappers that fire at the point.
#include "engine/backends/faults/fault_point.h"

#include <charconv>
#include <vector>

#include "engine/backends/faults/watched_transport.h"
#include "engine/core/collective/ring_allreduce.h"
#include "engine/core/error.h"

namespace meridian {
namespace {

constexpr char kForms[] =
    "expected inner:N, reduce-scatter:N[:ATTEMPT], all-gather:N[:ATTEMPT], recovery:K or "
    "admitted (N, K >= 1: the node's outer step, its outgoing recovery message; admitted: a "
    "joiner, as it starts fetching its state)";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

std::uint64_t number(const std::string& s, std::uint64_t min, const std::string& what,
                     const std::string& text) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min || v > (1u << 30))
    throw ConfigError(what + ": '" + text + "': '" + s + "' is not a number >= " +
                      std::to_string(min) + "; " + kForms);
  return v;
}

}  // namespace

FaultPoint parse_fault_point(const std::string& text, const std::string& what) {
  const auto parts = split(text, ':');
  FaultPoint p;
  const std::string& phase = parts[0];
  if (phase == "inner") {
    p.phase = FaultPhase::kInner;
  } else if (phase == "reduce-scatter") {
    p.phase = FaultPhase::kReduceScatter;
  } else if (phase == "all-gather") {
    p.phase = FaultPhase::kAllGather;
  } else if (phase == "recovery") {
    p.phase = FaultPhase::kRecovery;
  } else if (phase == "admitted") {
    p.phase = FaultPhase::kAdmitted;
    if (parts.size() != 1) throw ConfigError(what + ": '" + text + "': " + kForms);
    return p;
  } else {
    throw ConfigError(what + ": '" + text + "': unknown point '" + phase + "'; " + kForms);
  }
  const bool collective = p.phase == FaultPhase::kReduceScatter || p.phase == FaultPhase::kAllGather;
  if (parts.size() < 2 || parts.size() > (collective ? 3u : 2u))
    throw ConfigError(what + ": '" + text + "': " + kForms);
  p.n = number(parts[1], 1, what, text);
  if (parts.size() == 3) p.attempt = static_cast<int>(number(parts[2], 0, what, text));
  return p;
}

std::string describe(const FaultPoint& p) {
  const std::string step = " of outer step " + std::to_string(p.n);
  const std::string attempt = " (attempt " + std::to_string(p.attempt) + ")";
  switch (p.phase) {
    case FaultPhase::kInner:
      return "the inner steps" + step;
    case FaultPhase::kReduceScatter:
      return "the reduce-scatter" + step + attempt;
    case FaultPhase::kAllGather:
      return "the all-gather" + step + attempt;
    case FaultPhase::kRecovery:
      return "outgoing recovery message " + std::to_string(p.n);
    case FaultPhase::kAdmitted:
      return "admission (before the joiner's first recovery connection)";
  }
  return "?";
}

FaultTrigger::FaultTrigger(FaultPoint point, Action action, int inner_steps)
    : point_(point), action_(std::move(action)), inner_steps_(inner_steps) {}

void FaultTrigger::fire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_) return;
    fired_ = true;
  }
  action_(describe(point_));
}

InnerStepsResult FaultTrigger::Worker::run_inner_steps(int steps) {
  bool here;
  {
    std::lock_guard<std::mutex> lock(t_.mu_);
    const bool begins = t_.inner_steps_ <= 0 || t_.steps_ % t_.inner_steps_ == 0;
    t_.steps_ += static_cast<std::uint64_t>(steps);
    if (begins) {
      ++t_.outer_;
      t_.attempt_ = 0;
    }
    here = begins && t_.point_.phase == FaultPhase::kInner && t_.point_.n == t_.outer_ &&
           !t_.fired_;
  }
  if (!here || steps < 2) {
    if (here) t_.fire();
    return ForwardingWorker::run_inner_steps(steps);
  }
  InnerStepsResult a = ForwardingWorker::run_inner_steps(1);
  t_.fire();
  const InnerStepsResult b = ForwardingWorker::run_inner_steps(steps - 1);
  a.loss = (a.loss * a.steps + b.loss * b.steps) / (a.steps + b.steps);
  a.steps += b.steps;
  a.tokens += b.tokens;
  a.compute_s += b.compute_s;
  return a;
}

std::unique_ptr<Transport> FaultTrigger::Factory::connect(const EpochSpec& spec) {
  const bool recovery = is_recovery_epoch(spec.epoch);
  if (recovery && spec.rank == 0 && t_.point_.phase == FaultPhase::kAdmitted) t_.fire();
  if (!recovery && ring_shard_of(spec.epoch) == 0) {
    std::lock_guard<std::mutex> lock(t_.mu_);
    // Attempt 0's epoch is connected before the inner steps (which reset the count); a retry's
    // after them.
    if (t_.outer_ > 0) ++t_.attempt_;
  }
  return std::make_unique<WatchedTransport>(
      inner_.connect(spec), [&t = t_, recovery](Tag tag) { t.on_send(recovery, tag); });
}

void FaultTrigger::on_send(bool recovery, Tag tag) {
  bool here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_) return;
    if (recovery) {
      here = point_.phase == FaultPhase::kRecovery && ++recovery_sent_ == point_.n;
    } else if ((tag >> 56) == static_cast<Tag>(TagKind::kCollective)) {
      const FaultPhase phase =
          ring_tag_is_all_gather(tag) ? FaultPhase::kAllGather : FaultPhase::kReduceScatter;
      here = point_.phase == phase && point_.n == outer_ && point_.attempt == attempt_;
    }
  }
  if (here) fire();
}

}  // namespace meridian
