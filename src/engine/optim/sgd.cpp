// SGD with momentum, torch's convention: d = g + wd*p (L2); buf = momentum*buf + d; p -= lr*buf.
#include "engine/optim/optim_detail.h"

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
    for_each_group_with_grad(lr_factor, [&](ParamGroup& g, size_t i, double lr, double wd) {
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[i];
      // The same kernels in the same order as torch::optim::SGD, so results agree bit for bit.
      const bool members = g.member_lr.defined();  // ensemble: per-member base LR and weight decay
      torch::Tensor d = grad;
      if (members) {
        d = at::addcmul_out(scratch_like(st.scratch, p), grad, p, g.member_wd * g.wd_mult);
      } else if (wd != 0) {
        d = at::add_out(scratch_like(st.scratch, p), grad, p, wd);
      }
      torch::Tensor dir = d;
      if (cfg_.momentum > 0) {
        torch::Tensor& buf = st.buf["momentum"];
        if (!buf.defined()) {
          buf = d.clone(torch::MemoryFormat::Contiguous);
        } else {
          buf.mul_(cfg_.momentum).add_(d);
        }
        dir = buf;
      }
      if (members) {
        p.addcmul_(dir, g.member_lr, -lr_factor * g.lr_mult);
      } else {
        p.add_(dir, -lr);
      }
      ++st.t;
    });
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
