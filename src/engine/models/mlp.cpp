// The muP paper's MLP (Yang et al. (muP), Tensor Programs V, 2022; the coordinate-check model of
// microsoft/mup): dense input, L hidden layers, readout, no biases, no residuals, the nonlinearity
// after every layer but the last:
//   h_1     = phi(d^-a_0 W_0 x)          W_0: [d, in_dim], role Embedding (fan-in fixed)
//   h_{l+1} = phi(d^-a_l W_l h_l)        W_l: [d, d], role Hidden, l = 1..L
//   logits  = d^-a_{L+1} W_{L+1} h_{L+1} W_{L+1}: [n_classes, d], role Readout
// The rows of width_theory(L) map one to one (as the bigram's; phi keeps Theta(1) at Theta(1)).
// depth = 1 is the paper's 784 -> w -> w -> 10. Inputs [B, in_dim] floats (images are flattened).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/util/errors.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class MlpModel : public ModelBase {
 public:
  MlpModel(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp)
      : ModelBase(cfg, ctx, hp), act_(parse_activation(cfg.activation)) {
    const int64_t d = cfg.width;
    in_ = register_module("input", dense_input(cfg.in_dim, d, ctx, hp));
    layers_ = register_module("layers", torch::nn::ModuleList());
    for (int l = 0; l < cfg.depth; ++l) {
      auto w = std::make_shared<Dense>(d, d, DenseOptions(Role::Hidden).base_std(width_fan_in_std(d, ctx)), ctx, hp);
      layers_->push_back(w);
      hidden_.push_back(w);
    }
    readout_ = register_module(
        "readout", std::make_shared<Dense>(d, cfg.n_classes,
                                           DenseOptions(Role::Readout).base_std(width_fan_in_std(d, ctx)).extra_mult(hp.output_mult).zero_init(cfg.zero_readout),
                                           ctx, hp));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    const int64_t lead = ctx_.members > 0 ? 2 : 1;
    const torch::Tensor xi = input.dim() > lead + 1 ? input.flatten(lead) : input;
    if (xi.dim() != lead + 1 || xi.size(-1) != cfg_.in_dim || !xi.is_floating_point())
      throw UserError("config", "model.in_dim",
                      fmt::format("mlp expects [batch, {}] float features, got shape {}", cfg_.in_dim,
                                  fmt::join(xi.sizes().vec(), "x")),
                      "set model.in_dim to the data's feature count (784 for Fashion-MNIST)");
    const UnitScaling& u = ctx_.table.unit;
    torch::Tensor h = activate(act_, in_->forward(xi), u);
    record("h1", h, {Role::Embedding, false});
    for (size_t l = 0; l < hidden_.size(); ++l) {
      h = activate(act_, hidden_[l]->forward(h), u);
      if (recording()) record(fmt::format("h{}", l + 2), h, {Role::Hidden, false});
    }
    torch::Tensor logits = readout_->forward(h);
    record("logits", logits, {Role::Readout, false});
    return logits;
  }

 private:
  Activation act_;
  std::shared_ptr<Dense> in_, readout_;
  torch::nn::ModuleList layers_;
  std::vector<std::shared_ptr<Dense>> hidden_;
};

}  // namespace

std::shared_ptr<Model> make_mlp(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  return std::make_shared<MlpModel>(cfg, ctx, hp);
}

}  // namespace scaleinv
