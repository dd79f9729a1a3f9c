// SGD with momentum, torch's convention: d = g + wd*p (L2); buf = momentum*buf + d; p -= lr*buf.
#include "optim/optim_detail.h"

namespace scaleinv::optim_detail {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(OptimConfig cfg, std::vector<ParamGroup> groups) : Optimizer(std::move(cfg), std::move(groups)) {
    states_.resize(groups_.size());
  }

  void step(double lr_factor = 1.0) override {
    torch::NoGradGuard no_grad;
    clip_gradients();
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      if (!g.param.defined() || !g.param.grad().defined()) continue;
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[i];
      const double lr = cfg_.lr * lr_factor * g.lr_mult;
      const double wd = cfg_.weight_decay * g.wd_mult;
      if (cfg_.momentum > 0) {
        torch::Tensor& buf = st.buf["momentum"];
        if (!buf.defined()) buf = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
        buf.mul_(cfg_.momentum).add_(grad);
        if (wd != 0) buf.add_(p, wd);
        p.add_(buf, -lr);
      } else {
        // p -= lr * (g + wd*p), without a temporary.
        if (wd != 0) p.mul_(1.0 - lr * wd);
        p.add_(grad, -lr);
      }
      ++st.t;
    }
    ++steps_;
  }

  void save(torch::serialize::OutputArchive& ar) const override { save_states(ar, cfg_.kind, steps_, groups_, states_); }
  void load(torch::serialize::InputArchive& ar) override {
    load_states(ar, cfg_.kind, &steps_, groups_, &states_, {"momentum"},
                [](const std::string&, const torch::Tensor& p) { return p.sizes().vec(); });
  }

 private:
  std::vector<GroupState> states_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Sgd>(cfg, std::move(groups));
}

}  // namespace scaleinv::optim_detail
