// A small ViT for Fashion-MNIST (seed 002 Part I 0, eqs. 1.6-1.7 stem, 1.22-1.23 head):
//   z_1[t] = d^-a_E (W_patch x[t] + P[t])    W_patch: [d, C p p], dense embedding (base std 1/sqrt(C p p)),
//                                            no patch bias; P: [n_patches, d], lookup (base std 1)
//   z_l    = block_l(z_{l-1})                the GPT's blocks (cfg.block placement), without the causal mask
//   logits = d^-a_R W_head mean_t LN_f(z_L)[t] + b_head     W_head: [n_classes, d] Readout,
//                                                           b_head: [n_classes] Vector, init 0
// Input [B, C, H, W] with H = W = image_size; patches are read row-major.
// Records: "embed", "block{l}", "logits".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/util/errors.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class Vit : public ModelBase {
 public:
  Vit(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) : ModelBase(cfg, ctx, hp) {
    const int64_t d = cfg.width;
    const HeadShape hs = head_shape(cfg, ctx);
    const Placement placement = parse_placement(cfg.block);
    grid_ = cfg.image_size / cfg.patch;
    const int64_t patch_dim = int64_t(cfg.channels) * cfg.patch * cfg.patch;
    stem_ = register_module(
        "stem", std::make_shared<Dense>(patch_dim, d,
                                        DenseOptions(Role::Embedding).base_std(1.0 / std::sqrt(double(patch_dim))).extra_mult(hp.embed_mult),
                                        ctx, hp));
    pos_ = register_module("pos_emb", std::make_shared<Lookup>(grid_ * grid_, d, hp.embed_mult, ctx, hp));
    list_ = register_module("blocks", torch::nn::ModuleList());
    for (int l = 0; l < cfg.depth; ++l) {
      auto b = std::make_shared<TransformerBlock>(d, hs, placement, /*causal=*/false, cfg, ctx, hp);
      b->set_stream_position(2 * l);  // two residual adds per block (unit scaling's tau rule)
      list_->push_back(b);
      blocks_.push_back(b);
    }
    ln_f_ = register_module("ln_f", std::make_shared<NormGain>(d, /*in_block=*/false, ctx));
    head_ = register_module(
        "head", std::make_shared<Dense>(d, cfg.n_classes,
                                        DenseOptions(Role::Readout).base_std(width_fan_in_std(d, ctx)).extra_mult(hp.output_mult).zero_init(cfg.zero_readout),
                                        ctx, hp));
    torch::Tensor b;
    {
      torch::NoGradGuard no_grad;
      b = torch::zeros({cfg.n_classes});
    }
    head_bias_ = add_param("head_bias", b, ParamTag{Role::Vector, false, 0.0});
    bias_mult_ = role_multiplier(Role::Vector, false, ctx);
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    const int64_t C = cfg_.channels, S = cfg_.image_size, p = cfg_.patch;
    if (x.dim() != 4 || x.size(1) != C || x.size(2) != S || x.size(3) != S || !x.is_floating_point())
      throw UserError("config", "model.image_size",
                      fmt::format("vit expects [batch, {}, {}, {}] float images, got shape {}", C, S, S,
                                  fmt::join(x.sizes().vec(), "x")),
                      "set model.channels and model.image_size to the data's (1 and 28 for Fashion-MNIST), "
                      "and do not flatten the images");
    const int64_t B = x.size(0), g = grid_;
    // [B, C, g, p, g, p] -> [B, g, g, C, p, p] -> [B, g*g, C*p*p]
    torch::Tensor patches = x.reshape({B, C, g, p, g, p}).permute({0, 2, 4, 1, 3, 5}).reshape({B, g * g, C * p * p});
    torch::Tensor h = stem_->forward(patches) + pos_->first_rows(g * g);
    record("embed", h, {Role::Embedding, false});
    for (size_t l = 0; l < blocks_.size(); ++l) {
      h = blocks_[l]->forward(h);
      if (recording()) record(fmt::format("block{}", l + 1), h, {Role::Hidden, true});
    }
    torch::Tensor pooled = ln_f_->forward(h).mean(1);  // seed 002 eq. (1.23): mean over tokens
    torch::Tensor logits = head_->forward(pooled) + (bias_mult_ == 1.0 ? head_bias_ : head_bias_ * bias_mult_);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  int64_t grid_ = 1;
  std::shared_ptr<Dense> stem_, head_;
  std::shared_ptr<Lookup> pos_;
  torch::nn::ModuleList list_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<NormGain> ln_f_;
  torch::Tensor head_bias_;
  double bias_mult_ = 1;
};

}  // namespace

std::shared_ptr<Model> make_vit(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<Vit>(cfg, ctx, hp);
}

}  // namespace scaleinv
