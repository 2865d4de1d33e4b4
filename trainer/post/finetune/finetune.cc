// The post-training loop: LlamaModel, the trainer's loss and schedule, and AdamW over the
// trainable tensors only (moments allocated for them alone; frozen tensors keep
// requires_grad = false, so autograd computes no weight gradient for them).
#include "trainer/post/finetune/finetune.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not reached through ATen.h in LibTorch 2.11)

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/core/error.h"
#include "trainer/adamw.h"
#include "trainer/model.h"
#include "trainer/precision.h"
#include "trainer/safetensors/float_convert.h"
#include "trainer/safetensors/safetensors.h"
#include "trainer/torch_compat.h"

namespace meridian::post {
namespace {

// AdamW (torch.optim.AdamW's rule, as trainer::FlatAdamW) over a list of tensors, each with its
// own moments: the state exists only for what is trained.
class SubsetAdamW {
 public:
  SubsetAdamW(const trainer::OptimConfig& c, std::vector<at::Tensor> params)
      : c_(c), params_(std::move(params)) {
    for (const auto& p : params_) {
      m_.push_back(at::zeros_like(p));
      v_.push_back(at::zeros_like(p));
    }
  }

  void clip_and_step(double lr) {
    at::NoGradGuard no_grad;
    if (c_.grad_clip > 0) {
      double sq = 0;
      for (const auto& p : params_) sq += p.grad().pow(2).sum().item<double>();
      const double coef = c_.grad_clip / (std::sqrt(sq) + 1e-6);
      if (coef < 1.0)
        for (auto& p : params_) p.mutable_grad().mul_(coef);
    }
    ++step_;
    const double bias1 = 1.0 - std::pow(c_.beta1, static_cast<double>(step_));
    const double bias2 = 1.0 - std::pow(c_.beta2, static_cast<double>(step_));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& p = params_[i];
      const at::Tensor& g = p.grad();
      if (c_.weight_decay != 0) p.mul_(1.0 - lr * c_.weight_decay);
      m_[i].lerp_(g, 1.0 - c_.beta1);
      v_[i].mul_(c_.beta2).addcmul_(g, g, 1.0 - c_.beta2);
      const at::Tensor denom = v_[i].sqrt().div_(std::sqrt(bias2)).add_(c_.eps);
      p.addcdiv_(m_[i], denom, -lr / bias1);
    }
  }

  std::uint64_t state_bytes() const {
    std::uint64_t n = 0;
    for (const auto& m : m_) n += 2 * static_cast<std::uint64_t>(m.numel()) * m.element_size();
    return n;
  }

 private:
  trainer::OptimConfig c_;
  std::vector<at::Tensor> params_, m_, v_;
  std::int64_t step_ = 0;
};

void copy_params_in(trainer::LlamaModel& model, std::span<const float> params) {
  at::Tensor& flat = model.flat();
  if (static_cast<std::int64_t>(params.size()) != flat.numel())
    throw ConfigError("finetune: initial weights have " + std::to_string(params.size()) +
                      " values, the model " + std::to_string(flat.numel()));
  at::NoGradGuard no_grad;
  std::memcpy(flat.data_ptr<float>(), params.data(), params.size() * sizeof(float));
}

}  // namespace

FinetuneResult finetune(const FinetuneOptions& o, const trainer::TokenizedCorpus& corpus) {
  at::set_num_threads(1);
  const auto& mc = o.config.model;
  if (corpus.vocab != mc.vocab)
    throw ConfigError("finetune: model vocab " + std::to_string(mc.vocab) + " but the corpus has " +
                      std::to_string(corpus.vocab));
  trainer::LlamaModel model(mc);
  model.init_weights(o.seed);
  if (!o.init_params.empty()) copy_params_in(model, o.init_params);

  const auto& layout = model.layout();
  std::set<std::string> wanted(o.trainable.begin(), o.trainable.end());
  for (const auto& name : wanted) {
    bool found = false;
    for (const auto& s : layout) found = found || s.name == name;
    if (!found)
      throw ConfigError("finetune: trainable tensor \"" + name + "\" is not a parameter of model " +
                        mc.name);
  }
  FinetuneResult r;
  std::vector<at::Tensor> trained;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    at::Tensor p = model.parameters()[i];
    r.params_total += layout[i].numel;
    if (wanted.empty() || wanted.count(layout[i].name)) {
      trained.push_back(p);
      r.params_trainable += layout[i].numel;
    } else {
      p.set_requires_grad(false);
    }
  }
  SubsetAdamW opt(o.config.train.optim, trained);
  r.optimizer_state_bytes = opt.state_bytes();
  r.optimizer_state_bytes_full = 2 * r.params_total * sizeof(float);

  const int T = mc.seq_len, B = o.config.train.batch;
  trainer::ShardReader reader(corpus.train, T, 0, 1, o.seed);
  std::vector<std::int64_t> batch;
  const bool bf16 = trainer::bf16_for_training(o.config.train.bf16_autocast);
  for (int step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    reader.next_batch(B, batch);
    at::Tensor all = at::from_blob(batch.data(), {B, T + 1}, at::TensorOptions().dtype(at::kLong));
    model.zero_grad();
    at::Tensor logits;
    {
      trainer::compat::CpuAutocastBf16 autocast(bf16);
      logits = model.forward(all.narrow(1, 0, T));
    }
    trainer::LossParts loss =
        trainer::lm_loss(logits, all.narrow(1, 1, T), o.config.train.optim.z_loss_weight);
    loss.total.backward();
    opt.clip_and_step(trainer::scheduled_lr(o.config.train.optim, step));
    r.train_loss.push_back(loss.cross_entropy.item<double>());
    r.step_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (o.on_step) o.on_step(step + 1, r.train_loss.back());
  }
  const at::Tensor& flat = model.flat();
  r.params.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  return r;
}

double evaluate(const trainer::TrainerConfig& config, std::span<const float> params,
                const trainer::TokenizedCorpus& corpus, int sequences) {
  at::set_num_threads(1);
  trainer::LlamaModel model(config.model);
  copy_params_in(model, params);
  const int T = config.model.seq_len;
  const std::int64_t available = static_cast<std::int64_t>(corpus.validation->size() - 1) / T;
  const int count = static_cast<int>(std::min<std::int64_t>(sequences, available));
  if (count <= 0) throw ConfigError("evaluate: the validation split is shorter than one sequence");
  std::vector<std::int64_t> v = trainer::validation_sequences(*corpus.validation, T, count);
  at::NoGradGuard no_grad;
  double sum = 0;
  const int per_batch = config.train.batch;
  const bool bf16 = trainer::bf16_for_training(config.train.bf16_autocast);
  for (int r = 0; r < count; r += per_batch) {
    const int n = std::min(per_batch, count - r);
    at::Tensor all = at::from_blob(v.data() + static_cast<std::size_t>(r) * (T + 1), {n, T + 1},
                                   at::TensorOptions().dtype(at::kLong));
    at::Tensor logits;
    {
      trainer::compat::CpuAutocastBf16 autocast(bf16);
      logits = model.forward(all.narrow(1, 0, T));
    }
    sum += trainer::lm_loss(logits, all.narrow(1, 1, T), 0.0).cross_entropy.item<double>() * n;
  }
  return sum / count;
}

void write_weights(const std::filesystem::path& path, const trainer::ModelConfig& model,
                   std::span<const float> params) {
  const auto layout = trainer::parameter_layout(model);
  MERIDIAN_CHECK_EQ(params.size(), trainer::parameter_count(model));
  std::vector<safetensors::TensorView> views;
  for (const auto& s : layout)
    views.push_back({s.name, safetensors::Dtype::kF32, s.shape,
                     std::as_bytes(params.subspan(s.offset, s.numel))});
  safetensors::write(path, views, {{"format", "pt"}, {"meridian.model", model.name}});
}

std::vector<float> read_weights(const std::filesystem::path& path,
                                const trainer::ModelConfig& model) {
  const safetensors::File f = safetensors::read(path);
  std::vector<float> flat(trainer::parameter_count(model));
  for (const auto& s : trainer::parameter_layout(model)) {
    const safetensors::Tensor& t = f.at(s.name);
    if (t.shape != s.shape)
      throw ConfigError("weights '" + path.string() + "': tensor \"" + s.name +
                        "\" does not have model " + model.name + "'s shape");
    const std::vector<float> v = safetensors::to_f32(t);
    std::memcpy(flat.data() + s.offset, v.data(), v.size() * sizeof(float));
  }
  return flat;
}

}  // namespace meridian::post
