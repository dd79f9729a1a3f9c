// Llama-style decoder (models/model_kinds.h row "llama"; docs/references.md, issue 36):
//   h_0 = d^-a_E E[x_t]                               E: [V, d], lookup embedding (base std 1), no positions
//   h_l = h' + beta SwiGLU(RMS_2(h')),                h' = h_{l-1} + beta Attn(RMS_1(h_{l-1}))
//   logits = d^-a_R W_R RMS_f(h_L)                    W_R: [V, d], role Readout (or E^T when tied)
// with beta = hp.branch_mult * k^-branch (seed 000 eq. 30; pre-norm placement only).
//
//   RMS(x)          x / RMS(x) * g, g a gain (role Vector, init 1), no bias (seed 000 A.1.3)
//   Attn(x)         grouped-query attention: q = W_q x [H heads], k = W_k x, v = W_v x [H_kv heads],
//                   rotary positions on q and k (pairs (i, i + d_head/2), frequency theta^(-2i/d_head)),
//                   each key/value head shared by H / H_kv query heads, logits scaled by
//                   hp.attn_mult * attn_logit_scale(d_head) (seed 000 1.3), q and k RMS-normalised
//                   per head first with model.qk_norm, output W_o. Roles AttnQ/K/V/O, in a block;
//                   W_q, W_o: [d, d]; W_k, W_v: [H_kv d_head, d]. H_kv grows with H at the fixed ratio
//                   model.kv_heads states at the base width, so K and V are width-by-width matrices.
//   SwiGLU(x)       W_down (silu(W_gate x) * W_up x), W_gate, W_up: [n, d], W_down: [d, n], n =
//                   swiglu_hidden(d) (about 8/3 d), role Hidden, in a block.
//
// Tied embeddings (model.tied): as the GPT's (models/zoo.h tied_logits): one tensor with the
// embedding role (its init, LR, weight decay), the readout's multiplier and init ratio in the forward.
// No batched ensembles and no unit-scaled ops (the row says so; a table with [unit] is refused).
//
// Records: "embed" (h_0), "block{l}" (h_l), "logits", as the GPT, so the coordinate check and the
// diagnostics read the two alike.
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/torch_compat.h"
#include "models/model_kinds.h"
#include "models/zoo.h"

namespace scaleinv {

namespace {

// x / RMS(x) * g over the last dimension; g: role Vector, init 1.
class RmsGain : public TaggedModule {
 public:
  RmsGain(int64_t d, bool in_block, const ScaleContext& ctx) {
    gain_ = add_param("gain", torch::ones({d}), ParamTag{Role::Vector, in_block, 0.0});
    mult_ = role_multiplier(Role::Vector, in_block, ctx);
  }
  torch::Tensor forward(const torch::Tensor& x) { return rms_norm(x) * (mult_ == 1.0 ? gain_ : gain_ * mult_); }

 private:
  torch::Tensor gain_;
  double mult_ = 1;
};

// Rotary position embedding: cos and sin of position t times theta^(-2i/d_head), i < d_head/2.
struct Rotary {
  torch::Tensor cos, sin;  // [seq_len, d_head / 2]
  Rotary(int64_t seq_len, int64_t d_head, double theta) {
    torch::Tensor i = torch::arange(d_head / 2, torch::kFloat64);
    torch::Tensor freq = torch::pow(theta, -2.0 * i / static_cast<double>(d_head));
    torch::Tensor ang = torch::outer(torch::arange(seq_len, torch::kFloat64), freq);
    cos = torch::cos(ang).to(torch::kFloat32);
    sin = torch::sin(ang).to(torch::kFloat32);
  }
  // x: [B, H, T, d_head] -> rotated, pairs (x_i, x_{i + d_head/2}).
  torch::Tensor apply(const torch::Tensor& x) const {
    const int64_t T = x.size(-2), half = x.size(-1) / 2;
    torch::Tensor c = cos.narrow(0, 0, T).to(x.device()), s = sin.narrow(0, 0, T).to(x.device());
    std::vector<torch::Tensor> p = x.split(half, -1);
    return torch::cat({p[0] * c - p[1] * s, p[1] * c + p[0] * s}, -1);
  }
};

class GqaAttention : public TaggedModule {
 public:
  GqaAttention(int64_t d, const HeadShape& hs, int64_t kv_heads, const ModelConfig& cfg, const ScaleContext& ctx,
               const Hyper& hp)
      : hs_(hs), kv_heads_(kv_heads), qk_norm_(cfg.qk_norm), rope_(cfg.seq_len, hs.d_head, cfg.rope_theta) {
    const double s = width_fan_in_std(d, ctx);
    auto opt = [&](Role r, bool zero) { return DenseOptions(r).in_block(true).base_std(s).zero_init(zero); };
    const int64_t kv = kv_heads * hs.d_head;
    q_ = register_module("q", std::make_shared<Dense>(d, d, opt(Role::AttnQ, cfg.zero_query), ctx, hp));
    k_ = register_module("k", std::make_shared<Dense>(d, kv, opt(Role::AttnK, false), ctx, hp));
    v_ = register_module("v", std::make_shared<Dense>(d, kv, opt(Role::AttnV, false), ctx, hp));
    o_ = register_module("o", std::make_shared<Dense>(d, d, opt(Role::AttnO, false), ctx, hp));
    scale_ = hp.attn_mult * attn_logit_scale(ctx.table, static_cast<double>(hs.d_head), hs.base_d_head);
  }

  torch::Tensor forward(const torch::Tensor& x) {  // [B, T, d]
    const int64_t B = x.size(0), T = x.size(1), H = hs_.n_heads, Hk = kv_heads_, dh = hs_.d_head;
    torch::Tensor q = q_->forward(x).view({B, T, H, dh}).transpose(1, 2);
    torch::Tensor k = k_->forward(x).view({B, T, Hk, dh}).transpose(1, 2);
    torch::Tensor v = v_->forward(x).view({B, T, Hk, dh}).transpose(1, 2);
    if (qk_norm_) {  // seed 000 footnote 3: QK-norm, then the logit scale
      q = rms_norm(q);
      k = rms_norm(k);
    }
    q = rope_.apply(q);
    k = rope_.apply(k);
    if (Hk != H) {  // each key/value head serves H / Hk consecutive query heads
      k = k.repeat_interleave(H / Hk, 1);
      v = v.repeat_interleave(H / Hk, 1);
    }
    torch::Tensor out = compat::attention(q, k, v, /*causal=*/true, scale_, &mask_);
    return o_->forward(out.transpose(1, 2).reshape({B, T, H * dh}));
  }

 private:
  HeadShape hs_;
  int64_t kv_heads_;
  bool qk_norm_;
  Rotary rope_;
  double scale_ = 1;
  std::shared_ptr<Dense> q_, k_, v_, o_;
  torch::Tensor mask_;
};

class SwiGlu : public TaggedModule {
 public:
  SwiGlu(int64_t d, int64_t n, const ScaleContext& ctx, const Hyper& hp) {
    auto opt = [&](int64_t fan_in) { return DenseOptions(Role::Hidden).in_block(true).base_std(width_fan_in_std(fan_in, ctx)); };
    gate_ = register_module("gate", std::make_shared<Dense>(d, n, opt(d), ctx, hp));
    up_ = register_module("up", std::make_shared<Dense>(d, n, opt(d), ctx, hp));
    down_ = register_module("down", std::make_shared<Dense>(n, d, opt(n), ctx, hp));
  }
  torch::Tensor forward(const torch::Tensor& x) { return down_->forward(torch::silu(gate_->forward(x)) * up_->forward(x)); }

 private:
  std::shared_ptr<Dense> gate_, up_, down_;
};

class LlamaBlock : public TaggedModule {
 public:
  LlamaBlock(int64_t d, const HeadShape& hs, int64_t kv_heads, const ModelConfig& cfg, const ScaleContext& ctx,
             const Hyper& hp) {
    beta_ = hp.branch_mult * branch_multiplier(ctx.table, ctx.k());  // seed 000 eq. (30)
    norm1_ = register_module("norm1", std::make_shared<RmsGain>(d, true, ctx));
    attn_ = register_module("attn", std::make_shared<GqaAttention>(d, hs, kv_heads, cfg, ctx, hp));
    norm2_ = register_module("norm2", std::make_shared<RmsGain>(d, true, ctx));
    mlp_ = register_module("mlp", std::make_shared<SwiGlu>(d, swiglu_hidden(cfg.width, cfg.ffn_multiple), ctx, hp));
  }
  torch::Tensor forward(const torch::Tensor& h) {
    torch::Tensor a = attn_->forward(norm1_->forward(h));
    torch::Tensor x = h + (beta_ == 1.0 ? a : a * beta_);
    torch::Tensor f = mlp_->forward(norm2_->forward(x));
    return x + (beta_ == 1.0 ? f : f * beta_);
  }

 private:
  double beta_ = 1;
  std::shared_ptr<RmsGain> norm1_, norm2_;
  std::shared_ptr<GqaAttention> attn_;
  std::shared_ptr<SwiGlu> mlp_;
};

class Llama : public ModelBase {
 public:
  Llama(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) : ModelBase(cfg, ctx, hp) {
    if (ctx.table.unit.any())
      throw UserError("param", "unit", fmt::format("'{}' has no unit-scaled ops (model llama)", ctx.table.name),
                      "use a table without [unit] for llama (e.g. mup, completep)");
    const int64_t d = cfg.width;
    const HeadShape hs = head_shape(cfg, ctx);
    if (hs.d_head % 2 != 0)
      throw UserError("config", "model.head_dim", fmt::format("rotary positions need an even head size, got {}", hs.d_head),
                      "use an even model.head_dim (or a width / n_heads that is even)");
    const int64_t kv = kv_heads_at(cfg, ctx);
    tok_ = register_module("tok_emb", std::make_shared<Lookup>(cfg.vocab, d, hp.embed_mult, ctx, hp));
    list_ = register_module("blocks", torch::nn::ModuleList());
    for (int l = 0; l < cfg.depth; ++l) {
      auto b = std::make_shared<LlamaBlock>(d, hs, kv, cfg, ctx, hp);
      list_->push_back(b);
      blocks_.push_back(b);
    }
    norm_f_ = register_module("norm_f", std::make_shared<RmsGain>(d, false, ctx));
    readout_ = TokenReadout(*this, tok_, d, cfg, ctx, hp);
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    check_tokens(x, cfg_.vocab, cfg_.seq_len, "llama", ctx_.members);
    torch::Tensor h = tok_->forward(x);
    record("embed", h, {Role::Embedding, false});
    for (size_t l = 0; l < blocks_.size(); ++l) {
      h = blocks_[l]->forward(h);
      if (recording()) record(fmt::format("block{}", l + 1), h, {Role::Hidden, true});
    }
    h = norm_f_->forward(h);
    torch::Tensor logits = readout_.forward(h);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  std::shared_ptr<Lookup> tok_;
  torch::nn::ModuleList list_;
  std::vector<std::shared_ptr<LlamaBlock>> blocks_;
  std::shared_ptr<RmsGain> norm_f_;
  TokenReadout readout_;
};

}  // namespace

std::shared_ptr<Model> make_llama(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<Llama>(cfg, ctx, hp);
}

}  // namespace scaleinv
