#pragma once
// The layers of the Llama-style decoder (engine/models/llama.cpp), shared with the mixture of experts
// (engine/models/moe.cpp): RMSNorm with a gain, rotary positions, grouped-query attention, the SwiGLU MLP
// and the pre-norm block around a feed-forward. llama.cpp's header comment gives the equations.
// Throws nothing beyond what the tensors throw.
#include <functional>
#include <memory>
#include <vector>

#include "engine/runtime/torch_compat.h"
#include "brain/models/model_kinds.h"
#include "engine/models/zoo.h"

namespace scaleinv {

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

// The MLP of a decoder block: a SwiGLU (below) or a mixture of them (engine/models/moe.cpp).
class FeedForward : public TaggedModule {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;  // [..., d] -> [..., d]
  // A mixture's last forward: its balance loss B (a scalar) and its router logits [N, E]; undefined
  // tensors for a dense MLP.
  virtual torch::Tensor balance() const { return {}; }
  virtual torch::Tensor router_logits() const { return {}; }
  // A mixture: the tokens each expert was assigned in the forwards since the last call, [E] int64
  // on the parameters' device, and zeroes the count (in place: a captured CUDA graph keeps adding
  // to it); undefined for a dense MLP.
  virtual torch::Tensor take_counts() { return {}; }
  // A mixture with model.bias_rate > 0: b_j += bias_rate * sign(mean(counts) - counts_j), counts
  // [E] (any dtype, any positive scale: a mean over ranks steps as the sum does).
  virtual void shift_bias(const torch::Tensor& /*counts*/) {}
};

// The mixture of SwiGLU experts of one block (engine/models/moe.cpp has its equations): parameters
// "router.weight" [E, d] (role Router), "gate", "up" [E, n, d] and "down" [E, d, n] (role Expert),
// "shared.*" with model.shared_expert. UserError as validate_model_config for a bad mixture.
std::shared_ptr<FeedForward> make_moe_feed_forward(int64_t d, const ModelConfig& cfg, const ScaleContext& ctx,
                                                   const Hyper& hp);

class SwiGlu : public FeedForward {
 public:
  SwiGlu(int64_t d, int64_t n, const ScaleContext& ctx, const Hyper& hp, Role role = Role::Hidden) {
    auto opt = [&](int64_t fan_in) { return DenseOptions(role).in_block(true).base_std(width_fan_in_std(fan_in, ctx)); };
    gate_ = register_module("gate", std::make_shared<Dense>(d, n, opt(d), ctx, hp));
    up_ = register_module("up", std::make_shared<Dense>(d, n, opt(d), ctx, hp));
    down_ = register_module("down", std::make_shared<Dense>(n, d, opt(n), ctx, hp));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return down_->forward(torch::silu(gate_->forward(x)) * up_->forward(x));
  }

 private:
  std::shared_ptr<Dense> gate_, up_, down_;
};

class LlamaBlock : public TaggedModule {
 public:
  // mlp: the block's feed-forward (null: a SwiGLU of swiglu_hidden(d) units, role Hidden).
  LlamaBlock(int64_t d, const HeadShape& hs, int64_t kv_heads, const ModelConfig& cfg, const ScaleContext& ctx,
             const Hyper& hp, std::shared_ptr<FeedForward> mlp = nullptr) {
    beta_ = hp.branch_mult * branch_multiplier(ctx.table, ctx.k());  // seed 000 eq. (30)
    norm1_ = register_module("norm1", std::make_shared<RmsGain>(d, true, ctx));
    attn_ = register_module("attn", std::make_shared<GqaAttention>(d, hs, kv_heads, cfg, ctx, hp));
    norm2_ = register_module("norm2", std::make_shared<RmsGain>(d, true, ctx));
    if (!mlp) mlp = std::make_shared<SwiGlu>(d, swiglu_hidden(cfg.width, cfg.ffn_multiple), ctx, hp);
    mlp_ = register_module("mlp", std::move(mlp));
  }
  const FeedForward& mlp() const { return *mlp_; }
  FeedForward& mlp() { return *mlp_; }
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
  std::shared_ptr<FeedForward> mlp_;
};

// The decoder llama and moe are (engine/models/llama.cpp's header comment): token embedding (no
// positions), model.depth LlamaBlocks, a final RMSNorm, the readout (tied or not). feed_forward
// builds each block's MLP (null: the SwiGLU). A block whose MLP is a mixture adds its router
// logits to the records ("router{l}", role Router) and its balance loss to the aux loss. UserError
// for a unit-scaled table or an odd head size.
class LlamaDecoder : public ModelBase {
 public:
  LlamaDecoder(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp,
               const std::function<std::shared_ptr<FeedForward>()>& feed_forward);
  torch::Tensor forward(const torch::Tensor& x) override;
  torch::Tensor take_expert_counts() override;
  void shift_expert_bias(const torch::Tensor& counts) override;

 private:
  std::shared_ptr<Lookup> tok_;
  torch::nn::ModuleList list_;
  std::vector<std::shared_ptr<LlamaBlock>> blocks_;
  std::shared_ptr<RmsGain> norm_f_;
  TokenReadout readout_;
};

}  // namespace scaleinv
