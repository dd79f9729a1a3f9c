// The L-layer bigram language model of seed 000 eq. (1) (Everett et al. 2024), with the
// elementwise nonlinearity of App. C and the optional RMSNorm of A.1.3 (Table 2 rows):
//   h_1     = norm(d^-a_0 W_0 x)                       W_0: lookup embedding [V, d] (stored row-wise)
//   h_{l+1} = phi(norm(d^-a_l W_l h_l))   l = 1..L     W_l: [d, d], role Hidden
//   logits  = d^-a_{L+1} W_{L+1} h_{L+1}               W_{L+1}: [V, d], role Readout
// norm is RMSNorm when cfg.rmsnorm ("h_l = RMSNorm(W_{l-1} h_{l-1}) for all layers except L+2",
// seed 000 A.1.3 / Lemma E.3, so it applies to the embedding output h_1 too), else the identity.
// Each position predicts the next token from its own token only. No biases, no residuals
// (so no tensor is in a block and no depth exponent applies).
#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class Bigram : public ModelBase {
 public:
  Bigram(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp)
      : ModelBase(cfg, ctx, hp), act_(parse_activation(cfg.activation)) {
    const int64_t d = cfg.width, V = cfg.vocab;
    emb_ = register_module("emb", std::make_shared<Lookup>(V, d, hp.embed_mult, ctx, hp));
    layers_ = register_module("layers", torch::nn::ModuleList());
    for (int l = 0; l < cfg.depth; ++l) {
      auto w = std::make_shared<Dense>(d, d, DenseOptions(Role::Hidden).base_std(width_fan_in_std(d, ctx)), ctx, hp);
      layers_->push_back(w);
      hidden_.push_back(w);
    }
    readout_ = TokenReadout(*this, emb_, d, cfg, ctx, hp);
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    check_tokens(x, cfg_.vocab, -1, "bigram", ctx_.members);
    torch::Tensor h = norm(emb_->forward(x));
    record("h1", h, {Role::Embedding, false});
    for (size_t l = 0; l < hidden_.size(); ++l) {
      h = activate(act_, norm(hidden_[l]->forward(h)), ctx_.table.unit);
      if (recording()) record(fmt::format("h{}", l + 2), h, {Role::Hidden, false});
    }
    torch::Tensor logits = readout_.forward(h);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  torch::Tensor norm(const torch::Tensor& u) const { return cfg_.rmsnorm ? rms_norm(u) : u; }

  Activation act_;
  std::shared_ptr<Lookup> emb_;
  torch::nn::ModuleList layers_;
  std::vector<std::shared_ptr<Dense>> hidden_;
  TokenReadout readout_;
};

}  // namespace

double tied_readout_factor(int64_t width, const ScaleContext& ctx, const Hyper& hp) {
  const double std_r = width_fan_in_std(width, ctx) * ctx.scale(Role::Readout, false).init;
  const double std_e = 1.0 * ctx.scale(Role::Embedding, false).init;  // lookup base std 1
  return ctx.scale(Role::Readout, false).multiplier * hp.output_mult * std_r / std_e;
}

torch::Tensor tied_logits(const torch::Tensor& h, const torch::Tensor& emb, double factor) {
  if (factor == 1.0) return linear_any(h, emb);
  const int64_t rows = h.numel() / std::max<int64_t>(h.size(-1), 1);
  return rows >= h.size(-1) ? linear_any(h, emb * factor) : linear_any(h, emb) * factor;
}

TokenReadout::TokenReadout(TaggedModule& owner, std::shared_ptr<Lookup> tok, int64_t d, const ModelConfig& cfg,
                           const ScaleContext& ctx, const Hyper& hp)
    : tok_(std::move(tok)) {
  if (cfg.tied) {
    tok_->mark_tied("weight");
    tied_factor_ = tied_readout_factor(d, ctx, hp);
  } else {
    dense_ = owner.register_module(
        "readout", std::make_shared<Dense>(d, cfg.vocab,
                                           DenseOptions(Role::Readout)
                                               .base_std(width_fan_in_std(d, ctx))
                                               .extra_mult(hp.output_mult)
                                               .zero_init(cfg.zero_readout),
                                           ctx, hp));
  }
}

torch::Tensor TokenReadout::forward(const torch::Tensor& h) const {
  return dense_ ? dense_->forward(h) : tied_logits(h, tok_->weight(), tied_factor_);
}

void check_tokens(const torch::Tensor& x, int64_t vocab, int64_t max_len, const char* model, int members) {
  const int64_t want_dim = members > 0 ? 3 : 2;
  if (x.dim() != want_dim || x.scalar_type() != torch::kLong || (members > 0 && x.size(0) != members))
    throw UserError("input", "x",
                    fmt::format("{} expects [{}batch, time] int64 tokens, got a {}-d {} tensor", model,
                                members > 0 ? "members, " : "", x.dim(),
                                std::string(c10::toString(x.scalar_type()))),
                    "feed a language data source (kjv, text, markov) to a language model");
  if (max_len > 0 && x.size(-1) > max_len)
    throw UserError("config", "model.seq_len",
                    fmt::format("input has {} tokens per row but the model's context is {}", x.size(-1), max_len),
                    "feed rows of at most model.seq_len tokens");
  if (x.is_cpu() && x.numel() > 0) {  // (skipped on GPU: it would synchronise every step)
    const int64_t lo = x.min().item<int64_t>(), hi = x.max().item<int64_t>();
    if (lo < 0 || hi >= vocab)
      throw UserError("config", "model.vocab",
                      fmt::format("token ids span [{}, {}] but the vocabulary has {} entries", lo, hi, vocab),
                      "set model.vocab to at least the data's vocabulary size");
  }
}

std::shared_ptr<Model> make_bigram(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<Bigram>(cfg, ctx, hp);
}

}  // namespace scaleinv
