// GPT decoder (docs/design.md "Folders": models; seed 002 Part I 0 for the block structure, seed 000 1.3 for
// attention, eqs. 30, 32, 34 for the residual placements):
//   h_0 = d^-a_E (E[x_t] + P[t])        E: [V, d], P: [seq_len, d], lookup embeddings (base std 1)
//   h_l = block_l(h_{l-1})              l = 1..L, see TransformerBlock (pre / post / keel)
//   logits = d^-a_R W_R LN_f(h_L)       W_R: [V, d], role Readout
//
// Tied embeddings (cfg.tied, seed 000 A.1.2: W_{L+1} = W_0^T): there is no readout tensor, and
//   logits = mult_R (std_R / std_E) LN_f(h_L) E^T
// where std_R, std_E are the init stds the untied readout and the embedding would get. So the
// tied model's effective readout starts at the untied readout's init scale, but E is one tensor
// with the embedding role: it trains with the embedding's LR (and weight decay, epsilon), and
// receives the gradient of both uses.
//
// Records: "embed" (h_0), "block{l}" (h_l, l = 1..L), "logits".
#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class Gpt : public ModelBase {
 public:
  Gpt(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) : ModelBase(cfg, ctx, hp) {
    const int64_t d = cfg.width;
    const HeadShape hs = head_shape(cfg, ctx);
    const Placement placement = parse_placement(cfg.block);
    tok_ = register_module("tok_emb", std::make_shared<Lookup>(cfg.vocab, d, hp.embed_mult, ctx, hp));
    pos_ = register_module("pos_emb", std::make_shared<Lookup>(cfg.seq_len, d, hp.embed_mult, ctx, hp));
    list_ = register_module("blocks", torch::nn::ModuleList());
    for (int l = 0; l < cfg.depth; ++l) {
      auto b = std::make_shared<TransformerBlock>(d, hs, placement, /*causal=*/true, cfg, ctx, hp);
      b->set_stream_position(2 * l);  // two residual adds per block (unit scaling's tau rule)
      list_->push_back(b);
      blocks_.push_back(b);
    }
    ln_f_ = register_module("ln_f", std::make_shared<NormGain>(d, /*in_block=*/false, ctx));
    readout_ = TokenReadout(*this, tok_, d, cfg, ctx, hp);
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    check_tokens(x, cfg_.vocab, cfg_.seq_len, "gpt", ctx_.members);
    torch::Tensor h = unit_sum(tok_->forward(x), pos_->first_rows(x.size(-1)), ctx_.table.unit);
    record("embed", h, {Role::Embedding, false});
    for (size_t l = 0; l < blocks_.size(); ++l) {
      h = blocks_[l]->forward(h);
      if (recording()) record(fmt::format("block{}", l + 1), h, {Role::Hidden, true});
    }
    h = ln_f_->forward(h);
    torch::Tensor logits = readout_.forward(h);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  std::shared_ptr<Lookup> tok_, pos_;
  torch::nn::ModuleList list_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<NormGain> ln_f_;
  TokenReadout readout_;
};

}  // namespace

std::shared_ptr<Model> make_gpt(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<Gpt>(cfg, ctx, hp);
}

}  // namespace scaleinv
