#include "engine/models/layers.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "engine/models/packed_rows.h"
#include "engine/precision/quantize.h"
#include "engine/unit/probe.h"
#include "engine/unit/scaled_ops.h"

namespace scaleinv {

namespace {

// A tensor's shape, with the leading [members] dimension in an ensemble.
std::vector<int64_t> member_shape(const ScaleContext& ctx, std::vector<int64_t> shape) {
  if (ctx.members > 0) shape.insert(shape.begin(), ctx.members);
  return shape;
}

// randn(shape) * std under NoGradGuard. The randn is drawn even when std == 0 so that zero-init
// options leave every other tensor's values unchanged. (Ensemble members are drawn member after
// member; engine/train/ensemble.cpp overwrites them with each member's own single-model init.)
torch::Tensor normal_init(const ScaleContext& ctx, std::vector<int64_t> shape, double std) {
  torch::NoGradGuard no_grad;
  return torch::randn(member_shape(ctx, std::move(shape))) * std;
}

torch::Tensor constant_init(const ScaleContext& ctx, std::vector<int64_t> shape, double value) {
  torch::NoGradGuard no_grad;
  return torch::full(member_shape(ctx, std::move(shape)), value);
}

}  // namespace

// ---- stateless pieces ----------------------------------------------------------------------

Activation parse_activation(const std::string& name) {
  if (name == "linear") return Activation::Linear;
  if (name == "relu") return Activation::Relu;
  if (name == "abs") return Activation::Abs;
  if (name == "tanh") return Activation::Tanh;
  if (name == "gelu") return Activation::Gelu;
  throw UserError("config", "model.activation", fmt::format("unknown activation '{}'", name),
                  "use one of linear, relu, abs, tanh, gelu");
}

torch::Tensor activate(Activation a, const torch::Tensor& x) {
  switch (a) {
    case Activation::Linear: return x;
    case Activation::Relu: return torch::relu(x);
    case Activation::Abs: return torch::abs(x);
    case Activation::Tanh: return torch::tanh(x);
    case Activation::Gelu: return torch::gelu(x);
  }
  return x;
}

torch::Tensor activate(Activation a, const torch::Tensor& x, const UnitScaling& u) {
  if (!u.nonlin && !u.backward) return activate(a, x);
  if (a != Activation::Relu && a != Activation::Gelu) return activate(a, x);
  const unit::UnitAct ua = a == Activation::Relu ? unit::UnitAct::Relu : unit::UnitAct::Gelu;
  const unit::ActScales s = unit::unit_act_scales(ua);
  const double fwd = u.nonlin ? s.fwd : 1.0;
  return unit::scaled_activation(ua, x, fwd, u.backward ? s.bwd : fwd);
}

double activation_grad_ratio(Activation a, const UnitScaling& u) {
  if (!u.backward || (a != Activation::Relu && a != Activation::Gelu)) return 1.0;
  const unit::ActScales s = unit::unit_act_scales(a == Activation::Relu ? unit::UnitAct::Relu : unit::UnitAct::Gelu);
  return s.bwd / (u.nonlin ? s.fwd : 1.0);
}

torch::Tensor unit_sum(const torch::Tensor& a, const torch::Tensor& b, const UnitScaling& u) {
  if (!u.residual) return a + b;
  const double s = 1.0 / std::sqrt(2.0);
  // With unit backward a broadcast operand (position rows shared by the batch) gets its summed
  // gradient scaled back by 1/sqrt(uses).
  const double ua = static_cast<double>(std::max(a.numel(), b.numel())) / static_cast<double>(a.numel());
  const double ub = static_cast<double>(std::max(a.numel(), b.numel())) / static_cast<double>(b.numel());
  return unit::residual_add(a, b, s, s, u.backward ? 1.0 / std::sqrt(ua) : s, u.backward ? 1.0 / std::sqrt(ub) : s);
}

torch::Tensor unit_residual(const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& branch,
                            int l, double beta, double branch_ratio, const UnitScaling& u) {
  unit::ResidualRule r;
  if (u.residual) {
    r = unit::residual_rule(l, beta, branch_ratio, u.backward);
  } else {  // plain x + beta f; with unit backward the split restores the true ratio (1 / K)
    r.a = 1.0;
    r.b = beta;
    r.skip_bwd = 1.0;
    r.branch_bwd = beta;
    r.split_bwd = u.backward ? 1.0 / branch_ratio : 1.0;
  }
  torch::Tensor f = branch(unit::scale_grad(x, r.split_bwd));
  torch::Tensor out = unit::residual_add(x, f, r.a, r.b, r.skip_bwd, r.branch_bwd);
  if (unit::probing()) unit::probe_named(fmt::format("add{}", l), out);
  return out;
}

Placement parse_placement(const std::string& name) {
  if (name == "pre") return Placement::Pre;
  if (name == "post") return Placement::Post;
  if (name == "keel") return Placement::Keel;
  throw UserError("config", "model.block", fmt::format("unknown block placement '{}'", name),
                  "use one of pre, post, keel");
}

torch::Tensor rms_norm(const torch::Tensor& x, double eps) {
  // seed 000 A.1.3: RMSNorm(u) = u / RMS(u), RMS(u) = sqrt(mean u^2).
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& gain, double eps) {
  c10::optional<torch::Tensor> w;
  if (gain.defined()) w = gain;
  return torch::layer_norm(x, {x.size(-1)}, w, c10::nullopt, eps);
}

torch::Tensor mean_subtract(const torch::Tensor& x) { return x - x.mean(-1, /*keepdim=*/true); }

torch::Tensor linear_any(const torch::Tensor& x, const torch::Tensor& w) {
  if (w.dim() == 2) return torch::linear(x, w);
  // Ensemble: w [E, out, in], x [E, ..., in] -> one batched matmul over the members.
  const int64_t E = w.size(0), in = w.size(2);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w.size(1);
  return torch::bmm(x.reshape({E, -1, in}), w.transpose(1, 2)).view(out_shape);
}

torch::Tensor member_view(const torch::Tensor& v, int64_t dims) {
  if (v.dim() < 2) return v;  // one model: broadcasts as is
  // [E, ..., n] -> [E, 1, ..., 1, n] with `dims` dimensions in all.
  std::vector<int64_t> shape(static_cast<size_t>(dims), 1);
  shape.front() = v.size(0);
  shape.back() = v.size(-1);
  return v.view(shape);
}

// ---- init helpers --------------------------------------------------------------------------

double width_fan_in_std(int64_t fan_in, const ScaleContext& ctx) {
  return 1.0 / std::sqrt(static_cast<double>(fan_in) / ctx.m());
}

double init_std(const ParamTag& tag, const ScaleContext& ctx, const Hyper& hp) {
  return tag.base_std * ctx.scale(tag.role, tag.in_block).init * hp.init_scale;
}

double role_multiplier(Role role, bool in_block, const ScaleContext& ctx) {
  return ctx.scale(role, in_block).multiplier;
}

// ---- Dense ---------------------------------------------------------------------------------

Dense::Dense(int64_t in, int64_t out, const DenseOptions& opt, const ScaleContext& ctx, const Hyper& hp) {
  // Unit scaling (seed 003, table.h TensorScale::unit): the op carries sigma_0^u of the base-shape
  // std sigma_0 = opt.base_std(), the init the rest (u = 0: exactly the plain init and multiplier).
  const double carried = ctx.scale(opt.role(), opt.in_block(), opt.base_std()).unit;
  ParamTag tag{opt.role(), opt.in_block(), carried == 1.0 ? opt.base_std() : opt.base_std() / carried};
  const double std = init_std(tag, ctx, hp);
  if (opt.zero_init()) tag.base_std = 0;  // constant (zero) init; the randn is still drawn below
  torch::Tensor w = opt.base_std() > 0 ? normal_init(ctx, {out, in}, opt.zero_init() ? 0.0 : std)
                                       : constant_init(ctx, {out, in}, 0.0);
  weight_ = add_param("weight", w, tag);
  mult_ = role_multiplier(opt.role(), opt.in_block(), ctx) * opt.extra_mult();
  if (carried != 1.0) mult_ *= carried;
  unit_bwd_ = ctx.table.unit.backward;
  bwd_x_ = unit::unit_bwd_x(out);
}

torch::Tensor Dense::forward(const torch::Tensor& x) {
  precision::Scope* ps = precision::active();
  if (ps || unit_bwd_ || unit::probing()) {
    // Unit-scaled op and / or simulated precision (each linear's input, weight and output gradient).
    torch::Tensor xi = x, w = weight_;
    std::string name;
    if (ps) {
      name = ps->name_of(weight_);
      xi = precision::linear_input(x, name);
      w = precision::linear_weight(weight_, name);
    }
    torch::Tensor y;
    if (unit_bwd_) {
      const int64_t members = weight_.dim() == 3 ? weight_.size(0) : 1;
      const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1) / members;
      y = unit::scaled_linear(xi, w, mult_, bwd_x_, unit::unit_bwd_w(rows));
    } else {
      y = mult_ == 1.0 ? linear_any(xi, w) : linear_any(xi, w) * mult_;
    }
    if (ps) y = precision::linear_output(y, name);
    if (unit::probing()) unit::probe_op(weight_, "out", y);
    return y;
  }
  if (mult_ == 1.0) return linear_any(x, weight_);
  // mult * (x W^T): scale whichever of W and the output is smaller (same value, fewer flops).
  const int64_t out = weight_.size(-2);
  const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
  if (weight_.numel() <= rows * out) return linear_any(x, weight_ * mult_);
  return linear_any(x, weight_) * mult_;
}

torch::Tensor Dense::effective_weight(double factor) const {
  const double f = mult_ * factor;
  return f == 1.0 ? weight_ : weight_ * f;
}

// ---- Lookup --------------------------------------------------------------------------------

Lookup::Lookup(int64_t n, int64_t d, double extra_mult, const ScaleContext& ctx, const Hyper& hp) {
  // Lookup embeddings have base std 1 (PyTorch's nn.Embedding default; seed 000 Table 1's b_0
  // then scales it); never in a block.
  ParamTag tag{Role::Embedding, false, 1.0};
  weight_ = add_param("weight", normal_init(ctx, {n, d}, init_std(tag, ctx, hp)), tag);
  mult_ = role_multiplier(Role::Embedding, false, ctx) * extra_mult;
  unit_bwd_ = ctx.table.unit.backward;
}

torch::Tensor Lookup::forward(const torch::Tensor& idx) {
  torch::Tensor e;
  if (weight_.dim() == 2) {
    e = torch::embedding(weight_, idx);
  } else {  // ensemble: member m reads rows m*n + idx of the stacked [E*n, d] table
    const int64_t E = weight_.size(0), n = weight_.size(1);
    std::vector<int64_t> shape(static_cast<size_t>(idx.dim()), 1);
    shape.front() = E;
    torch::Tensor offset = torch::arange(E, idx.options()).mul_(n).view(shape);
    e = torch::embedding(weight_.view({E * n, weight_.size(2)}), idx + offset);
  }
  if (unit_bwd_) {
    // Unit backward: a row's gradient sums its ~lookups/rows uses; scaled back to unit RMS (a cut
    // edge: only this table is upstream).
    const int64_t members = weight_.dim() == 3 ? weight_.size(0) : 1;
    const double uses = static_cast<double>(idx.numel() / members) / static_cast<double>(weight_.size(-2));
    if (uses > 0) e = unit::scale_grad(e, 1.0 / std::sqrt(uses));
  }
  return mult_ == 1.0 ? e : e * mult_;
}

torch::Tensor Lookup::first_rows(int64_t n) {
  torch::Tensor e = weight_.narrow(-2, 0, n);
  if (weight_.dim() == 3) e = e.unsqueeze(1);  // [E, 1, n, d]: broadcasts over the batch
  return mult_ == 1.0 ? e : e * mult_;
}

// ---- NormGain ------------------------------------------------------------------------------

NormGain::NormGain(int64_t d, bool in_block, const ScaleContext& ctx) {
  ParamTag tag{Role::Vector, in_block, 0.0};
  gain_ = add_param("gain", constant_init(ctx, {d}, 1.0), tag);
  mult_ = role_multiplier(Role::Vector, in_block, ctx);
  unit_bwd_ = ctx.table.unit.backward;
}

torch::Tensor NormGain::forward(const torch::Tensor& x) {
  torch::Tensor g = mult_ == 1.0 ? gain_ : gain_ * mult_;
  // rows per gain: x [..., d] with gain [d], or an ensemble's x [E, ..., d] with gain [E, d].
  if (unit_bwd_) g = unit::scale_grad(g, unit::unit_bwd_w(x.numel() / std::max<int64_t>(g.numel(), 1)));
  if (g.dim() == 1) return layer_norm(x, g);
  return layer_norm(x) * member_view(g, x.dim());  // ensemble: per-member gain [E, 1, ..., d]
}

// ---- attention -----------------------------------------------------------------------------

HeadShape head_shape(const ModelConfig& cfg, const ScaleContext& ctx) {
  HeadShape hs;
  const int d = cfg.width;
  if (cfg.n_heads < 0)
    throw UserError("config", "model.n_heads", fmt::format("n_heads must be >= 0, got {}", cfg.n_heads),
                    "use 0 (fixed head_dim) or a positive head count");
  if (cfg.n_heads > 0) {
    if (d % cfg.n_heads != 0)
      throw UserError("config", "model.width",
                      fmt::format("width {} is not divisible by n_heads {}", d, cfg.n_heads),
                      "use a width that is a multiple of model.n_heads");
    hs.n_heads = cfg.n_heads;
    hs.d_head = d / cfg.n_heads;
    hs.base_d_head = static_cast<double>(ctx.table.base_width) / cfg.n_heads;
  } else {
    if (cfg.head_dim <= 0)
      throw UserError("config", "model.head_dim", fmt::format("head_dim must be positive, got {}", cfg.head_dim),
                      "set model.head_dim > 0 or model.n_heads > 0");
    if (d % cfg.head_dim != 0)
      throw UserError("config", "model.width",
                      fmt::format("width {} is not divisible by head_dim {}", d, cfg.head_dim),
                      "use a width that is a multiple of model.head_dim, or set model.n_heads");
    hs.n_heads = d / cfg.head_dim;
    hs.d_head = cfg.head_dim;
    hs.base_d_head = cfg.head_dim;
  }
  return hs;
}

Attention::Attention(int64_t d, const HeadShape& hs, bool causal, bool qk_norm, bool zero_query,
                     const ScaleContext& ctx, const Hyper& hp)
    : hs_(hs), causal_(causal), qk_norm_(qk_norm) {
  const double s = width_fan_in_std(d, ctx);
  auto opt = [&](Role r, bool zero) { return DenseOptions(r).in_block(true).base_std(s).zero_init(zero); };
  q_ = register_module("q", std::make_shared<Dense>(d, d, opt(Role::AttnQ, zero_query), ctx, hp));
  k_ = register_module("k", std::make_shared<Dense>(d, d, opt(Role::AttnK, false), ctx, hp));
  v_ = register_module("v", std::make_shared<Dense>(d, d, opt(Role::AttnV, false), ctx, hp));
  o_ = register_module("o", std::make_shared<Dense>(d, d, opt(Role::AttnO, false), ctx, hp));
  // seed 000 1.3: s = d_H^-1/2 q.k at the base head size, d_head^-p away from it (table.attn_logit).
  scale_ = hp.attn_mult * attn_logit_scale(ctx.table, static_cast<double>(hs.d_head), hs.base_d_head);
  unit_ = ctx.table.unit;
}

double Attention::grad_ratio() const {
  if (!unit_.backward) return 1.0;
  const int64_t d = q_->weight().size(-1);
  return o_->grad_ratio() * unit::unit_bwd_x(d) / q_->multiplier();
}

torch::Tensor Attention::forward_unit(const torch::Tensor& x) {
  // Unit-scaled attention (src/engine/unit/scaled_ops.h): q, k, v from one op (unit init, forward scale the
  // role multiplier); logits s q.k with the matmul's backward scales equal to s; a backward scale
  // sb on the scores making grad_q, grad_k unit at init, undone on the q/k contributions to grad_x
  // (so the update direction is the true gradient's); the attention average times c (nonlin).
  const int64_t T = x.size(-2), d = x.size(-1), B = x.numel() / (T * d);
  const int64_t H = hs_.n_heads, dh = hs_.d_head;
  const bool ub = unit_.backward;
  const double c = unit_.nonlin ? unit::attention_avg_correction(T, causal_) : 1.0;
  const bool same = q_->multiplier() == k_->multiplier() && k_->multiplier() == v_->multiplier();
  torch::Tensor w = same ? torch::cat({q_->weight(), k_->weight(), v_->weight()}, -2)
                         : torch::cat({q_->effective_weight(), k_->effective_weight(), v_->effective_weight()}, -2);
  const double fwd = same ? q_->multiplier() : 1.0;
  torch::Tensor xi = x;
  std::string name;
  precision::Scope* ps = precision::active();
  if (ps) {
    name = ps->name_of(q_->weight());
    name = name.substr(0, name.rfind(".q.")) + ".qkv";
    xi = precision::linear_input(x, name);
    w = precision::linear_weight(w, name);
  }
  const double sb = ub ? unit::attention_score_grad_scale(T, causal_, scale_, dh, c) : 1.0;
  torch::Tensor qkv_flat;
  if (ub) {
    torch::Tensor rw = torch::cat({torch::full({2 * d}, 1.0 / sb, x.options()), torch::ones({d}, x.options())});
    const int64_t members = w.dim() == 3 ? w.size(0) : 1;
    // grad-input 1/sqrt(d), the v part's fan-out: the q/k contributions are re-weighted by 1/sb and
    // vanish at init, so the input's gradient is the v path's.
    qkv_flat = unit::scaled_linear(xi, w, fwd, unit::unit_bwd_x(d), unit::unit_bwd_w(B * T / members), rw);
  } else {
    qkv_flat = fwd == 1.0 ? linear_any(xi, w) : linear_any(xi, w) * fwd;
  }
  if (ps) qkv_flat = precision::linear_output(qkv_flat, name);
  if (unit::probing()) unit::probe_op(q_->weight(), "qkv", qkv_flat);
  std::vector<torch::Tensor> qkv = qkv_flat.view({B, T, 3, H, dh}).unbind(2);
  torch::Tensor q = qkv[0].transpose(1, 2), k = qkv[1].transpose(1, 2), v = qkv[2].transpose(1, 2);
  if (qk_norm_) {
    q = rms_norm(q);
    k = rms_norm(k);
  }
  torch::Tensor scores = ub ? unit::scaled_matmul(q, k.transpose(-2, -1), scale_, scale_, scale_)
                            : torch::matmul(q, k.transpose(-2, -1)) * scale_;
  if (causal_) {
    if (!mask_.defined() || mask_.size(0) != T || mask_.device() != scores.device())
      mask_ = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(scores.device())).triu(1);
    scores = scores.masked_fill(mask_, -std::numeric_limits<double>::infinity());
  }
  if (ub) scores = unit::scale_grad(scores, sb);
  torch::Tensor p = torch::softmax(scores, -1);
  if (unit::probing()) unit::probe_op(q_->weight(), "probs", p);
  torch::Tensor out = ub ? unit::scaled_matmul(p, v, c, c, c) : (c == 1.0 ? torch::matmul(p, v) : torch::matmul(p, v) * c);
  out = out.transpose(1, 2).reshape(x.sizes());
  if (unit::probing()) unit::probe_op(q_->weight(), "avg", out);
  return o_->forward(out);
}

void Attention::pack_weights() {
  if (q_->weight().dim() == 2) pack_rows({q_->weight(), k_->weight(), v_->weight()});
}

bool Attention::packed() const {
  return k_->multiplier() == 1.0 && v_->multiplier() == 1.0 && (!qk_norm_ || q_->multiplier() == 1.0) &&
         rows_adjacent({q_->weight(), k_->weight(), v_->weight()});
}

torch::Tensor Attention::forward(const torch::Tensor& x) {
  if (unit_.any() || precision::active() || unit::probing()) return forward_unit(x);
  // x: [B, T, d], or [E, B, T, d] in an ensemble (the members then fold into the batch).
  const int64_t T = x.size(-2), d = x.size(-1), B = x.numel() / (T * d);
  const int64_t H = hs_.n_heads, dh = hs_.d_head;
  if (packed()) {
    // [W_q; W_k; W_v] read in place (pack_weights). W_q's multiplier m scales q, so the logits by
    // m: it joins the logit scale in the kernel (under QK-norm m is 1, by packed()).
    std::vector<torch::Tensor> qkv = linear_packed(x, {q_->weight(), k_->weight(), v_->weight()})
                                         .view({B, T, 3, H, dh})
                                         .unbind(2);
    torch::Tensor q = qkv[0].transpose(1, 2), k = qkv[1].transpose(1, 2), v = qkv[2].transpose(1, 2);
    if (qk_norm_) {
      q = rms_norm(q);
      k = rms_norm(k);
    }
    const double s = qk_norm_ ? scale_ : scale_ * q_->multiplier();
    torch::Tensor out = compat::attention(q, k, v, causal_, s, &mask_).transpose(1, 2).reshape(x.sizes());
    return o_->forward(out);
  }
  // One matmul for q, k, v. Without QK-norm the logit scale is folded into W_q (the same
  // product, one multiply of a [d, d] matrix instead of one of a [B, H, T, dh] tensor).
  const double q_factor = qk_norm_ ? 1.0 : scale_;
  torch::Tensor w = torch::cat({q_->effective_weight(q_factor), k_->effective_weight(), v_->effective_weight()}, -2);
  // unbind, not qkv[i]: select's backward would zero-fill and copy the whole qkv gradient 3 times.
  std::vector<torch::Tensor> qkv = linear_any(x, w).view({B, T, 3, H, dh}).unbind(2);  // 3 x [B, T, H, dh]
  torch::Tensor q = qkv[0].transpose(1, 2), k = qkv[1].transpose(1, 2), v = qkv[2].transpose(1, 2);  // [B, H, T, dh]
  if (qk_norm_) {  // seed 000 footnote 3: QK-norm, then the logit scale
    q = rms_norm(q) * scale_;
    k = rms_norm(k);
  }
  // The logit scale is already in q (folded into W_q, or applied after QK-norm): scale 1. Fused
  // attention on CUDA where libtorch has it, the explicit path elsewhere (engine/runtime/torch_compat.h).
  torch::Tensor out = compat::attention(q, k, v, causal_, 1.0, &mask_).transpose(1, 2).reshape(x.sizes());
  return o_->forward(out);
}

// ---- MLP -----------------------------------------------------------------------------------

Mlp::Mlp(int64_t d, int64_t ratio, const ScaleContext& ctx, const Hyper& hp) {
  fc_ = register_module("fc", std::make_shared<Dense>(
                                  d, ratio * d, DenseOptions(Role::Hidden).in_block(true).base_std(width_fan_in_std(d, ctx)), ctx, hp));
  proj_ = register_module("proj", std::make_shared<Dense>(ratio * d, d,
                                                          DenseOptions(Role::Hidden).in_block(true).base_std(
                                                              width_fan_in_std(ratio * d, ctx)),
                                                          ctx, hp));
  unit_ = ctx.table.unit;
}

torch::Tensor Mlp::forward(const torch::Tensor& x) {
  if (!unit_.any() && !unit::probing()) return proj_->forward(torch::gelu(fc_->forward(x)));
  torch::Tensor a = activate(Activation::Gelu, fc_->forward(x), unit_);
  if (unit::probing()) unit::probe_op(fc_->weight(), "gelu", a);
  return proj_->forward(a);
}

double Mlp::grad_ratio() const {
  return fc_->grad_ratio() * activation_grad_ratio(Activation::Gelu, unit_) * proj_->grad_ratio();
}

// ---- transformer block ---------------------------------------------------------------------

TransformerBlock::TransformerBlock(int64_t d, const HeadShape& hs, Placement placement, bool causal,
                                   const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp)
    : placement_(placement) {
  // seed 000 eq. (30): branch times k^-rho (k = L/L0); eq. (34): shortcut alpha inside the LN.
  beta_ = hp.branch_mult * branch_multiplier(ctx.table, ctx.k());
  alpha_ = shortcut_multiplier(ctx.table, ctx.depth);
  unit_ = ctx.table.unit;
  const bool has_pre = placement != Placement::Post;
  const bool has_post = placement != Placement::Pre;
  auto norm = [&](const char* name) { return register_module(name, std::make_shared<NormGain>(d, true, ctx)); };
  if (has_pre) ln1_ = norm("ln1");
  attn_ = register_module("attn", std::make_shared<Attention>(d, hs, causal, cfg.qk_norm, cfg.zero_query, ctx, hp));
  if (has_post) ln1_out_ = norm("ln1_out");
  if (has_pre) ln2_ = norm("ln2");
  mlp_ = register_module("mlp", std::make_shared<Mlp>(d, cfg.mlp_ratio, ctx, hp));
  if (has_post) ln2_out_ = norm("ln2_out");
}

torch::Tensor TransformerBlock::sublayer(const torch::Tensor& h, const std::shared_ptr<NormGain>& pre,
                                         const std::shared_ptr<NormGain>& post, bool attn) {
  if (placement_ == Placement::Pre && (unit_.residual || unit_.backward)) {
    // Unit scaling: the tau rule (or the re-weighted plain add) for this sublayer's add.
    const double K = attn ? attn_->grad_ratio() : mlp_->grad_ratio();
    return unit_residual(
        h, [&](const torch::Tensor& xs) { return attn ? attn_->forward(pre->forward(xs)) : mlp_->forward(pre->forward(xs)); },
        adds_before_ + (attn ? 1 : 2), beta_, K, unit_);
  }
  torch::Tensor in = pre ? pre->forward(h) : h;
  torch::Tensor f = attn ? attn_->forward(in) : mlp_->forward(in);
  if (beta_ != 1.0) f = f * beta_;
  if (placement_ == Placement::Pre) return h + f;
  // post / keel: LN(alpha h + beta f)
  return post->forward(alpha_ == 1.0 ? h + f : h * alpha_ + f);
}

torch::Tensor TransformerBlock::forward(const torch::Tensor& h) {
  torch::Tensor x = sublayer(h, ln1_, ln1_out_, /*attn=*/true);
  return sublayer(x, ln2_, ln2_out_, /*attn=*/false);
}

}  // namespace scaleinv
