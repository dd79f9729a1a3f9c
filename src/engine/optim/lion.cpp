// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an
// interpolation between the momentum and the gradient, with decoupled weight decay.
//   c = b1*m + (1-b1)*g;  p *= 1 - fraction (decoupled_decay);  p -= lr_t * sign(c);  m = b2*m + (1-b2)*g
// beta1 and beta2 are optim.beta1 and optim.beta2 (the paper's defaults: 0.9 and 0.99). Its update
// has entries of size lr_t whatever the gradient's scale, as sign descent's, so it takes Adam's
// column of the table (optimizer_kinds.cpp).
#include "engine/optim/optim_detail.h"

namespace scaleinv::optim_detail {
namespace {

class Lion final : public Optimizer {
 public:
  Lion(OptimConfig cfg, std::vector<ParamGroup> groups) : Optimizer(std::move(cfg), std::move(groups)) {
    reject_members(groups_, "lion takes no ensemble groups");
    states_.resize(groups_.size());
  }

  void step(double lr_factor = 1.0) override {
    torch::NoGradGuard no_grad;
    clip_gradients();
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    for_each_group_with_grad(lr_factor, [&](ParamGroup& g, size_t i, double lr, double wd) {
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[i];
      torch::Tensor& m = st.buf["m"];
      if (!m.defined()) m = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
      torch::Tensor& c = scratch_like(st.scratch, p);
      at::add_out(c, m * b1, grad, 1 - b1);
      decoupled_decay(cfg_, p, cfg_.lr * lr_factor, wd);
      p.add_(c.sign_(), -lr);
      m.mul_(b2).add_(grad, 1 - b2);
      ++st.t;
    });
    ++steps_;
  }

  void save(torch::serialize::OutputArchive& ar) const override { save_states(ar, cfg_.kind, steps_, groups_, states_); }
  void load(torch::serialize::InputArchive& ar) override {
    load_states(ar, cfg_.kind, &steps_, groups_, &states_, {"m"},
                [](const std::string&, const torch::Tensor& p) { return p.sizes().vec(); });
  }

 private:
  std::vector<GroupState> states_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lion(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Lion>(cfg, std::move(groups));
}

}  // namespace scaleinv::optim_detail
