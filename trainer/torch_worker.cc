// TorchWorker: the training loop (batch -> forward -> loss -> backward -> clip -> AdamW),
// evaluation, progress and checkpoints around LlamaModel and FlatAdamW. Not the outer loop:
// DiLoCo (engine/) reads and writes parameters() between calls to run_inner_steps().
#include "trainer/torch_worker.h"

#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not reached through ATen.h in LibTorch 2.11)
#include <ATen/Parallel.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "trainer/adamw.h"
#include "trainer/checkpoint.h"
#include "trainer/model.h"
#include "trainer/precision.h"
#include "trainer/torch_compat.h"

namespace meridian::trainer {

struct TorchWorker::Impl {
  Impl(TorchWorkerOptions o, TokenizedCorpus c)
      : options(std::move(o)),
        corpus(std::move(c)),
        model(options.config.model),
        reader(corpus.train, options.config.model.seq_len, options.rank, options.world,
               options.seed),
        order(corpus.train, options.config.model.seq_len, options.seed) {
    if (corpus.vocab != options.config.model.vocab)
      throw ConfigError("model " + options.config.model.name + ": vocab " +
                        std::to_string(options.config.model.vocab) +
                        " differs from the tokenizer's " + std::to_string(corpus.vocab));
    bf16 = bf16_for_training(options.config.train.bf16_autocast);
    model.init_weights(options.seed);
    optimizer = std::make_unique<FlatAdamW>(options.config.train.optim, model.flat(),
                                            model.flat_grad());
    if (!options.clock) {
      options.clock = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      };
    }
    // Spread over the large corpus's held-out split; the fortunes' and the post-training
    // domain corpora keep their first sequences.
    const bool spread = corpus.corpus == "debian-docs";
    validation = validation_sequences(*corpus.validation, options.config.model.seq_len,
                                      options.validation_sequences, spread);
  }

  // Tokens [rows, T + 1] as a tensor over `ids` (no copy): inputs and shifted targets.
  std::pair<at::Tensor, at::Tensor> split(std::vector<std::int64_t>& ids, std::int64_t rows) {
    const std::int64_t T = options.config.model.seq_len;
    at::Tensor all = at::from_blob(ids.data(), {rows, T + 1}, at::TensorOptions().dtype(at::kLong));
    return {all.narrow(1, 0, T), all.narrow(1, 1, T)};
  }

  // The next `rows` sequences: the engine's plan (assign_samples) once it gave one, else this
  // worker's own shard (a worker outside DiLoCo: `meridian train` without a run file).
  void next_batch(int rows) {
    if (!planned) {
      reader.next_batch(rows, batch);
      return;
    }
    batch.clear();
    for (int b = 0; b < rows; ++b) {
      if (assigned.empty())
        throw Error("data: the inner steps read past the samples the engine planned for them");
      SampleRange& r = assigned.front();
      order.append_sequence(order.sequence_at(r.begin), batch);
      if (++r.begin == r.end) assigned.erase(assigned.begin());
    }
  }

  double train_step() {
    const auto& tc = options.config.train;
    next_batch(tc.batch);
    auto [input, target] = split(batch, tc.batch);
    model.zero_grad();
    at::Tensor logits;
    {
      compat::CpuAutocastBf16 autocast(bf16);
      logits = model.forward(input);
    }
    LossParts loss = lm_loss(logits, target, tc.optim.z_loss_weight);
    loss.total.backward();
    optimizer->clip_gradients();
    optimizer->step(scheduled_lr(tc.optim, step));
    ++step;
    tokens += static_cast<std::int64_t>(tc.batch) * options.config.model.seq_len;
    return loss.cross_entropy.item<double>();
  }

  TorchWorkerOptions options;
  TokenizedCorpus corpus;
  LlamaModel model;
  ShardReader reader;
  DataOrder order;
  bool planned = false;               // assign_samples() was called: read `assigned`
  std::vector<SampleRange> assigned;  // what is left of the plan, in reading order
  std::unique_ptr<FlatAdamW> optimizer;
  bool bf16 = false;  // train.bf16_autocast resolved for this machine
  std::vector<std::int64_t> batch, validation;
  std::int64_t step = 0;
  std::int64_t tokens = 0;
};

namespace {

TokenizedCorpus prepare_for(TorchWorkerOptions& o) {
  o.data.vocab = o.config.model.vocab;
  return prepare_corpus(o.data);
}

// One training thread per worker, and freed memory kept in the process heap: a step allocates
// and frees the same large temporaries every time (the 32 MB logits of `small` and their
// gradients, activations), which glibc would otherwise hand back to the kernel (mmap/munmap,
// trimming) and fault in as fresh zeroed pages on the next step (~40k page faults per step of
// `small`). Process-wide, set once; memory stays at the peak of a step.
void configure_process_for_training() {
  at::set_num_threads(1);
#if defined(__GLIBC__)
  static const bool configured = [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)configured;
#endif
}

std::span<float> span_of(at::Tensor& t) {
  MERIDIAN_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous());
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

}  // namespace

TorchWorker::TorchWorker(TorchWorkerOptions options) {
  configure_process_for_training();
  TokenizedCorpus corpus = prepare_for(options);
  impl_ = std::make_unique<Impl>(std::move(options), std::move(corpus));
}

TorchWorker::TorchWorker(TorchWorkerOptions options, TokenizedCorpus corpus) {
  configure_process_for_training();
  impl_ = std::make_unique<Impl>(std::move(options), std::move(corpus));
}

TorchWorker::~TorchWorker() = default;

InnerStepsResult TorchWorker::run_inner_steps(int steps) {
  MERIDIAN_CHECK_GE(steps, 0);
  InnerStepsResult r;
  const double t0 = impl_->options.clock();
  const std::int64_t tokens0 = impl_->tokens;
  double loss_sum = 0;
  for (int s = 0; s < steps; ++s) loss_sum += impl_->train_step();
  r.steps = steps;
  r.tokens = impl_->tokens - tokens0;
  r.loss = steps > 0 ? loss_sum / steps : std::numeric_limits<double>::quiet_NaN();
  r.compute_s = impl_->options.clock() - t0;
  return r;
}

std::int64_t TorchWorker::samples_per_step() const { return impl_->options.config.train.batch; }

void TorchWorker::assign_samples(std::vector<SampleRange> ranges) {
  impl_->planned = true;
  impl_->assigned = std::move(ranges);
}

std::uint64_t TorchWorker::parameter_count() const {
  return static_cast<std::uint64_t>(impl_->model.flat().numel());
}

std::span<float> TorchWorker::parameters() { return span_of(impl_->model.flat()); }

std::vector<std::uint64_t> TorchWorker::bucket_boundaries() const {
  return group_boundaries(impl_->options.config.model);
}

std::vector<StateSection> TorchWorker::state_sections() {
  auto m = span_of(impl_->optimizer->exp_avg());
  auto v = span_of(impl_->optimizer->exp_avg_sq());
  return {StateSection{"adamw.exp_avg", m, m.size()},
          StateSection{"adamw.exp_avg_sq", v, v.size()}};
}

std::string TorchWorker::progress() const {
  const auto pos = impl_->reader.position();
  nlohmann::json j = {{"step", impl_->step},
                      {"tokens", impl_->tokens},
                      {"data", {{"epoch", pos.epoch}, {"index", pos.index}}},
                      {"shard", {{"rank", impl_->options.rank}, {"world", impl_->options.world}}},
                      {"seed", impl_->options.seed},
                      {"corpus", impl_->corpus.corpus_checksum}};
  return j.dump();
}

void TorchWorker::restore_progress(const std::string& progress) {
  std::int64_t step = 0, tokens = 0;
  DataPosition pos;
  try {
    const auto j = nlohmann::json::parse(progress);
    step = j.at("step").get<std::int64_t>();
    tokens = j.at("tokens").get<std::int64_t>();
    pos.epoch = j.at("data").at("epoch").get<std::int64_t>();
    pos.index = j.at("data").at("index").get<std::int64_t>();
    if (j.at("corpus").get<std::string>() != impl_->corpus.corpus_checksum)
      throw ConfigError("progress is for corpus " + j.at("corpus").get<std::string>() +
                        ", this worker reads " + impl_->corpus.corpus_checksum);
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("worker progress: bad JSON (") + e.what() + ")");
  }
  if (step < 0 || tokens < 0) throw ProtocolError("worker progress: negative step or tokens");
  // The data position is this shard's; a joiner that takes over another node's progress
  // continues its own shard at the same point (shards differ in length by at most one
  // sequence: past the end means "start the next epoch").
  pos.index = std::min(pos.index, impl_->reader.shard_sequences());
  impl_->reader.restore(pos);
  impl_->step = step;
  impl_->tokens = tokens;
  impl_->optimizer->set_step_count(step);
}

double TorchWorker::evaluate() {
  at::NoGradGuard no_grad;
  auto& v = impl_->validation;
  const std::int64_t T = impl_->options.config.model.seq_len;
  const std::int64_t rows = static_cast<std::int64_t>(v.size()) / (T + 1);
  const std::int64_t per_batch = impl_->options.config.train.batch;
  double sum = 0;
  for (std::int64_t r = 0; r < rows; r += per_batch) {
    const std::int64_t n = std::min(per_batch, rows - r);
    at::Tensor all = at::from_blob(v.data() + r * (T + 1), {n, T + 1},
                                   at::TensorOptions().dtype(at::kLong));
    at::Tensor logits;
    {
      compat::CpuAutocastBf16 autocast(impl_->bf16);
      logits = impl_->model.forward(all.narrow(1, 0, T));
    }
    sum += lm_loss(logits, all.narrow(1, 1, T), 0.0).cross_entropy.item<double>() *
           static_cast<double>(n);
  }
  return sum / static_cast<double>(rows);
}

std::int64_t TorchWorker::step() const { return impl_->step; }
std::int64_t TorchWorker::tokens() const { return impl_->tokens; }
const TrainerConfig& TorchWorker::config() const { return impl_->options.config; }
const TokenizedCorpus& TorchWorker::corpus() const { return impl_->corpus; }

void TorchWorker::save_checkpoint(const std::string& dir) const {
  CheckpointView view;
  view.model = &impl_->options.config.model;
  view.params = span_of(impl_->model.flat());
  view.exp_avg = span_of(impl_->optimizer->exp_avg());
  view.exp_avg_sq = span_of(impl_->optimizer->exp_avg_sq());
  view.progress_json = progress();
  write_checkpoint(dir, view);
}

void TorchWorker::load_checkpoint(const std::string& dir) {
  // Everything is read and verified before the worker is touched.
  LoadedCheckpoint c = read_checkpoint(dir, impl_->options.config.model);
  restore_progress(c.progress_json);
  at::NoGradGuard no_grad;
  auto copy_in = [](at::Tensor& t, const std::vector<float>& src) {
    std::memcpy(t.data_ptr<float>(), src.data(), src.size() * sizeof(float));
  };
  copy_in(impl_->model.flat(), c.params);
  copy_in(impl_->optimizer->exp_avg(), c.exp_avg);
  copy_in(impl_->optimizer->exp_avg_sq(), c.exp_avg_sq);
}

}  // namespace meridian::trainer
