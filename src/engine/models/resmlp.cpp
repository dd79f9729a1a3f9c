// The residual MLP of seed 004 (Depth-muP, Yang et al. 2023), eq. (1) / section 6:
//   x_0 = d^-a_U U xi                                   U: [d, in_dim], dense embedding, base std 1/sqrt(in_dim)
//   h_l = d^-a_W W_l ln(x_{l-1})                        W_l: [d, d], role Hidden, in block
//   x_l = x_{l-1} + a k^-branch MS(phi(h_l))            l = 1..L   (a = hp.branch_mult, k = L/L0)
//   f   = d^-a_V V x_L                                  V: [n_classes, d], role Readout
// ln is a parameterless LayerNorm when cfg.pre_ln (seed 004 App. L.2, Fig. 13), else the identity;
// MS(x) = x - mean(x) (seed 004 4.2) when cfg.mean_subtract. Block depth 2 (seed 004 App. K, eq. 9):
//   g_l = W_l2 phi(W_l1 ln(x_{l-1})),  x_l = x_{l-1} + a k^-branch MS(phi(g_l)).
// Records: "x0", "h{l}" (the block's first pre-activation), "g{l}" (block depth 2: the second),
// "x{l}", "logits".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/util/errors.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class ResMlp : public ModelBase {
 public:
  ResMlp(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp)
      : ModelBase(cfg, ctx, hp), act_(parse_activation(cfg.activation)) {
    const int64_t d = cfg.width;
    in_ = register_module("input", dense_input(cfg.in_dim, d, ctx, hp));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    const auto hid = DenseOptions(Role::Hidden).in_block(true).base_std(width_fan_in_std(d, ctx));
    for (int l = 0; l < cfg.depth; ++l) {
      auto block = std::make_shared<torch::nn::Module>();
      w1_.push_back(block->register_module("w1", std::make_shared<Dense>(d, d, hid, ctx, hp)));
      if (cfg.block_depth == 2) w2_.push_back(block->register_module("w2", std::make_shared<Dense>(d, d, hid, ctx, hp)));
      blocks_->push_back(block);
    }
    readout_ = register_module(
        "readout", std::make_shared<Dense>(d, cfg.n_classes,
                                           DenseOptions(Role::Readout).base_std(width_fan_in_std(d, ctx)).extra_mult(hp.output_mult).zero_init(cfg.zero_readout),
                                           ctx, hp));
    // seed 004 eq. (1): block multiplier a L^-alpha, with L measured in units of the base depth (L.2).
    beta_ = hp.branch_mult * branch_multiplier(ctx.table, ctx.k());
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    // [B, ...] features ([E, B, ...] in an ensemble), flattened to [B, in_dim] ([E, B, in_dim]).
    const int64_t lead = ctx_.members > 0 ? 2 : 1;
    torch::Tensor xi = input.dim() > lead + 1 ? input.flatten(lead) : input;
    check_input(xi);
    torch::Tensor x = in_->forward(xi);
    record("x0", x, {Role::Embedding, false});
    for (size_t l = 0; l < w1_.size(); ++l) {
      const UnitScaling& u = ctx_.table.unit;
      auto branch_of = [&](const torch::Tensor& xin) {
        torch::Tensor h = w1_[l]->forward(cfg_.pre_ln ? layer_norm(xin) : xin);
        if (recording()) record(fmt::format("h{}", l + 1), h, {Role::Hidden, true});
        if (!w2_.empty()) {
          h = w2_[l]->forward(activate(act_, h, u));
          if (recording()) record(fmt::format("g{}", l + 1), h, {Role::Hidden, true});
        }
        torch::Tensor branch = activate(act_, h, u);
        return cfg_.mean_subtract ? mean_subtract(branch) : branch;
      };
      if (u.residual || u.backward) {  // unit scaling: the tau rule, the branch's gradient re-weighted
        double K = w1_[l]->grad_ratio() * activation_grad_ratio(act_, u);
        if (!w2_.empty()) K *= w2_[l]->grad_ratio() * activation_grad_ratio(act_, u);
        x = unit_residual(x, branch_of, static_cast<int>(l) + 1, beta_, K, u);
      } else {
        torch::Tensor branch = branch_of(x);
        x = beta_ == 1.0 ? x + branch : x + branch * beta_;
      }
      if (recording()) record(fmt::format("x{}", l + 1), x, {Role::Hidden, true});
    }
    torch::Tensor logits = readout_->forward(x);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  void check_input(const torch::Tensor& xi) const {
    const int64_t want_dim = ctx_.members > 0 ? 3 : 2;
    if (xi.dim() != want_dim || xi.size(-1) != cfg_.in_dim || !xi.is_floating_point())
      throw UserError("config", "model.in_dim",
                      fmt::format("resmlp expects [batch, {}] float features, got shape {}", cfg_.in_dim,
                                  fmt::join(xi.sizes().vec(), "x")),
                      "set model.in_dim to the data's feature count (784 for Fashion-MNIST)");
  }

  Activation act_;
  std::shared_ptr<Dense> in_, readout_;
  torch::nn::ModuleList blocks_;
  std::vector<std::shared_ptr<Dense>> w1_, w2_;
  double beta_ = 1;
};

}  // namespace

std::shared_ptr<Dense> dense_input(int64_t in_dim, int64_t width, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<Dense>(in_dim, width,
                                 DenseOptions(Role::Embedding).base_std(1.0 / std::sqrt(double(in_dim))).extra_mult(hp.embed_mult),
                                 ctx, hp);
}

std::shared_ptr<Model> make_resmlp(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<ResMlp>(cfg, ctx, hp);
}

}  // namespace scaleinv
