#pragma once
// The concrete models behind build_model (src/engine/models/factory.cpp). Each is constructed from a
// validated ModelConfig and a ScaleContext whose width and depth match it.
#include <memory>

#include "engine/models/layers.h"
#include "engine/models/model.h"

namespace scaleinv {

// Shared state of every concrete model.
class ModelBase : public Model {
 public:
  ModelBase(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) : cfg_(cfg), ctx_(ctx), hp_(hp) {}
  const ModelConfig& config() const override { return cfg_; }
  const ScaleContext& context() const override { return ctx_; }
  const Hyper& hyper() const { return hp_; }

 protected:
  ModelConfig cfg_;
  ScaleContext ctx_;
  Hyper hp_;
};

std::shared_ptr<Model> make_bigram(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_resmlp(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_gpt(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_mlp(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_vit(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_llama(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
std::shared_ptr<Model> make_moe(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);

// Key/value heads of a grouped-query attention at cfg.width: model.kv_heads is the count at the
// base width (0: one per query head), and the query heads per key/value head stay fixed. UserError
// (field model.kv_heads or model.width) when the counts do not divide.
int64_t kv_heads_at(const ModelConfig& cfg, const ScaleContext& ctx);

// The dense input layer of the feature models (resmlp, mlp): in_dim -> width, role Embedding, base
// std 1/sqrt(in_dim) (the fan-in is fixed), multiplier hp.embed_mult.
std::shared_ptr<Dense> dense_input(int64_t in_dim, int64_t width, const ScaleContext& ctx, const Hyper& hp);

// Readout for tied embeddings (seed 000 A.1.2: W_{L+1} = W_0^T): logits = mult_R (std_R / std_E) h E^T.
// std_R / std_E is the ratio of the init stds an untied readout and the embedding get, so the
// tied model's effective readout starts at the untied one's scale; E itself is an embedding
// tensor and trains with the embedding role's LR.
double tied_readout_factor(int64_t width, const ScaleContext& ctx, const Hyper& hp);
// factor * h E^T, E: [V, d] (or [E, V, d] in an ensemble).
torch::Tensor tied_logits(const torch::Tensor& h, const torch::Tensor& emb, double factor);

// The readout of a token model (bigram, gpt, llama). Untied: a Dense [vocab, d] registered on
// `owner` as "readout" (role Readout, base std 1/sqrt(d / m), hp.output_mult, cfg.zero_readout).
// Tied (cfg.tied): no tensor; `tok`'s weight is marked tied and the logits are
// tied_logits(h, E, tied_readout_factor).
class TokenReadout {
 public:
  TokenReadout() = default;
  TokenReadout(TaggedModule& owner, std::shared_ptr<Lookup> tok, int64_t d, const ModelConfig& cfg,
               const ScaleContext& ctx, const Hyper& hp);
  torch::Tensor forward(const torch::Tensor& h) const;

 private:
  std::shared_ptr<Lookup> tok_;
  std::shared_ptr<Dense> dense_;  // null when tied
  double tied_factor_ = 1;
};

// Input checks shared by the token models: x must be [B, T] ([members, B, T] in an ensemble)
// int64 with ids in [0, vocab).
void check_tokens(const torch::Tensor& x, int64_t vocab, int64_t max_len, const char* model, int members);

}  // namespace scaleinv
