// Adafactor (Shazeer & Stern 2018) with a fixed second-moment decay beta2 and bias correction:
//   G2 = g^2 + eps1,  eps1 = (eps * eps_mult)^2
//   tensors with dim >= 2, viewed as [size(0), rest]: R = b2*R + (1-b2)*rowmean(G2),
//     C = b2*C + (1-b2)*colmean(G2),  Vhat = R_i C_j / mean(R) / (1 - b2^t)
//   vectors and scalars: V = b2*V + (1-b2)*G2,  Vhat = V / (1 - b2^t)
//   U = g / sqrt(Vhat);  U /= max(1, RMS(U))                                   (update clipping, d = 1)
//   beta1 > 0: M = b1*M + (1-b1)*U;  U = M / (1 - b1^t)
//   p -= lr_t * max(1e-3, RMS(p_before_step)) * U                              (relative step; seed 000 eq. 15)
// and decoupled weight decay as AdamW. No host synchronisation: the RMS factors stay tensors.
#include <cmath>

#include "engine/optim/optim_detail.h"

namespace scaleinv::optim_detail {
namespace {

constexpr double kMinScale = 1e-3;  // Shazeer & Stern's eps2: floor on RMS(p)
constexpr double kClip = 1.0;       // Shazeer & Stern's d: RMS(update) <= d

bool factored(const torch::Tensor& p) { return p.dim() >= 2 && p.numel() > 0; }

class Adafactor final : public Optimizer {
 public:
  Adafactor(OptimConfig cfg, std::vector<ParamGroup> groups) : Optimizer(std::move(cfg), std::move(groups)) {
    reject_members(groups_, "adafactor takes no ensemble groups (its factored moments would mix members)");
    states_.resize(groups_.size());
  }

  void step(double lr_factor = 1.0) override {
    torch::NoGradGuard no_grad;
    clip_gradients();
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      if (!has_grad(g) || g.param.numel() == 0) continue;
      torch::Tensor p = g.param;
      const torch::Tensor grad = g.param.grad().contiguous();
      GroupState& st = states_[i];
      const int64_t t = ++st.t;
      const double lr = group_lr(g, lr_factor);
      const double wd = group_wd(g);
      const double eps1 = std::pow(cfg_.eps * g.eps_mult, 2);
      const double inv_sqrt_n = 1.0 / std::sqrt(static_cast<double>(p.numel()));

      const torch::Tensor scale = (p.norm() * inv_sqrt_n).clamp_min(kMinScale);  // RMS(p) before the step
      decoupled_decay(cfg_, p, cfg_.lr * lr_factor, wd);

      torch::Tensor& u = scratch_like(st.scratch, grad);
      at::mul_out(u, grad, grad);
      u.add_(eps1);
      if (factored(p)) {
        const int64_t rows = p.size(0), cols = p.numel() / rows;
        torch::Tensor u2 = u.view({rows, cols});
        torch::Tensor& r = st.buf["row"];
        torch::Tensor& c = st.buf["col"];
        if (!r.defined()) r = torch::zeros({rows}, grad.options());
        if (!c.defined()) c = torch::zeros({cols}, grad.options());
        r.mul_(b2).add_(u2.mean(1), 1.0 - b2);
        c.mul_(b2).add_(u2.mean(0), 1.0 - b2);
        const torch::Tensor rf = (r / r.mean()).rsqrt_().unsqueeze(1);
        const torch::Tensor cf = c.rsqrt().unsqueeze(0);
        at::mul_out(u2, rf, cf);  // 1/sqrt(R_i C_j / mean(R))
      } else {
        torch::Tensor& v = st.buf["v"];
        if (!v.defined()) v = torch::zeros_like(grad, torch::MemoryFormat::Contiguous);
        v.mul_(b2).add_(u, 1.0 - b2);
        at::rsqrt_out(u, v);
      }
      u.mul_(grad).mul_(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))));
      u.div_((u.norm() * inv_sqrt_n / kClip).clamp_min(1.0));

      double step_size = lr;
      if (b1 > 0) {
        torch::Tensor& m = st.buf["m"];
        if (!m.defined()) m = torch::zeros_like(grad, torch::MemoryFormat::Contiguous);
        m.mul_(b1).add_(u, 1.0 - b1);
        at::mul_out(u, m, scale);
        step_size = lr / (1.0 - std::pow(b1, static_cast<double>(t)));
      } else {
        u.mul_(scale);
      }
      p.add_(u.view(p.sizes()), -step_size);
    }
    ++steps_;
  }

  void save(torch::serialize::OutputArchive& ar) const override { save_states(ar, cfg_.kind, steps_, groups_, states_); }
  void load(torch::serialize::InputArchive& ar) override {
    load_states(ar, cfg_.kind, &steps_, groups_, &states_, {"row", "col", "v", "m"},
                [](const std::string& key, const torch::Tensor& p) -> std::vector<int64_t> {
                  if (key == "row") return {p.size(0)};
                  if (key == "col") return {p.numel() / p.size(0)};
                  return p.sizes().vec();
                });
  }

 private:
  std::vector<GroupState> states_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adafactor(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Adafactor>(cfg, std::move(groups));
}

}  // namespace scaleinv::optim_detail
