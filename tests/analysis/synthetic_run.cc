// The synthetic run's recipe: each node computes H inner steps at its own speed, the ring starts
// when the slowest member is done, each node's all-reduce time is the step's ring time plus a
// little jitter, then the outer optimizer. Churn is a fixed script (see synthetic_run.h).
#include "tests/analysis/synthetic_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

namespace meridian::analysis::testing {
namespace {

class Noise {  // deterministic uniform noise in [-1, 1]
 public:
  explicit Noise(std::uint64_t seed)
      : state_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {}
  double next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state_ >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  }

 private:
  std::uint64_t state_;
};

struct Node {
  std::int64_t id;
  double step_s;       // seconds per inner step
  double ready_s = 0;  // when it can start its next inner steps
};

constexpr double kParamCount = 124e6;
constexpr double kTokensPerInnerStep = 16384;

}  // namespace

std::vector<Event> synthetic_run(const SyntheticOptions& o) {
  Noise noise(o.seed);
  std::vector<Event> ev;
  auto emit = [&](double t, std::int64_t node, const char* type, JsonObject f = {}) {
    ev.push_back(Event{t, node, type, std::move(f)});
  };
  const double bytes_per_element = o.codec == "fp32" ? 4.0 : 1.0;
  const double bucket_elements = kParamCount / 2;

  JsonObject metrics;
  metrics.add("param_count", kParamCount)
      .add("flops_per_token", 6 * kParamCount)
      .add("tokens_per_inner_step", kTokensPerInnerStep)
      .add("gpus_per_node", 1)
      .add("peak_flops_per_gpu", 1e14)
      .add("H", o.H)
      .add("codec", o.codec)
      .add("local_ranks", 1);
  JsonObject diloco, config;
  diloco.add("H", o.H).add("codec", o.codec).add("buckets", 2);
  config
      .add("run", JsonObject()
                      .add("seed", static_cast<std::int64_t>(o.seed))
                      .add("mode", o.with_loss ? "emulate" : "simulate"))
      .add("diloco", diloco)
      .add("model", JsonObject().add("layers", 12).add("hidden", 768).add("vocab", 50257));
  emit(0, -1, "config",
       JsonObject()
           .add("mode", o.with_loss ? "emulate" : "simulate")
           .add("seed", static_cast<std::int64_t>(o.seed))
           .add("command", "synthetic_run (tests)")
           .add("versions", JsonObject().add("meridian", "test"))
           .add("metrics", metrics)
           .add("config", config));

  std::vector<Node> members;
  const double speeds[] = {1.0, 1.05, 0.95, 1.1, 1.0, 1.02};
  for (std::int64_t id = 0; id < 4; ++id) {
    members.push_back({id, o.inner_step_s * speeds[id]});
    emit(0, id, "node_started", JsonObject().add("initial", true));
  }
  std::int64_t epoch = 0;
  auto form_epoch = [&](double t, std::int64_t step) {
    std::vector<std::int64_t> ids;
    for (const Node& n : members) ids.push_back(n.id);
    for (const Node& n : members)
      emit(t, n.id, "epoch_formed",
           JsonObject().add("epoch", epoch).add("outer_step", step).add("members", ids));
  };
  form_epoch(0, 0);

  // Churn script (outer step numbers): joiners requested one step before they are admitted.
  const std::map<int, std::int64_t> joins = {{3, 4}, {8, 5}};
  const int fail_step = 6, fail_node = 2, leave_step = 9, leave_node = 1;
  double t_end = 0;

  for (int k = 0; k < o.outer_steps; ++k) {
    const double step_start = members.empty() ? t_end : members.front().ready_s;
    if (auto j = joins.find(k); j != joins.end()) {
      const std::int64_t id = j->second;
      const double asked = step_start - 30;
      emit(asked, id, "node_started", JsonObject().add("initial", false));
      emit(asked, id, "join_requested");
      ++epoch;
      members.push_back({id, o.inner_step_s * speeds[id]});
      emit(step_start, id, "admitted", JsonObject().add("epoch", epoch).add("outer_step", k));
      form_epoch(step_start, k);
      const std::vector<std::int64_t> sources = {members[0].id, members[1].id};
      const double bytes = kParamCount * 4 * 3, recovery_s = 45 + 10 * noise.next();
      emit(step_start, id, "recovery_started",
           JsonObject().add("sources", sources).add("bytes", bytes));
      emit(step_start + recovery_s, id, "recovery_finished",
           JsonObject()
               .add("bytes", bytes)
               .add("elapsed_s", recovery_s)
               .add("sources", sources)
               .add("resumed", 0));
      members.back().ready_s = step_start + recovery_s;
    }
    // Inner steps.
    std::map<std::int64_t, double> compute_s;
    double ring_start = 0;
    const double loss_k = 3.2 + 7.5 * std::exp(-k / 3.0);
    for (Node& n : members) {
      const double start = std::max(n.ready_s, step_start);
      compute_s[n.id] = o.H * n.step_s * (1 + 0.03 * noise.next());
      JsonObject f;
      f.add("outer_step", k)
          .add("steps", o.H)
          .add("tokens", o.H * kTokensPerInnerStep)
          .add("start_s", start)
          .add("compute_s", compute_s[n.id]);
      if (o.with_loss)
        f.add("loss", loss_k + 0.05 * noise.next());
      else
        f.add_raw("loss", "null");
      emit(start + compute_s[n.id], n.id, "inner_steps", f);
      ring_start = std::max(ring_start, start + compute_s[n.id]);
    }
    // All-reduce, with one aborted attempt when a node fails during it.
    std::map<std::int64_t, double> ar_s;
    int attempt = 0;
    double attempt_start = ring_start;
    auto ring = [&](double fraction, double elapsed_base, bool aborted) {
      const double N = static_cast<double>(members.size());
      for (const Node& n : members) {
        if (aborted && n.id == fail_node) continue;  // dead: says nothing
        const double elapsed = aborted ? elapsed_base : elapsed_base + 0.3 * std::abs(noise.next());
        double start = attempt_start;
        for (int b = 0; b < 2; ++b) {
          const double bucket_s = elapsed / 2;
          const double sent = fraction * 2 * (N - 1) / N * bucket_elements * bytes_per_element;
          JsonObject f;
          f.add("outer_step", k)
              .add("bucket", b)
              .add("epoch", epoch)
              .add("attempt", attempt)
              .add("codec", o.codec)
              .add("elements", bucket_elements)
              .add("participants", static_cast<std::int64_t>(members.size()))
              .add("bytes_sent", sent)
              .add("bytes_received", sent)
              .add("start_s", start)
              .add("elapsed_s", bucket_s);
          if (o.codec == "fp32")
            f.add("relative_error", 0.0);
          else
            f.add("relative_error", 0.004 + 0.001 * noise.next());
          emit(start + bucket_s, n.id, "allreduce", f);
          start += bucket_s;
        }
        ar_s[n.id] += elapsed;
      }
    };
    const double N = static_cast<double>(members.size());
    const double ring_s = o.allreduce_base_s * (2 * (N - 1) / N) / 1.5 * (1 + 0.15 * noise.next());
    if (k == fail_step) {
      ring(0.3, 5.0, true);
      const double t_fail = attempt_start + 5.0;
      members.erase(std::remove_if(members.begin(), members.end(),
                                   [&](const Node& n) { return n.id == fail_node; }),
                    members.end());
      ar_s.erase(fail_node);
      ++epoch;
      for (const Node& n : members) {
        emit(t_fail, n.id, "fail_detected",
             JsonObject().add("failed", fail_node).add("by", "allreduce"));
        emit(t_fail, n.id, "retry",
             JsonObject().add("outer_step", k).add("attempt", 1).add("reason", "peer lost"));
      }
      form_epoch(t_fail, k);
      attempt = 1;
      attempt_start = t_fail;
    }
    ring(1.0, ring_s, false);
    // Outer optimizer and the outer_step records.
    for (Node& n : members) {
      const double opt_s = 0.4;
      const double t = attempt_start + (ar_s[n.id] - (attempt ? 5.0 : 0.0)) + opt_s;
      JsonObject f;
      f.add("outer_step", k)
          .add("epoch", epoch)
          .add("participants", static_cast<std::int64_t>(members.size()))
          .add("inner_s", compute_s[n.id])
          .add("allreduce_s", ar_s[n.id])
          .add("outer_opt_s", opt_s)
          .add("tokens", o.H * kTokensPerInnerStep);
      if (o.with_loss)
        f.add("loss", loss_k - 0.1 + 0.05 * noise.next());
      else
        f.add_raw("loss", "null");
      emit(t, n.id, "outer_step", f);
      n.ready_s = t;
      t_end = std::max(t_end, t);
    }
    if (k == leave_step) {
      for (const Node& n : members)
        if (n.id == leave_node)
          emit(n.ready_s, n.id, "node_left", JsonObject().add("graceful", true));
      members.erase(std::remove_if(members.begin(), members.end(),
                                   [&](const Node& n) { return n.id == leave_node; }),
                    members.end());
    }
    // Every node starts the next step together (the outer step is a barrier in this recipe).
    for (Node& n : members) n.ready_s = t_end;
  }
  emit(t_end, -1, "run_finished",
       JsonObject().add("simulated_s", t_end).add("outer_steps", o.outer_steps));
  std::stable_sort(ev.begin() + 1, ev.end() - 1,
                   [](const Event& a, const Event& b) { return a.t_s < b.t_s; });
  return ev;
}

void write_synthetic_run(const std::string& dir, const SyntheticOptions& options) {
  std::filesystem::create_directories(dir);
  std::ofstream out(std::filesystem::path(dir) / "events.jsonl");
  if (!out) throw std::runtime_error("cannot write " + dir + "/events.jsonl");
  for (const Event& e : synthetic_run(options)) out << e.to_json() << "\n";
}

}  // namespace meridian::analysis::testing
