// The decoder against a plain reference written here in double with explicit loops (attention,
// full forward, loss), a finite-difference check of the backward pass, and AdamW and the
// schedule against hand-written formulas. Independent of trainer/model.cc by construction:
// it shares only the parameter layout (names and offsets).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "trainer/adamw.h"
#include "trainer/model.h"
#include "trainer/torch_compat.h"

namespace meridian::trainer {
namespace {

using Vec = std::vector<double>;

ModelConfig test_config() {
  ModelConfig m;
  m.name = "reference";
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 48;
  m.vocab = 40;
  m.seq_len = 12;
  m.rope_theta = 10000.0;
  m.init_std = 0.2;  // large enough that attention is far from uniform
  return m;
}

// ---- The reference: plain loops in double. ----

// y[o] = sum_i W[o][i] x[i], W row-major [out, in] (torch Linear layout).
Vec matvec(const double* w, const Vec& x, int out) {
  Vec y(out, 0.0);
  const std::size_t in = x.size();
  for (int o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  return y;
}

Vec rmsnorm(const Vec& x, const double* g, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= static_cast<double>(x.size());
  const double r = 1.0 / std::sqrt(ms + eps);
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
  return y;
}

// Rotates pairs (2i, 2i+1) of each head of `x` (heads * d values) for position t.
void rope(Vec& x, int heads, int d, int t, double theta) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < d / 2; ++i) {
      const double ang = t * std::pow(theta, -2.0 * i / d);
      const double c = std::cos(ang), s = std::sin(ang);
      double& a = x[h * d + 2 * i];
      double& b = x[h * d + 2 * i + 1];
      const double a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
}

// q[t] holds H*d values, k[t], v[t] KV*d values. Returns out[t] with H*d values.
std::vector<Vec> reference_attention(const std::vector<Vec>& q, const std::vector<Vec>& k,
                                     const std::vector<Vec>& v, int H, int KV, int d) {
  const int T = static_cast<int>(q.size());
  std::vector<Vec> out(T, Vec(H * d, 0.0));
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / KV);
    for (int t = 0; t < T; ++t) {
      Vec score(t + 1);
      double mx = -1e300;
      for (int s = 0; s <= t; ++s) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += q[t][h * d + i] * k[s][g * d + i];
        score[s] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, score[s]);
      }
      double z = 0;
      for (double& sc : score) z += (sc = std::exp(sc - mx));
      for (int s = 0; s <= t; ++s)
        for (int i = 0; i < d; ++i) out[t][h * d + i] += score[s] / z * v[s][g * d + i];
    }
  }
  return out;
}

class Reference {
 public:
  Reference(const ModelConfig& m, Vec w) : m_(m), w_(std::move(w)) {
    for (const auto& p : parameter_layout(m)) off_[p.name] = p.offset;
  }
  Vec& weights() { return w_; }
  const double* W(const std::string& name) const { return w_.data() + off_.at(name); }

  // logits[t] (vocab values) for one sequence.
  std::vector<Vec> forward(const std::vector<int>& tokens) const {
    const int T = static_cast<int>(tokens.size()), d = m_.hidden, H = m_.heads,
              KV = m_.kv_heads, hd = m_.head_dim();
    std::vector<Vec> h(T);
    for (int t = 0; t < T; ++t) h[t] = Vec(W("tok_embeddings.weight") + tokens[t] * d,
                                           W("tok_embeddings.weight") + (tokens[t] + 1) * d);
    for (int l = 0; l < m_.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      std::vector<Vec> q(T), k(T), v(T);
      for (int t = 0; t < T; ++t) {
        const Vec x = rmsnorm(h[t], W(p + "attention_norm.weight"), m_.norm_eps);
        q[t] = matvec(W(p + "attention.wq.weight"), x, H * hd);
        k[t] = matvec(W(p + "attention.wk.weight"), x, KV * hd);
        v[t] = matvec(W(p + "attention.wv.weight"), x, KV * hd);
        rope(q[t], H, hd, t, m_.rope_theta);
        rope(k[t], KV, hd, t, m_.rope_theta);
      }
      const auto att = reference_attention(q, k, v, H, KV, hd);
      for (int t = 0; t < T; ++t) {
        const Vec o = matvec(W(p + "attention.wo.weight"), att[t], d);
        for (int i = 0; i < d; ++i) h[t][i] += o[i];
        const Vec x = rmsnorm(h[t], W(p + "ffn_norm.weight"), m_.norm_eps);
        const Vec a = matvec(W(p + "feed_forward.w1.weight"), x, m_.ffn);
        const Vec b = matvec(W(p + "feed_forward.w3.weight"), x, m_.ffn);
        Vec g(m_.ffn);
        for (int i = 0; i < m_.ffn; ++i) g[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
        const Vec y = matvec(W(p + "feed_forward.w2.weight"), g, d);
        for (int i = 0; i < d; ++i) h[t][i] += y[i];
      }
    }
    std::vector<Vec> logits(T);
    for (int t = 0; t < T; ++t)
      logits[t] = matvec(W("output.weight"), rmsnorm(h[t], W("norm.weight"), m_.norm_eps),
                         m_.vocab);
    return logits;
  }

  // Mean next-token cross-entropy plus z_weight * mean(max logit^2) over all positions.
  double loss(const std::vector<std::vector<int>>& inputs,
              const std::vector<std::vector<int>>& targets, double z_weight) const {
    double ce = 0, z = 0;
    int n = 0;
    for (std::size_t b = 0; b < inputs.size(); ++b) {
      const auto logits = forward(inputs[b]);
      for (std::size_t t = 0; t < logits.size(); ++t, ++n) {
        const double mx = *std::max_element(logits[t].begin(), logits[t].end());
        double s = 0;
        for (double x : logits[t]) s += std::exp(x - mx);
        ce += mx + std::log(s) - logits[t][targets[b][t]];
        z += mx * mx;
      }
    }
    return ce / n + z_weight * z / n;
  }

 private:
  ModelConfig m_;
  Vec w_;
  std::map<std::string, std::uint64_t> off_;
};

Vec to_vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  return Vec(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

std::vector<std::vector<int>> to_rows(const at::Tensor& t) {
  std::vector<std::vector<int>> rows;
  for (int64_t b = 0; b < t.size(0); ++b) {
    rows.emplace_back();
    for (int64_t i = 0; i < t.size(1); ++i) rows.back().push_back(t[b][i].item<int>());
  }
  return rows;
}

at::Tensor random_tokens(int B, int T, int vocab, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randint(0, vocab, {B, T}, gen, at::TensorOptions().dtype(at::kLong));
}

// ---- Tests ----

TEST(Attention, MatchesExplicitLoopsWithGroupedHeads) {
  const int B = 2, T = 7, H = 4, KV = 2, d = 8;
  auto gen = at::detail::createCPUGenerator(7);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({B, T, H, d}, gen, opts), k = at::randn({B, T, KV, d}, gen, opts),
             v = at::randn({B, T, KV, d}, gen, opts);
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const at::Tensor out = grouped_causal_attention(q.to(dtype), k.to(dtype), v.to(dtype));
    ASSERT_EQ(out.sizes(), (at::IntArrayRef{B, T, H * d}));
    const double tol = dtype == at::kDouble ? 1e-12 : 1e-5;
    for (int b = 0; b < B; ++b) {
      std::vector<Vec> qs(T), ks(T), vs(T);
      for (int t = 0; t < T; ++t) {
        qs[t] = to_vec(q[b][t].reshape({-1}));
        ks[t] = to_vec(k[b][t].reshape({-1}));
        vs[t] = to_vec(v[b][t].reshape({-1}));
      }
      const auto ref = reference_attention(qs, ks, vs, H, KV, d);
      for (int t = 0; t < T; ++t) {
        const Vec got = to_vec(out[b][t]);
        for (int i = 0; i < H * d; ++i) ASSERT_NEAR(got[i], ref[t][i], tol) << b << "," << t;
      }
    }
  }
}

// The largest |a - b| over the largest |b|: a relative error that ignores near-zero entries.
double relative_max_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bd = b.to(at::kDouble);
  return (a.to(at::kDouble) - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

// The fp32 path (oneDNN GEMMs where built with them) against the double path (ATen's ops,
// which the loops above check), forward and backward, with grouped heads; T long enough for
// several row blocks of the fp32 path, the last one partial.
TEST(Attention, Float32GradientsMatchTheDoublePath) {
  const int B = 2, T = 259, H = 6, KV = 2, d = 8;
  auto gen = at::detail::createCPUGenerator(8);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({B, T, H, d}, gen, opts), k = at::randn({B, T, KV, d}, gen, opts),
                   v = at::randn({B, T, KV, d}, gen, opts),
                   up = at::randn({B, T, H * d}, gen, opts);
  std::vector<at::Tensor> grads[2];
  at::Tensor outs[2];
  for (int i = 0; i < 2; ++i) {
    const auto dtype = i == 0 ? at::kDouble : at::kFloat;
    std::vector<at::Tensor> in = {q.to(dtype).detach().requires_grad_(),
                                  k.to(dtype).detach().requires_grad_(),
                                  v.to(dtype).detach().requires_grad_()};
    outs[i] = grouped_causal_attention(in[0], in[1], in[2]);
    (outs[i] * up.to(dtype)).sum().backward();
    for (auto& t : in) grads[i].push_back(t.grad());
  }
  EXPECT_LT(relative_max_error(outs[1], outs[0]), 1e-5);
  for (int j = 0; j < 3; ++j) EXPECT_LT(relative_max_error(grads[1][j], grads[0][j]), 1e-5) << j;
}

TEST(Projection, Float32ForwardAndGradientsMatchTheDoublePath) {
  auto gen = at::detail::createCPUGenerator(4);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor x = at::randn({3, 5, 7}, gen, opts), w = at::randn({11, 7}, gen, opts),
                   up = at::randn({3, 5, 11}, gen, opts);
  // A weight with a gradient tensor attached (as the model's) and one without.
  for (bool attached : {false, true}) {
    at::Tensor outs[2], gx[2], gw[2];
    for (int i = 0; i < 2; ++i) {
      const auto dtype = i == 0 ? at::kDouble : at::kFloat;
      at::Tensor xi = x.to(dtype).detach().requires_grad_();
      at::Tensor wi = w.to(dtype).detach().requires_grad_();
      if (attached) wi.mutable_grad() = at::full_like(wi, 0.5).detach();
      outs[i] = projection(xi, wi);
      (outs[i] * up.to(dtype)).sum().backward();
      gx[i] = xi.grad();
      gw[i] = wi.grad();
    }
    EXPECT_LT(relative_max_error(outs[1], outs[0]), 1e-6);
    EXPECT_LT(relative_max_error(gx[1], gx[0]), 1e-6);
    EXPECT_LT(relative_max_error(gw[1], gw[0]), 1e-6) << "attached " << attached;
  }
}

class ModelVsReference : public ::testing::Test {
 protected:
  ModelVsReference() : model_(test_config(), at::kDouble) { model_.init_weights(11); }
  // An fp32 model holding this double model's weights.
  LlamaModel float_copy() {
    LlamaModel f32(test_config(), at::kFloat);
    f32.flat().copy_(model_.flat());
    return f32;
  }
  // Inputs and shifted targets of two full-length random sequences.
  static std::pair<at::Tensor, at::Tensor> batch(std::uint64_t seed) {
    const auto m = test_config();
    const at::Tensor tokens = random_tokens(2, m.seq_len + 1, m.vocab, seed);
    return {tokens.narrow(1, 0, m.seq_len), tokens.narrow(1, 1, m.seq_len)};
  }
  LlamaModel model_;
};

TEST_F(ModelVsReference, ForwardLogitsAndLossMatchInDouble) {
  const auto m = test_config();
  const at::Tensor tokens = random_tokens(2, m.seq_len + 1, m.vocab, 3);
  const at::Tensor input = tokens.narrow(1, 0, m.seq_len), target = tokens.narrow(1, 1, m.seq_len);
  Reference ref(m, to_vec(model_.flat()));
  const at::Tensor logits = model_.forward(input);
  const auto rows = to_rows(input);
  double max_err = 0, max_abs = 0;
  for (int b = 0; b < 2; ++b) {
    const auto want = ref.forward(rows[b]);
    for (int t = 0; t < m.seq_len; ++t) {
      const Vec got = to_vec(logits[b][t]);
      for (int i = 0; i < m.vocab; ++i) {
        max_err = std::max(max_err, std::abs(got[i] - want[t][i]));
        max_abs = std::max(max_abs, std::abs(want[t][i]));
      }
    }
  }
  EXPECT_LT(max_err, 1e-12);
  EXPECT_GT(max_abs, 0.1);  // the comparison is not between two near-zero tensors
  const auto loss = lm_loss(logits, target, 2e-4);
  EXPECT_NEAR(loss.total.item<double>(), ref.loss(rows, to_rows(target), 2e-4), 1e-12);
  EXPECT_NEAR(loss.cross_entropy.item<double>(), ref.loss(rows, to_rows(target), 0.0), 1e-12);
}

TEST_F(ModelVsReference, BackwardMatchesFiniteDifferencesOfTheReference) {
  const auto m = test_config();
  const double z_weight = 1e-2;
  const at::Tensor tokens = random_tokens(2, 9, m.vocab, 5);
  const at::Tensor input = tokens.narrow(1, 0, 8), target = tokens.narrow(1, 1, 8);
  model_.zero_grad();
  lm_loss(model_.forward(input), target, z_weight).total.backward();
  const Vec grad = to_vec(model_.flat_grad());
  Reference ref(m, to_vec(model_.flat()));
  const auto in_rows = to_rows(input), tg_rows = to_rows(target);
  // Three elements of every parameter tensor: first, middle, last.
  int checked = 0;
  for (const auto& p : parameter_layout(m)) {
    for (std::uint64_t j : {std::uint64_t{0}, p.numel / 2, p.numel - 1}) {
      const std::uint64_t idx = p.offset + j;
      const double h = 1e-5, w0 = ref.weights()[idx];
      ref.weights()[idx] = w0 + h;
      const double up = ref.loss(in_rows, tg_rows, z_weight);
      ref.weights()[idx] = w0 - h;
      const double down = ref.loss(in_rows, tg_rows, z_weight);
      ref.weights()[idx] = w0;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[idx], fd, 1e-7 + 1e-5 * std::abs(fd)) << p.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(parameter_layout(m).size()));
  // Embedding rows of tokens absent from the input get no gradient.
  EXPECT_GT(at::count_nonzero(model_.flat_grad()).item<int64_t>(), 0);
}

TEST_F(ModelVsReference, Float32AndBf16AutocastStayCloseToTheReference) {
  const auto m = test_config();
  LlamaModel f32 = float_copy();
  const auto [input, target] = batch(9);
  Reference ref(m, to_vec(model_.flat()));
  const double want = ref.loss(to_rows(input), to_rows(target), 0.0);
  const double got32 = lm_loss(f32.forward(input), target, 0.0).total.item<double>();
  EXPECT_NEAR(got32, want, 1e-5 * want);
  at::Tensor logits16;
  {
    compat::CpuAutocastBf16 autocast(true);
    logits16 = f32.forward(input);
  }
  const double got16 = lm_loss(logits16, target, 0.0).total.item<double>();
  EXPECT_NE(got16, got32);           // autocast really changed the arithmetic
  EXPECT_NEAR(got16, want, 0.02 * want);
}

TEST_F(ModelVsReference, Float32GradientsMatchTheDoubleModel) {
  LlamaModel f32 = float_copy();
  const auto [input, target] = batch(6);
  for (LlamaModel* model : {&model_, &f32}) {
    model->zero_grad();
    lm_loss(model->forward(input), target, 1e-2).total.backward();
  }
  for (const auto& p : parameter_layout(test_config())) {
    const auto off = static_cast<std::int64_t>(p.offset), n = static_cast<std::int64_t>(p.numel);
    const at::Tensor want = model_.flat_grad().narrow(0, off, n);
    ASSERT_GT(want.abs().max().item<double>(), 0.0) << p.name;
    EXPECT_LT(relative_max_error(f32.flat_grad().narrow(0, off, n), want), 1e-4) << p.name;
  }
}

TEST(LlamaModel, InitIsDeterministicAndGradientsAreViewsOfTheFlatBuffer) {
  const auto m = test_config();
  LlamaModel a(m), b(m), c(m);
  a.init_weights(1);
  b.init_weights(1);
  c.init_weights(2);
  EXPECT_TRUE(at::equal(a.flat(), b.flat()));
  EXPECT_FALSE(at::equal(a.flat(), c.flat()));
  const float* base = a.flat_grad().data_ptr<float>();
  const at::Tensor tokens = random_tokens(1, 5, m.vocab, 1);
  lm_loss(a.forward(tokens.narrow(1, 0, 4)), tokens.narrow(1, 1, 4), 0).total.backward();
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    const auto& p = a.parameters()[i];
    EXPECT_EQ(p.data_ptr<float>(), a.flat().data_ptr<float>() + a.layout()[i].offset);
    EXPECT_EQ(p.grad().data_ptr<float>(), base + a.layout()[i].offset) << a.layout()[i].name;
  }
  EXPECT_GT(a.flat_grad().abs().sum().item<double>(), 0.0);
}

TEST(AdamW, MatchesTheUpdateRuleWrittenOut) {
  OptimConfig c;
  c.lr = 0.01;
  c.weight_decay = 0.1;
  c.grad_clip = 0.5;
  const int n = 5;
  at::Tensor p = at::arange(1.0, 1.0 + n, at::TensorOptions().dtype(at::kDouble));
  at::Tensor g = at::zeros_like(p);
  FlatAdamW opt(c, p, g);
  Vec rp = to_vec(p), m(n, 0.0), v(n, 0.0);
  for (int step = 1; step <= 4; ++step) {
    Vec rg(n);
    for (int i = 0; i < n; ++i) rg[i] = std::sin(step * 1.7 + i) * (i + 1);
    g.copy_(at::tensor(rg, at::TensorOptions().dtype(at::kDouble)));
    double norm = 0;
    for (double x : rg) norm += x * x;
    norm = std::sqrt(norm);
    EXPECT_NEAR(opt.clip_gradients(), norm, 1e-12);
    const double coef = std::min(1.0, c.grad_clip / (norm + 1e-6));
    const double lr = c.lr * step;  // any lr works; vary it
    opt.step(lr);
    for (int i = 0; i < n; ++i) {
      const double gi = rg[i] * coef;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.95 * v[i] + 0.05 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      rp[i] = rp[i] * (1 - lr * c.weight_decay) - lr * mh / (std::sqrt(vh) + c.eps);
    }
    const Vec got = to_vec(p);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], rp[i], 1e-12) << "step " << step;
  }
  EXPECT_EQ(opt.step_count(), 4);
}

TEST(Schedule, WarmupStableSqrtDecay) {
  OptimConfig c;
  c.lr = 1.0;
  c.warmup_steps = 4;
  c.decay_start_step = 10;
  c.total_steps = 14;
  EXPECT_EQ(scheduled_lr(c, 0), 0.25);
  EXPECT_EQ(scheduled_lr(c, 3), 1.0);
  EXPECT_EQ(scheduled_lr(c, 9), 1.0);
  EXPECT_EQ(scheduled_lr(c, 10), 1.0);
  EXPECT_EQ(scheduled_lr(c, 11), 1.0 - std::sqrt(0.25));  // 0.5, exact
  EXPECT_EQ(scheduled_lr(c, 14), 0.0);
  EXPECT_EQ(scheduled_lr(c, 20), 0.0);
  c.decay_start_step = -1;
  EXPECT_EQ(scheduled_lr(c, 1000), 1.0);
}

}  // namespace
}  // namespace meridian::trainer
