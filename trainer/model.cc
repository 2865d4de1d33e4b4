// The Llama-style decoder's forward pass, its flat parameter storage, and its fast paths (fp32
// GEMMs and attention on oneDNN, single-pass RMSNorm and RoPE as autograd Functions). Not the
// training loop (trainer/torch_worker.cc) and not the optimizer (trainer/adamw.cc).
#include "trainer/model.h"

#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not reached through ATen.h in LibTorch 2.11)
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>

#if MERIDIAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include "engine/core/error.h"
#include "trainer/torch_compat.h"

namespace meridian::trainer {

namespace {

// ---- fp32 GEMMs through oneDNN ----
// Debian's OpenBLAS 0.3.21 runs its Haswell (AVX2) kernels on AVX-512 CPUs it does not know
// (Zen 4/5): about half of what oneDNN's JIT sgemm reaches on the same core. Outside autocast,
// fp32 projections and attention therefore call dnnl_sgemm for their forward and backward
// GEMMs (same products, other summation order); other dtypes and builds keep ATen's ops.

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if MERIDIAN_HAVE_DNNL

bool use_onednn(const at::Tensor& x) {
  // oneDNN sizes its OpenMP team by this thread's setting, which ATen copies from
  // at::set_num_threads lazily, per thread, before its first parallel op: do it here as well
  // (a TorchWorker may train in a thread other than the one that created it).
  at::internal::lazy_init_num_threads();
  return x.scalar_type() == at::kFloat && x.device().is_cpu() && !compat::cpu_autocast_enabled();
}

// Row-major C[M, N] = alpha * op(A) op(B) + beta * C, op = transpose for 'T'.
void sgemm(char ta, char tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta,
           float* C, std::int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  MERIDIAN_CHECK_EQ(static_cast<int>(status), static_cast<int>(dnnl_success));
}

// y = x w^T over the last dimension of x. A weight that is a leaf with a contiguous gradient
// tensor already attached (the model's views into flat_grad) gets its gradient accumulated
// there by the GEMM itself (beta = 1), as AccumulateGrad would, without a temporary.
struct OnednnLinear : torch::autograd::Function<OnednnLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in) {
    const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const std::int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
    MERIDIAN_CHECK_EQ(x.size(-1), in);
    auto sizes = x.sizes().vec();
    sizes.back() = out;
    at::Tensor y = at::empty(sizes, x.options());
    sgemm('N', 'T', rows, out, in, 1.0f, x.data_ptr<float>(), in, w.data_ptr<float>(), in, 0.0f,
          y.data_ptr<float>(), out);
    ctx->save_for_backward({x, w});
    const at::Tensor& g = w_in.grad();
    if (w_in.is_leaf() && g.defined() && g.is_contiguous() && g.sizes() == w.sizes() &&
        g.scalar_type() == at::kFloat)
      ctx->saved_data["grad_into"] = g;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor dy = grads[0].contiguous();
    const std::int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty(x.sizes(), x.options());
      sgemm('N', 'N', rows, in, out, 1.0f, dy.data_ptr<float>(), out, w.data_ptr<float>(), in,
            0.0f, dx.data_ptr<float>(), in);
    }
    if (ctx->needs_input_grad(1)) {
      const auto into = ctx->saved_data.find("grad_into");
      const bool accumulate = into != ctx->saved_data.end() && !at::GradMode::is_enabled();
      at::Tensor target = accumulate ? into->second.toTensor() : at::empty(w.sizes(), w.options());
      sgemm('T', 'N', out, in, rows, 1.0f, dy.data_ptr<float>(), out, x.data_ptr<float>(), in,
            accumulate ? 1.0f : 0.0f, target.data_ptr<float>(), in);
      if (!accumulate) dw = target;  // else: already in the gradient, nothing to accumulate
    }
    return {dx, dw};
  }
};

// Causal grouped-query attention on [B, T, heads, d] tensors without copies: each (batch, head)
// GEMM reads q, k, v and writes the output in place through leading dimensions, and a query head
// reads its KV head directly (no repeated K/V). Rows go in blocks of kRowBlock queries that
// multiply only the keys up to their last position (the blocks above the diagonal are all
// masked: 3/8 of the products skipped at T = 256). Saves the probabilities for the backward.
struct OnednnCausalAttention : torch::autograd::Function<OnednnCausalAttention> {
  static constexpr std::int64_t kRowBlock = 128;

  // Pointers and leading dimensions of one (batch, head) pair.
  struct Head {
    std::int64_t q, kv, tt;  // element offsets into [B, T, H, d], [B, T, KV, d], [B, H, T, T]
  };
  struct Shape {
    std::int64_t B, T, H, KV, d;
    explicit Shape(const at::Tensor& q, const at::Tensor& k)
        : B(q.size(0)), T(q.size(1)), H(q.size(2)), KV(k.size(2)), d(q.size(3)) {}
    float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
    // f(head, first row, rows, keys) for every (batch, head, row block).
    template <typename F>
    void for_blocks(F&& f) const {
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          const Head hd{(b * T * H + h) * d, (b * T * KV + h / (H / KV)) * d, (b * H + h) * T * T};
          for (std::int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
            const std::int64_t rows = std::min(kRowBlock, T - r0);
            f(hd, r0, rows, r0 + rows);
          }
        }
    }
  };

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in) {
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const Shape sh(q, k);
    const std::int64_t T = sh.T, ldq = sh.H * sh.d, ldk = sh.KV * sh.d;
    at::Tensor scores = at::empty({sh.B, sh.H, T, T}, q.options());
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    float* sp = scores.data_ptr<float>();
    sh.for_blocks([&](const Head& x, std::int64_t r0, std::int64_t rows, std::int64_t keys) {
      sgemm('N', 'T', rows, keys, sh.d, sh.scale(), qp + x.q + r0 * ldq, ldq, kp + x.kv, ldk,
            0.0f, sp + x.tt + r0 * T, T);
    });
    // The future (and the blocks never computed) gets probability 0.
    scores.masked_fill_(at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1),
                        -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::_softmax(scores, -1, false);
    scores.reset();
    at::Tensor out = at::empty({sh.B, T, ldq}, q.options());
    const float* pp = probs.data_ptr<float>();
    float* op = out.data_ptr<float>();
    sh.for_blocks([&](const Head& x, std::int64_t r0, std::int64_t rows, std::int64_t keys) {
      sgemm('N', 'N', rows, sh.d, keys, 1.0f, pp + x.tt + r0 * T, T, vp + x.kv, ldk, 0.0f,
            op + x.q + r0 * ldq, ldq);
    });
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["probs"] = probs;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const at::Tensor probs = ctx->saved_data["probs"].toTensor();
    const at::Tensor dout = grads[0].contiguous();
    const Shape sh(q, k);
    const std::int64_t T = sh.T, ldq = sh.H * sh.d, ldk = sh.KV * sh.d;
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    const float *pp = probs.data_ptr<float>(), *dop = dout.data_ptr<float>();
    // dP = dO V^T (zero where never computed: P is 0 there), then the softmax backward
    // P * (dP - rowsum(dP * P)).
    at::Tensor dprobs = at::zeros({sh.B, sh.H, T, T}, q.options());
    float* dpp = dprobs.data_ptr<float>();
    sh.for_blocks([&](const Head& x, std::int64_t r0, std::int64_t rows, std::int64_t keys) {
      sgemm('N', 'T', rows, keys, sh.d, 1.0f, dop + x.q + r0 * ldq, ldq, vp + x.kv, ldk, 0.0f,
            dpp + x.tt + r0 * T, T);
    });
    const at::Tensor dscores = at::_softmax_backward_data(dprobs, probs, -1, at::kFloat);
    dprobs.reset();
    const float* dsp = dscores.data_ptr<float>();
    at::Tensor dq = at::empty_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
    float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
    const float scale = sh.scale();
    sh.for_blocks([&](const Head& x, std::int64_t r0, std::int64_t rows, std::int64_t keys) {
      const float* ds = dsp + x.tt + r0 * T;
      sgemm('N', 'N', rows, sh.d, keys, scale, ds, T, kp + x.kv, ldk, 0.0f, dqp + x.q + r0 * ldq,
            ldq);
      // Query heads of one group (and row blocks) add into their KV head's gradient.
      sgemm('T', 'N', keys, sh.d, rows, scale, ds, T, qp + x.q + r0 * ldq, ldq, 1.0f, dkp + x.kv,
            ldk);
      sgemm('T', 'N', keys, sh.d, rows, 1.0f, pp + x.tt + r0 * T, T, dop + x.q + r0 * ldq, ldq,
            1.0f, dvp + x.kv, ldk);
    });
    return {dq, dk, dv};
  }
};
#endif

// ---- RMSNorm and RoPE as single loops (fp32 and fp64) ----
// The ATen compositions take 6 elementwise passes forward and about 10 backward; these take one
// pass each way over the activations, with the same formulas.

// sum a[i] * b[i] with eight interleaved partial sums (vectorisable without reassociation).
template <typename T>
T row_dot(const T* a, const T* b, std::int64_t n) {
  T acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  T sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (T partial : acc) sum += partial;
  return sum;
}

// y = x * r * w per row, r = 1 / sqrt(mean(x^2) + eps). Backward:
// dx = r * (dy * w) - x * r^3 / d * sum(dy * w * x), dw = sum over rows of dy * x * r.
struct FusedRmsNorm : torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in,
                            double eps) {
    const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const std::int64_t d = x.size(-1), rows = x.numel() / d;
    at::Tensor y = at::empty_like(x), inv = at::empty({rows}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "FusedRmsNorm", [&] {
      const scalar_t *xp = x.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
      scalar_t *yp = y.data_ptr<scalar_t>(), *ip = inv.data_ptr<scalar_t>();
      for (std::int64_t r = 0; r < rows; ++r) {
        const scalar_t* xr = xp + r * d;
        const double ss = row_dot(xr, xr, d);
        const auto rr = static_cast<scalar_t>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
        ip[r] = rr;
        scalar_t* yr = yp + r * d;
        for (std::int64_t i = 0; i < d; ++i) yr[i] = xr[i] * rr * wp[i];
      }
    });
    ctx->save_for_backward({x, w, inv});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &inv = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const std::int64_t d = x.size(-1), rows = x.numel() / d;
    at::Tensor dx = at::empty_like(x);
    std::vector<double> dw_acc(static_cast<std::size_t>(d), 0.0);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "FusedRmsNormBackward", [&] {
      const scalar_t *xp = x.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
      const scalar_t *ip = inv.data_ptr<scalar_t>(), *dyp = dy.data_ptr<scalar_t>();
      scalar_t* dxp = dx.data_ptr<scalar_t>();
      for (std::int64_t r = 0; r < rows; ++r) {
        const scalar_t *xr = xp + r * d, *dyr = dyp + r * d;
        const scalar_t rr = ip[r];
        scalar_t* dxr = dxp + r * d;
        for (std::int64_t i = 0; i < d; ++i) dxr[i] = dyr[i] * wp[i];
        const double dot = row_dot(dxr, xr, d);
        const auto k = static_cast<scalar_t>(static_cast<double>(rr) * rr * rr * dot /
                                             static_cast<double>(d));
        for (std::int64_t i = 0; i < d; ++i) {
          dxr[i] = rr * dxr[i] - xr[i] * k;
          dw_acc[static_cast<std::size_t>(i)] += static_cast<double>(dyr[i] * xr[i] * rr);
        }
      }
    });
    at::Tensor dw = at::tensor(dw_acc, at::TensorOptions().dtype(at::kDouble)).to(w.scalar_type());
    return {dx, dw.view(w.sizes()), at::Tensor()};
  }
};

// Rotation of interleaved pairs by the angle of each position; its backward is the rotation by
// the opposite angle.
struct FusedRope : torch::autograd::Function<FusedRope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], true), at::Tensor(), at::Tensor()};
  }
  // x: [B, T, H, d]; cos, sin: [>= T, d / 2] contiguous, x's dtype.
  static at::Tensor rotate(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin,
                           bool inverse) {
    const at::Tensor x = x_in.contiguous();
    const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), half = x.size(3) / 2;
    at::Tensor y = at::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "FusedRope", [&] {
      const scalar_t *xp = x.data_ptr<scalar_t>(), *cp = cos.data_ptr<scalar_t>(),
                     *sp = sin.data_ptr<scalar_t>();
      scalar_t* yp = y.data_ptr<scalar_t>();
      const scalar_t sign = inverse ? -1 : 1;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < T; ++t) {
          const scalar_t *c = cp + t * half, *s = sp + t * half;
          for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t o = ((b * T + t) * H + h) * 2 * half;
            for (std::int64_t i = 0; i < half; ++i) {
              const scalar_t x0 = xp[o + 2 * i], x1 = xp[o + 2 * i + 1], si = sign * s[i];
              yp[o + 2 * i] = x0 * c[i] - x1 * si;
              yp[o + 2 * i + 1] = x0 * si + x1 * c[i];
            }
          }
        }
    });
    return y;
  }
};

bool fused_dtype(const at::Tensor& x) {
  return (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && x.device().is_cpu();
}

}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config, at::ScalarType dtype)
    : config_(config), layout_(parameter_layout(config)) {
  const auto n = static_cast<std::int64_t>(parameter_count(config_));
  flat_ = at::zeros({n}, at::TensorOptions().dtype(dtype));
  flat_grad_ = at::zeros({n}, at::TensorOptions().dtype(dtype));
  params_.reserve(layout_.size());
  for (const auto& spec : layout_) {
    const auto off = static_cast<std::int64_t>(spec.offset);
    const auto len = static_cast<std::int64_t>(spec.numel);
    at::Tensor p = flat_.narrow(0, off, len).view(spec.shape);
    p.set_requires_grad(true);
    // Autograd accumulates in place into an existing gradient (AccumulateGrad, no grad mode),
    // so every backward lands in flat_grad_ without a copy.
    p.mutable_grad() = flat_grad_.narrow(0, off, len).view(spec.shape);
    params_.push_back(p);
  }
  std::tie(rope_cos_, rope_sin_) =
      rope_tables(config_.seq_len, config_.head_dim(), config_.rope_theta, dtype);
}

void LlamaModel::init_weights(std::uint64_t seed) {
  at::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const double residual_std = config_.init_std / std::sqrt(2.0 * config_.layers);
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const auto& name = layout_[i].name;
    at::Tensor p = params_[i];
    if (name.ends_with("norm.weight")) {
      p.fill_(1.0);
    } else if (name.ends_with("wo.weight") || name.ends_with("w2.weight")) {
      p.normal_(0.0, residual_std, gen);
    } else {
      p.normal_(0.0, config_.init_std, gen);
    }
  }
}

void LlamaModel::zero_grad() { flat_grad_.zero_(); }

at::Tensor LlamaModel::forward(const at::Tensor& tokens) const {
  MERIDIAN_CHECK_EQ(tokens.dim(), 2);
  const std::int64_t B = tokens.size(0), T = tokens.size(1);
  MERIDIAN_CHECK_LE(T, config_.seq_len);
  const std::int64_t H = config_.heads, KV = config_.kv_heads, hd = config_.head_dim();
  const double eps = config_.norm_eps;
  const at::Tensor cos = rope_cos_.narrow(0, 0, T), sin = rope_sin_.narrow(0, 0, T);

  std::size_t i = 0;
  auto next = [&]() -> const at::Tensor& { return params_[i++]; };
  at::Tensor h = at::embedding(next(), tokens);  // [B, T, d]
  for (int l = 0; l < config_.layers; ++l) {
    const at::Tensor &attn_norm = next(), &wq = next(), &wk = next(), &wv = next(),
                     &wo = next(), &ffn_norm = next(), &w1 = next(), &w2 = next(),
                     &w3 = next();
    at::Tensor x = rms_norm(h, attn_norm, eps);
    at::Tensor q = apply_rope(projection(x, wq).view({B, T, H, hd}), cos, sin);
    at::Tensor k = apply_rope(projection(x, wk).view({B, T, KV, hd}), cos, sin);
    at::Tensor v = projection(x, wv).view({B, T, KV, hd});
    h = h + projection(grouped_causal_attention(q, k, v), wo);
    x = rms_norm(h, ffn_norm, eps);
    h = h + projection(at::silu(projection(x, w1)) * projection(x, w3), w2);
  }
  const at::Tensor &norm = next(), &output = next();
  return projection(rms_norm(h, norm, eps), output);
}

at::Tensor projection(const at::Tensor& x, const at::Tensor& w) {
#if MERIDIAN_HAVE_DNNL
  if (use_onednn(x) && w.scalar_type() == at::kFloat) return OnednnLinear::apply(x, w);
#endif
  return at::linear(x, w);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (fused_dtype(x) && weight.scalar_type() == x.scalar_type())
    return FusedRmsNorm::apply(x, weight, eps);
  const auto wide = at::promote_types(x.scalar_type(), at::kFloat);
  at::Tensor xf = x.to(wide);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return xf * inv * weight;
}

std::pair<at::Tensor, at::Tensor> rope_tables(int seq_len, int head_dim, double theta,
                                              at::ScalarType dtype) {
  // Angles in double so fp32 and fp64 models see the same rotation up to rounding.
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor i = at::arange(0, head_dim / 2, opts);
  at::Tensor inv_freq = at::pow(theta, -2.0 * i / head_dim);
  at::Tensor t = at::arange(0, seq_len, opts);
  at::Tensor angles = at::outer(t, inv_freq);  // [T, d/2]
  return {at::cos(angles).to(dtype), at::sin(angles).to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), d = x.size(3);
  if (fused_dtype(x) && cos.scalar_type() == x.scalar_type() && cos.is_contiguous() &&
      sin.scalar_type() == x.scalar_type() && sin.is_contiguous())
    return FusedRope::apply(x, cos, sin);
  at::Tensor pairs = x.reshape({B, T, H, d / 2, 2});
  at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, T).view({1, T, 1, d / 2}).to(x.scalar_type());
  at::Tensor s = sin.narrow(0, 0, T).view({1, T, 1, d / 2}).to(x.scalar_type());
  return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).view({B, T, H, d});
}

at::Tensor grouped_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const std::int64_t B = q.size(0), T = q.size(1), H = q.size(2), d = q.size(3);
  const std::int64_t KV = k.size(2), rep = H / KV;
  MERIDIAN_CHECK_EQ(H % KV, 0);
#if MERIDIAN_HAVE_DNNL
  if (use_onednn(q) && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat)
    return OnednnCausalAttention::apply(q, k, v);
#endif
  at::Tensor qh = q.transpose(1, 2);  // [B, H, T, d]
  at::Tensor kh = k.transpose(1, 2);  // [B, KV, T, d]
  at::Tensor vh = v.transpose(1, 2);
  if (rep > 1) {
    kh = kh.unsqueeze(2).expand({B, KV, rep, T, d}).reshape({B, H, T, d});
    vh = vh.unsqueeze(2).expand({B, KV, rep, T, d}).reshape({B, H, T, d});
  }
  // The attention op wants matching dtypes; under autocast q/k/v are all bf16 already.
  at::Tensor o = compat::causal_attention(qh, kh, vh);  // [B, H, T, d]
  return o.transpose(1, 2).reshape({B, T, H * d});
}

LossParts lm_loss(const at::Tensor& logits, const at::Tensor& targets, double z_loss_weight) {
  const std::int64_t V = logits.size(-1);
  const auto wide = at::promote_types(logits.scalar_type(), at::kFloat);
  at::Tensor flat_logits = logits.reshape({-1, V}).to(wide);
  at::Tensor ce = at::cross_entropy_loss(flat_logits, targets.reshape({-1}));
  at::Tensor total = ce;
  if (z_loss_weight > 0) {
    at::Tensor max_logit = std::get<0>(flat_logits.max(-1));
    total = ce + z_loss_weight * max_logit.pow(2).mean();
  }
  return {total, ce};
}

}  // namespace meridian::trainer
