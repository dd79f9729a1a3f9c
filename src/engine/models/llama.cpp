// Llama-style decoder (brain/models/model_kinds.h row "llama"; docs/references.md, issue 36):
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
// Tied embeddings (model.tied): as the GPT's (engine/models/zoo.h tied_logits): one tensor with the
// embedding role (its init, LR, weight decay), the readout's multiplier and init ratio in the forward.
// No batched ensembles and no unit-scaled ops (the row says so; a table with [unit] is refused).
//
// Records: "embed" (h_0), "block{l}" (h_l), "logits", as the GPT, so the coordinate check and the
// diagnostics read the two alike.
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "engine/models/llama_layers.h"
#include "brain/models/model_kinds.h"
#include "engine/models/zoo.h"

namespace scaleinv {

LlamaDecoder::LlamaDecoder(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp,
                           const std::function<std::shared_ptr<FeedForward>()>& feed_forward)
    : ModelBase(cfg, ctx, hp) {
  if (ctx.table.unit.any())
    throw UserError("param", "unit", fmt::format("'{}' has no unit-scaled ops (model {})", ctx.table.name, cfg.kind),
                    fmt::format("use a table without [unit] for {} (e.g. mup, completep)", cfg.kind));
  const int64_t d = cfg.width;
  const HeadShape hs = head_shape(cfg, ctx);
  if (hs.d_head % 2 != 0)
    throw UserError("config", "model.head_dim", fmt::format("rotary positions need an even head size, got {}", hs.d_head),
                    "use an even model.head_dim (or a width / n_heads that is even)");
  const int64_t kv = kv_heads_at(cfg, ctx);
  tok_ = register_module("tok_emb", std::make_shared<Lookup>(cfg.vocab, d, hp.embed_mult, ctx, hp));
  list_ = register_module("blocks", torch::nn::ModuleList());
  for (int l = 0; l < cfg.depth; ++l) {
    auto b = std::make_shared<LlamaBlock>(d, hs, kv, cfg, ctx, hp, feed_forward ? feed_forward() : nullptr);
    list_->push_back(b);
    blocks_.push_back(b);
  }
  norm_f_ = register_module("norm_f", std::make_shared<RmsGain>(d, false, ctx));
  readout_ = TokenReadout(*this, tok_, d, cfg, ctx, hp);
}

torch::Tensor LlamaDecoder::forward(const torch::Tensor& x) {
  check_tokens(x, cfg_.vocab, cfg_.seq_len, cfg_.kind.c_str(), ctx_.members);
  torch::Tensor h = tok_->forward(x);
  record("embed", h, {Role::Embedding, false});
  torch::Tensor balance;  // the mixture's balance losses, summed over the blocks
  for (size_t l = 0; l < blocks_.size(); ++l) {
    h = blocks_[l]->forward(h);
    const FeedForward& mlp = blocks_[l]->mlp();
    if (torch::Tensor b = mlp.balance(); b.defined()) balance = balance.defined() ? balance + b : b;
    if (recording()) {
      if (torch::Tensor z = mlp.router_logits(); z.defined())  // shares the logits' autograd node
        record(fmt::format("router{}", l + 1), z, {Role::Router, true});
      record(fmt::format("block{}", l + 1), h, {Role::Hidden, true});
    }
  }
  // A mixture's aux loss: model.aux_coef times the blocks' mean balance loss (engine/models/moe.cpp).
  aux_loss_ = balance.defined() && cfg_.aux_coef > 0
                  ? balance * (cfg_.aux_coef / static_cast<double>(blocks_.size()))
                  : torch::Tensor();
  h = norm_f_->forward(h);
  torch::Tensor logits = readout_.forward(h);
  record("logits", logits, {Role::Readout, false});
  return logits;
}

torch::Tensor LlamaDecoder::take_expert_counts() {
  std::vector<torch::Tensor> per_block;
  for (const auto& b : blocks_)
    if (torch::Tensor c = b->mlp().take_counts(); c.defined()) per_block.push_back(c);
  return per_block.empty() ? torch::Tensor() : torch::stack(per_block);
}

void LlamaDecoder::shift_expert_bias(const torch::Tensor& counts) {
  for (size_t l = 0; l < blocks_.size(); ++l) blocks_[l]->mlp().shift_bias(counts[static_cast<int64_t>(l)]);
}

std::shared_ptr<Model> make_llama(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<LlamaDecoder>(cfg, ctx, hp, nullptr);
}

}  // namespace scaleinv
