// Unit-scaled operations as custom autograd functions (src/engine/unit/scaled_ops.h).
#include "engine/unit/scaled_ops.h"

#include <cmath>

namespace scaleinv::unit {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// `t` in the dtype of the incoming gradient: under bf16 autocast (CUDA) the forward's product ran
// in bf16, so its gradient arrives in bf16 while the saved inputs (a parameter, a softmax output)
// stay fp32, and a matmul of the two throws. The backward products then run in bf16 as autocast's
// own would; autograd casts each returned gradient to its input's dtype. Without autocast every
// dtype is the same and `t` comes back as it is (fp32 results unchanged, bit for bit).
torch::Tensor like_grad(const torch::Tensor& t, const torch::Tensor& g) {
  return t.scalar_type() == g.scalar_type() ? t : t.to(g.scalar_type());
}

// x [..., in] times W^T: W [out, in] (plain linear) or W [E, out, in] with x [E, ..., in] (per member).
torch::Tensor linear_nobias(const torch::Tensor& x, const torch::Tensor& w) {
  if (w.dim() == 2) return torch::linear(x, w);
  TORCH_CHECK(w.dim() == 3 && x.size(0) == w.size(0), "scaled_linear: W [E, out, in] needs x [E, ..., in]");
  const int64_t E = w.size(0), in = w.size(2), out = w.size(1);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  return torch::bmm(x.reshape({E, -1, in}), w.transpose(1, 2)).reshape(shape);
}

struct ScaledLinearFn : public torch::autograd::Function<ScaledLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w, double fwd,
                               double bwd_x, double bwd_w, const torch::Tensor& gw) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["bwd_x"] = bwd_x;
    ctx->saved_data["bwd_w"] = bwd_w;
    ctx->saved_data["has_gw"] = gw.numel() > 0;
    if (gw.numel() > 0) ctx->saved_data["gw"] = gw;
    torch::Tensor y = linear_nobias(x, w);
    return fwd == 1.0 ? y : y * fwd;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor g = grads[0];
    const torch::Tensor x = like_grad(saved[0], g), w = like_grad(saved[1], g);
    const double bwd_x = ctx->saved_data["bwd_x"].toDouble(), bwd_w = ctx->saved_data["bwd_w"].toDouble();
    torch::Tensor gx, gwt;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor gi = g;
      if (ctx->saved_data["has_gw"].toBool()) gi = like_grad(g * ctx->saved_data["gw"].toTensor(), g);
      if (w.dim() == 2) {
        gx = torch::matmul(gi, w);
      } else {
        const int64_t E = w.size(0), out = w.size(1);
        gx = torch::bmm(gi.reshape({E, -1, out}), w).reshape(x.sizes());
      }
      if (bwd_x != 1.0) gx = gx * bwd_x;
    }
    if (ctx->needs_input_grad(1)) {
      const int64_t in = w.size(-1), out = w.size(-2);
      if (w.dim() == 2) {
        gwt = torch::mm(g.reshape({-1, out}).t(), x.reshape({-1, in}));
      } else {
        const int64_t E = w.size(0);
        gwt = torch::bmm(g.reshape({E, -1, out}).transpose(1, 2), x.reshape({E, -1, in}));
      }
      if (bwd_w != 1.0) gwt = gwt * bwd_w;
    }
    return {gx, gwt, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ScaledMatmulFn : public torch::autograd::Function<ScaledMatmulFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b, double fwd,
                               double bwd_a, double bwd_b) {
    TORCH_CHECK(a.dim() == b.dim() && a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2),
                "scaled_matmul: a and b need equal batch dimensions");
    ctx->save_for_backward({a, b});
    ctx->saved_data["bwd_a"] = bwd_a;
    ctx->saved_data["bwd_b"] = bwd_b;
    torch::Tensor c = torch::matmul(a, b);
    return fwd == 1.0 ? c : c * fwd;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& g = grads[0];
    const torch::Tensor a = like_grad(saved[0], g), b = like_grad(saved[1], g);
    torch::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = torch::matmul(g, b.transpose(-2, -1)) * ctx->saved_data["bwd_a"].toDouble();
    if (ctx->needs_input_grad(1)) gb = torch::matmul(a.transpose(-2, -1), g) * ctx->saved_data["bwd_b"].toDouble();
    return {ga, gb, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ScaleGradFn : public torch::autograd::Function<ScaleGradFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double s) {
    ctx->saved_data["s"] = s;
    return x.clone();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {grads[0] * ctx->saved_data["s"].toDouble(), torch::Tensor()};
  }
};

struct ScaledActFn : public torch::autograd::Function<ScaledActFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kind, double fwd, double bwd) {
    ctx->save_for_backward({x});
    ctx->saved_data["kind"] = kind;
    ctx->saved_data["bwd"] = bwd;
    torch::Tensor y = kind == static_cast<int64_t>(UnitAct::Relu) ? torch::relu(x) : torch::gelu(x);
    return y * fwd;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const double bwd = ctx->saved_data["bwd"].toDouble();
    torch::Tensor g = grads[0];
    torch::Tensor gx = ctx->saved_data["kind"].toInt() == static_cast<int64_t>(UnitAct::Relu)
                           ? g * (x > 0).to(g.scalar_type())
                           : torch::gelu_backward(g, x);
    return {gx * bwd, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ResidualAddFn : public torch::autograd::Function<ResidualAddFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& skip, const torch::Tensor& branch, double a,
                               double b, double a_bwd, double b_bwd) {
    ctx->saved_data["a_bwd"] = a_bwd;
    ctx->saved_data["b_bwd"] = b_bwd;
    return skip * a + branch * b;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const torch::Tensor& g = grads[0];
    return {g * ctx->saved_data["a_bwd"].toDouble(), g * ctx->saved_data["b_bwd"].toDouble(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ScaledCrossEntropyFn : public torch::autograd::Function<ScaledCrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               double bwd) {
    ctx->save_for_backward({logits, targets});
    ctx->saved_data["bwd"] = bwd;
    return torch::nn::functional::cross_entropy(logits, targets);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1];
    // d mean CE / d logits = (softmax - onehot) / N
    torch::Tensor p = torch::softmax(logits, -1);
    torch::Tensor t = targets.unsqueeze(1);
    p.scatter_(1, t, p.gather(1, t) - 1.0);
    const double n = static_cast<double>(std::max<int64_t>(1, logits.size(0)));
    torch::Tensor gl = p * (grads[0] * (ctx->saved_data["bwd"].toDouble() / n));
    return {gl, torch::Tensor(), torch::Tensor()};
  }
};

// E[f(z)^2]^(1/2), z ~ N(0, 1): composite Simpson rule on [-12, 12] (the tails beyond are < 1e-30).
template <class F>
double normal_rms(F f) {
  const int n = 24000;  // even
  const double lo = -12, hi = 12, h = (hi - lo) / n;
  double s = 0;
  for (int i = 0; i <= n; ++i) {
    const double z = lo + i * h;
    const double w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
    const double v = f(z);
    s += w * v * v * std::exp(-0.5 * z * z);
  }
  return std::sqrt(s * h / 3.0 / std::sqrt(2.0 * M_PI));
}

}  // namespace

torch::Tensor scaled_linear(const torch::Tensor& x, const torch::Tensor& w, double fwd, double bwd_x, double bwd_w,
                            const torch::Tensor& grad_out_weights) {
  // (autograd needs every tensor argument defined: an empty tensor stands for "no re-weighting")
  return ScaledLinearFn::apply(x, w, fwd, bwd_x, bwd_w,
                               grad_out_weights.defined() ? grad_out_weights : torch::empty({0}, x.options()));
}

torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double fwd, double bwd_a, double bwd_b) {
  return ScaledMatmulFn::apply(a, b, fwd, bwd_a, bwd_b);
}

torch::Tensor scale_grad(const torch::Tensor& x, double s) {
  if (s == 1.0) return x;
  return ScaleGradFn::apply(x, s);
}

ActScales unit_act_scales(UnitAct a) {
  if (a == UnitAct::Relu) return {std::sqrt(2.0), std::sqrt(2.0)};  // E relu(z)^2 = E relu'(z)^2 = 1/2
  static const ActScales gelu = [] {
    auto Phi = [](double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); };
    auto phi = [](double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); };
    ActScales s;
    s.fwd = 1.0 / normal_rms([&](double z) { return z * Phi(z); });             // RMS 0.65209
    s.bwd = 1.0 / normal_rms([&](double z) { return Phi(z) + z * phi(z); });    // RMS 0.67517
    return s;
  }();
  return gelu;
}

torch::Tensor scaled_activation(UnitAct a, const torch::Tensor& x, double fwd, double bwd) {
  return ScaledActFn::apply(x, static_cast<int64_t>(a), fwd, bwd);
}

torch::Tensor residual_add(const torch::Tensor& skip, const torch::Tensor& branch, double a, double b, double a_bwd,
                           double b_bwd) {
  return ResidualAddFn::apply(skip, branch, a, b, a_bwd, b_bwd);
}

ResidualRule residual_rule(int l, double beta, double branch_ratio, bool unit_backward) {
  ResidualRule r;
  const double b2 = beta * beta;
  r.tau = b2 / (1.0 + l * b2);
  r.a = std::sqrt(1.0 - r.tau);
  r.b = std::sqrt(r.tau);
  if (!unit_backward) {  // the true gradient of a x + b f
    r.skip_bwd = r.a;
    r.branch_bwd = r.b;
    r.split_bwd = 1.0;
    return r;
  }
  const double rho = r.b / (r.a * branch_ratio);
  const double n = 1.0 / std::sqrt(1.0 + rho * rho);
  r.skip_bwd = n;
  r.branch_bwd = 1.0;
  r.split_bwd = n * rho;
  return r;
}

torch::Tensor scaled_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double bwd) {
  return ScaledCrossEntropyFn::apply(logits, targets, bwd);
}

double attention_avg_correction(int64_t T, bool causal) {
  if (T <= 0) return 1.0;
  if (!causal) return std::sqrt(static_cast<double>(T));
  double h = 0;
  for (int64_t n = 1; n <= T; ++n) h += 1.0 / static_cast<double>(n);
  return std::sqrt(static_cast<double>(T) / h);
}

double attention_score_grad_scale(int64_t T, bool causal, double logit_scale, int64_t d_head, double c) {
  double a = 0;
  if (causal) {
    for (int64_t n = 1; n <= T; ++n) a += static_cast<double>(n - 1) / static_cast<double>(n * n);
    a /= static_cast<double>(std::max<int64_t>(T, 1));
  } else {
    a = static_cast<double>(T - 1) / static_cast<double>(T * T);
  }
  const double v = logit_scale * logit_scale * c * c * static_cast<double>(d_head) * a;
  return v > 0 ? 1.0 / std::sqrt(v) : 1.0;
}

}  // namespace scaleinv::unit
