// The `worker: torch` kind of the simulator (see torch_sim_worker.h).
#include "cli/emulation/torch_sim_worker.h"

#include <cstdio>
#include <memory>
#include <string>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "trainer/run_config.h"
#include "trainer/torch_worker.h"

namespace meridian::emulation {
using namespace trainer;  // TorchWorker and its options, the corpus, the run configuration
namespace {

// A TorchWorker whose inner steps also cost the modelled step time on the simulated clock.
class SimTorchWorker final : public InnerWorker {
 public:
  SimTorchWorker(TorchWorkerOptions options, TokenizedCorpus corpus, Runtime& runtime,
                 double step_s, std::shared_ptr<const double> speed_factor)
      : torch_(std::move(options), std::move(corpus)),
        runtime_(runtime),
        step_s_(step_s),
        speed_factor_(std::move(speed_factor)) {}

  InnerStepsResult run_inner_steps(int steps) override {
    // The modelled time first: a node whose host fails meanwhile is killed in compute_s and
    // does not spend real time on steps that never finish in the simulated world.
    const double t0 = runtime_.now_s();
    runtime_.compute_s(steps * step_s_ / *speed_factor_);
    InnerStepsResult r = torch_.run_inner_steps(steps);
    r.compute_s = runtime_.now_s() - t0;
    tokens_ += r.tokens;
    return r;
  }
  std::int64_t samples_per_step() const override { return torch_.samples_per_step(); }
  void assign_samples(std::vector<SampleRange> r) override { torch_.assign_samples(std::move(r)); }
  std::uint64_t parameter_count() const override { return torch_.parameter_count(); }
  std::span<float> parameters() override { return torch_.parameters(); }
  void parameters_updated() override { torch_.parameters_updated(); }
  std::vector<std::uint64_t> bucket_boundaries() const override {
    return torch_.bucket_boundaries();
  }
  std::vector<StateSection> state_sections() override { return torch_.state_sections(); }
  std::string progress() const override { return torch_.progress(); }
  void restore_progress(const std::string& p) override { torch_.restore_progress(p); }

  TorchWorker& torch() { return torch_; }
  // Tokens this node's inner steps consumed (a node that joined counts from its start).
  std::int64_t tokens() const { return tokens_; }

 private:
  TorchWorker torch_;
  Runtime& runtime_;
  const double step_s_;
  std::shared_ptr<const double> speed_factor_;
  std::int64_t tokens_ = 0;
};

}  // namespace

netsim::WorkerPlugin torch_worker_plugin(netsim::Scenario& sc,
                                         const netsim::SlowStepFn& on_slow_step) {
  const TrainerConfig trainer = trainer_config(sc);
  const ModelConfig& m = trainer.model;
  // The modelled cluster trains the real model (untied embeddings, as the trainer's decoder):
  // the FLOPs model, param_count and tokens per step of the metrics follow it.
  MERIDIAN_CHECK_EQ(sc.model.param_count(), parameter_count(m));

  TorchWorkerOptions base;
  base.config = trainer;
  base.data = data_options(sc.data, m.vocab);
  base.seed = sc.run.seed;
  base.validation_sequences = sc.data.validation_sequences;
  base.world = sc.total_nodes();
  DataOptions data = base.data;
  data.on_slow_step = on_slow_step;
  auto corpus = std::make_shared<const TokenizedCorpus>(prepare_corpus(data));
  const double step_s = sc.inner_step_s();

  netsim::WorkerPlugin p;
  p.mode = "emulate";
  p.config = trainer_config_json(trainer, sc.data, sc.train.target_loss);
  p.config.add("tokenizer_model", corpus->tokenizer_model)
      .add("corpus", corpus->corpus_checksum)
      .add("train_tokens", static_cast<std::uint64_t>(corpus->train->size()))
      .add("shards", base.world)
      .add("charged_inner_step_s", step_s);
  p.simgrid_config = {"contexts/stack-size:" + std::to_string(kTorchActorStackKiB)};
  p.make_worker = [base, corpus, step_s](const netsim::NodeWorkerContext& ctx) {
    TorchWorkerOptions o = base;
    o.rank = ctx.slot;
    Runtime* rt = ctx.runtime;
    o.clock = [rt] { return rt->now_s(); };
    return std::make_unique<SimTorchWorker>(std::move(o), *corpus, *rt, step_s, ctx.speed_factor);
  };
  p.after_outer_step = [sequences = sc.data.validation_sequences](
                           const netsim::NodeWorkerContext& ctx, InnerWorker& worker,
                           const OuterStepView& v, EventSink& sink) {
    auto& w = dynamic_cast<SimTorchWorker&>(worker);
    const std::span<const float> params = w.parameters();
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(std::as_bytes(params)));
    Event e{ctx.runtime->now_s(), ctx.node, "evaluation", {}};
    e.fields.add("outer_step", v.outer_step)
        .add("val_loss", w.torch().evaluate())
        .add("sequences", sequences)
        .add("tokens", w.tokens())
        .add("params_crc32c", std::string(crc));
    sink.emit(e);
  };
  return p;
}

}  // namespace meridian::emulation
