#pragma once
// Role-tagged building blocks shared by the models (docs/design.md "Where new things go": a model).
//
// Every layer takes its numbers from the ScaleContext; none of them knows which parameterization
// it is under. For a tensor of role r (in_block: inside a residual block):
//   forward multiplier  ctx.scale(r, in_block).multiplier          (m^-a; seed 000 eq. 1)
//   init std            base_std * ctx.scale(r, in_block).init * hp.init_scale   (m^-b; eq. 2)
// where base_std is the std at the base shape:
//   hidden / attention / readout matrices  1/sqrt(fan_in / m)   (so b = 1/2 gives 1/sqrt(fan_in))
//   lookup embeddings (token, position)    1
//   dense embeddings (finite fan-in)       1/sqrt(fan_in)
//   vector-like tensors (gains, biases)    0: constant init (gain 1, bias 0)
// Weights are stored [out, in] and used as y = mult * x W^T. In an ensemble (ctx.members = E > 0)
// every tensor gains a leading [E] dimension and activations are [E, batch, ...].
//
// Initialization draws from torch's global generator (seeded by the caller) in construction
// order. A normally-initialised tensor always draws its randn, even when its std is 0
// (zero_readout, zero_query), so such options never shift the random stream of other tensors.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/models/model.h"

namespace scaleinv {

// ---- stateless pieces ----------------------------------------------------------------------

// Elementwise nonlinearity (seed 000 App. C; seed 004 uses ReLU and Abs).
enum class Activation { Linear, Relu, Abs, Tanh, Gelu };
// Throws UserError (field "model.activation") on an unknown name.
Activation parse_activation(const std::string& name);
torch::Tensor activate(Activation a, const torch::Tensor& x);
// Under a table with unit scaling (ParamTable::unit, src/engine/unit/scaled_ops.h): ReLU and GELU divided
// by their RMS at unit-normal input (nonlin) and their gradient scaled to unit RMS (backward); the
// other activations as activate(a, x). Plain activate(a, x) when the table has no unit scaling.
torch::Tensor activate(Activation a, const torch::Tensor& x, const UnitScaling& u);
// The activation's backward scale over its forward scale under u (1 on the plain path): the factor
// its unit backward puts on the gradient relative to the true one (residual re-weighting).
double activation_grad_ratio(Activation a, const UnitScaling& u);

// Residual-block placement of the normalisation (seed 000 eqs. 32, 34).
enum class Placement { Pre, Post, Keel };
// Throws UserError (field "model.block") on an unknown name.
Placement parse_placement(const std::string& name);

inline constexpr double kRmsNormEps = 1e-6;
inline constexpr double kLayerNormEps = 1e-5;

// RMSNorm(x) = x / RMS(x) over the last dimension, no parameters (seed 000 A.1.3, Lemma E.2).
torch::Tensor rms_norm(const torch::Tensor& x, double eps = kRmsNormEps);
// LayerNorm over the last dimension, (x - mean) / sqrt(var + eps), times gain if defined (no bias).
torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& gain = {}, double eps = kLayerNormEps);
// MS(x) = x - mean(x) over the last dimension (seed 004 4.2).
torch::Tensor mean_subtract(const torch::Tensor& x);

// x W^T for W [out, in]; for an ensemble's W [E, out, in] and x [E, ..., in], member by member
// as one batched matmul.
torch::Tensor linear_any(const torch::Tensor& x, const torch::Tensor& w);
// A per-member vector [E, n] viewed as [E, 1, ..., 1, n] (dims dimensions) to broadcast against
// an ensemble activation; a plain vector [n] is returned as is.
torch::Tensor member_view(const torch::Tensor& v, int64_t dims);

// ---- init helpers --------------------------------------------------------------------------

// Base std of a matrix whose fan-in scales with width: 1/sqrt(fan_in / m) (the fan-in at the base shape).
double width_fan_in_std(int64_t fan_in, const ScaleContext& ctx);
// The std a tensor with this tag gets: base_std * m^-b (* k-independent) * hp.init_scale.
double init_std(const ParamTag& tag, const ScaleContext& ctx, const Hyper& hp);
// The forward multiplier of a role: m^-a.
double role_multiplier(Role role, bool in_block, const ScaleContext& ctx);

// ---- layers --------------------------------------------------------------------------------

// Named, chained setters as libtorch's options (TORCH_ARG), e.g.
//   DenseOptions(Role::Readout).base_std(s).extra_mult(hp.output_mult).zero_init(cfg.zero_readout)
struct DenseOptions {
  explicit DenseOptions(Role role) : role_(role) {}
  TORCH_ARG(Role, role);
  TORCH_ARG(bool, in_block) = false;
  TORCH_ARG(double, base_std) = 0;     // std at the base shape (see the header comment)
  TORCH_ARG(double, extra_mult) = 1;   // hyperparameter factor on the forward multiplier (embed_mult, output_mult)
  TORCH_ARG(bool, zero_init) = false;  // init 0 (the randn is still drawn); the tag's base_std is then 0
};

// y = mult * x W^T with W: [out, in]. No bias.
class Dense : public TaggedModule {
 public:
  Dense(int64_t in, int64_t out, const DenseOptions& opt, const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& x);
  // factor * mult * W (W itself when the product is 1): for layers that fuse several matmuls.
  torch::Tensor effective_weight(double factor = 1.0) const;
  const torch::Tensor& weight() const { return weight_; }
  double multiplier() const { return mult_; }
  // Unit backward (ParamTable::unit.backward): grad-input scaled 1/sqrt(fan_out) instead of by the
  // multiplier; this is that scale over the multiplier (1 on the plain path).
  double grad_ratio() const { return unit_bwd_ ? bwd_x_ / mult_ : 1.0; }

 private:
  torch::Tensor weight_;
  double mult_ = 1;
  bool unit_bwd_ = false;  // scaled_linear with unit backward scales (src/engine/unit/scaled_ops.h)
  double bwd_x_ = 1;
};

// Lookup embedding: rows of W: [n, d] times mult (token or position embedding; base std 1).
class Lookup : public TaggedModule {
 public:
  Lookup(int64_t n, int64_t d, double extra_mult, const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& idx);  // [...] int64 -> [..., d]
  torch::Tensor first_rows(int64_t n);               // mult * W[0:n] (position embeddings; [E, 1, n, d] in an ensemble)
  const torch::Tensor& weight() const { return weight_; }
  double multiplier() const { return mult_; }

 private:
  torch::Tensor weight_;
  double mult_ = 1;
  bool unit_bwd_ = false;  // unit backward: the table's gradient scaled by sqrt(rows / lookups)
};

// LayerNorm with a gain (role Vector, init 1) and no bias. Under unit backward
// (ParamTable::unit.backward) the gain's gradient, a sum over every row of x, is scaled by
// 1/sqrt(rows) (unit::unit_bwd_w, the linear weights' grad-weight rule): unit RMS at init where the
// rows are independent, instead of sqrt(rows).
class NormGain : public TaggedModule {
 public:
  NormGain(int64_t d, bool in_block, const ScaleContext& ctx);
  torch::Tensor forward(const torch::Tensor& x);
  const torch::Tensor& gain() const { return gain_; }

 private:
  torch::Tensor gain_;
  double mult_ = 1;
  bool unit_bwd_ = false;
};

// Head layout of multi-head attention.
struct HeadShape {
  int64_t n_heads = 1;
  int64_t d_head = 1;
  double base_d_head = 1;  // d_head at the base width (fixed head_dim: the same; fixed n_heads: d0 / n_heads)
};
// From cfg.head_dim / cfg.n_heads; UserError (field "model.width", "model.head_dim" or
// "model.n_heads") when the width is not divisible or a size is not positive.
HeadShape head_shape(const ModelConfig& cfg, const ScaleContext& ctx);

// Multi-head self-attention (seed 000 1.3; seed 002 eqs. 1.13-1.19). q, k, v, o: [d, d], roles
// AttnQ/K/V/O, in a residual block. Logits: hp.attn_mult * attn_logit_scale(d_head, base_d_head) q.k,
// with q, k RMS-normalised over the head dimension first when qk_norm. q, k and v are separate
// tensors (separate roles) but run as one fused [3d, d] matmul.
class Attention : public TaggedModule {
 public:
  Attention(int64_t d, const HeadShape& hs, bool causal, bool qk_norm, bool zero_query,
            const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, d] -> [B, T, d]
  double logit_scale() const { return scale_; }
  // Packs W_q, W_k, W_v into one [3d, d] buffer (engine/models/packed_rows.h; one model, not an
  // ensemble). forward then reads it in place, passing the logit scale (and W_q's multiplier) to
  // the attention kernel instead of folding it into a copy of W_q. Needs the k and v multipliers
  // at 1 (and W_q's too under QK-norm); otherwise forward keeps the per-step cat.
  void pack_weights() override;
  bool packed() const;  // forward takes the packed path
  // Unit backward: the v path's backward scales over the forward ones (o and the q/k/v op); the
  // q/k paths are re-weighted to it inside forward, so this is the whole sublayer's ratio.
  double grad_ratio() const;
  // The four projections, for measurements that recompute the logits from them (init statistics).
  const std::shared_ptr<Dense>& q() const { return q_; }
  const std::shared_ptr<Dense>& k() const { return k_; }
  const std::shared_ptr<Dense>& v() const { return v_; }
  const std::shared_ptr<Dense>& o() const { return o_; }

 private:
  torch::Tensor forward_unit(const torch::Tensor& x);  // the path under a table with unit scaling
  UnitScaling unit_;
  std::shared_ptr<Dense> q_, k_, v_, o_;
  HeadShape hs_;
  bool causal_, qk_norm_;
  double scale_;
  torch::Tensor mask_;  // causal mask cache [T, T], true above the diagonal
};

// Transformer MLP (seed 002 eqs. 1.20-1.21): proj(GELU(fc(x))), fc: [r d, d], proj: [d, r d], role Hidden.
class Mlp : public TaggedModule {
 public:
  Mlp(int64_t d, int64_t ratio, const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& x);
  double grad_ratio() const;  // product of bwd/fwd along fc, GELU, proj (1 on the plain path)

 private:
  std::shared_ptr<Dense> fc_, proj_;
  UnitScaling unit_;
};

// One transformer block: an attention sublayer then an MLP sublayer, each placed as
//   pre:  h <- h + beta f(LN(h))                         (pre-LN)
//   post: h <- LN(alpha h + beta f(h))                   (seed 000 eq. 32 / 34)
//   keel: h <- LN(alpha h + beta f(LN_pre(h)))           (seed 000 eq. 34 with pre-LN: KEEL)
// alpha = shortcut_multiplier(table, L) (L = blocks), beta = hp.branch_mult * k^-branch (eq. 30).
class TransformerBlock : public TaggedModule {
 public:
  TransformerBlock(int64_t d, const HeadShape& hs, Placement placement, bool causal, const ModelConfig& cfg,
                   const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& h);
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  // Residual adds before this block's first (the embedding is the stream's start): the tau rule of
  // unit scaling (ParamTable::unit.residual) numbers the adds 1, 2, ... along the stream.
  void set_stream_position(int adds_before) { adds_before_ = adds_before; }
  // The sublayers and norms (null where the placement has none), for measurements that read a
  // block's parts (engine/diagnostics: init statistics, post-LN transport) instead of its names.
  const std::shared_ptr<NormGain>& ln1() const { return ln1_; }          // before attention (pre, keel)
  const std::shared_ptr<NormGain>& ln1_out() const { return ln1_out_; }  // after the attention add (post, keel)
  const std::shared_ptr<NormGain>& ln2() const { return ln2_; }          // before the MLP (pre, keel)
  const std::shared_ptr<NormGain>& ln2_out() const { return ln2_out_; }  // after the MLP add (post, keel)
  const std::shared_ptr<Attention>& attn() const { return attn_; }
  const std::shared_ptr<Mlp>& mlp() const { return mlp_; }

 private:
  torch::Tensor sublayer(const torch::Tensor& h, const std::shared_ptr<NormGain>& pre,
                         const std::shared_ptr<NormGain>& post, bool attn);
  Placement placement_;
  double alpha_ = 1, beta_ = 1;
  std::shared_ptr<NormGain> ln1_, ln1_out_, ln2_, ln2_out_;  // null where the placement has none
  std::shared_ptr<Attention> attn_;
  std::shared_ptr<Mlp> mlp_;
  UnitScaling unit_;
  int adds_before_ = 0;
};

// The residual add x + beta f(split(x)) under a table's unit scaling (src/engine/unit/scaled_ops.h):
// with unit.residual the tau rule for the stream's l-th add, else the plain a = 1, b = beta; with
// unit.backward the branch's contribution to the gradient re-weighted by its ratio K. `branch` is
// called on the split (its gradient scaled) input. The plain path never calls this.
// a + b, or under unit.residual the unit-scaled sum (a + b) / sqrt(2) of two unit tensors
// (token + position embeddings); with unit.backward each gets the gradient at unit scale.
torch::Tensor unit_sum(const torch::Tensor& a, const torch::Tensor& b, const UnitScaling& u);
torch::Tensor unit_residual(const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& branch,
                            int l, double beta, double branch_ratio, const UnitScaling& u);

}  // namespace scaleinv
