// Adam (L2 weight decay in the gradient), AdamW (decoupled decay, coupled or independent; seed 000
// A.2.2) and sign descent (seed 000 eq. 15's momentumless Adam without epsilon).
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  p -= lr_t * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps_t)
// beta1 = 0 keeps no first moment (m = g). With eps = 0 an entry whose gradient was always exactly 0
// gets no update (not 0/0).
#include <cmath>
#include <limits>

#include "optim/optim_detail.h"

namespace scaleinv::optim_detail {
namespace {

class Adam final : public Optimizer {
 public:
  Adam(OptimConfig cfg, std::vector<ParamGroup> groups)
      : Optimizer(std::move(cfg), std::move(groups)), l2_(cfg_.kind == "adam"), sign_(cfg_.kind == "sign") {
    states_.resize(groups_.size());
  }

  void step(double lr_factor = 1.0) override {
    torch::NoGradGuard no_grad;
    clip_gradients();
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      if (!g.param.defined() || !g.param.grad().defined()) continue;
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[i];
      const int64_t t = ++st.t;
      const double lr = cfg_.lr * lr_factor * g.lr_mult;
      const double wd = cfg_.weight_decay * g.wd_mult;

      // Ensembles: per-member base LR and weight decay ([E, 1, ...] tensors, see ParamGroup).
      const bool members = g.member_lr.defined();
      auto decay = [&] {
        if (members) {
          member_decay(cfg_, g, p, lr_factor);
        } else {
          decoupled_decay(cfg_, p, cfg_.lr * lr_factor, wd);
        }
      };
      if (sign_) {
        decay();
        torch::Tensor& s = scratch_like(st.scratch, p);
        at::sign_out(s, grad);
        if (members) {
          p.addcmul_(s, g.member_lr, -lr_factor * g.lr_mult);
        } else {
          p.add_(s, -lr);
        }
        continue;
      }

      torch::Tensor geff = grad;
      if (l2_) {
        if (members) {
          geff = at::addcmul_out(scratch_like(st.scratch2, p), grad, p, g.member_wd * g.wd_mult);
        } else if (wd != 0) {
          geff = at::add_out(scratch_like(st.scratch2, p), grad, p, wd);
        }
      } else {
        decay();
      }
      torch::Tensor m = geff;
      if (b1 > 0) {
        torch::Tensor& mb = st.buf["m"];
        if (!mb.defined()) mb = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
        mb.mul_(b1).add_(geff, 1.0 - b1);
        m = mb;
      }
      torch::Tensor& v = st.buf["v"];
      if (!v.defined()) v = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
      v.mul_(b2).addcmul_(geff, geff, 1.0 - b2);

      const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
      const double eps = cfg_.eps * g.eps_mult;
      torch::Tensor& denom = scratch_like(st.scratch, p);
      at::sqrt_out(denom, v);
      denom.div_(std::sqrt(bc2)).add_(eps);
      if (!(eps > 0)) denom.clamp_min_(tiny(p.scalar_type()));
      if (members) {
        // the same product as addcdiv's (value * m) / denom, with a per-member value
        torch::Tensor& u = scratch_like(st.scratch2, p);
        at::mul_out(u, m, g.member_lr * (-lr_factor * g.lr_mult / bc1));
        p.add_(u.div_(denom));
      } else {
        p.addcdiv_(m, denom, -lr / bc1);
      }
    }
    ++steps_;
  }

  void save(torch::serialize::OutputArchive& ar) const override { save_states(ar, cfg_.kind, steps_, groups_, states_); }
  void load(torch::serialize::InputArchive& ar) override {
    load_states(ar, cfg_.kind, &steps_, groups_, &states_, {"m", "v"},
                [](const std::string&, const torch::Tensor& p) { return p.sizes().vec(); });
  }

 private:
  static double tiny(c10::ScalarType t) {
    if (t == torch::kFloat64) return std::numeric_limits<double>::min();
    if (t == torch::kFloat16) return 6.103515625e-05;
    return std::numeric_limits<float>::min();  // float32, bfloat16
  }

  bool l2_;    // adam: wd*p is added to the gradient
  bool sign_;  // sign descent
  std::vector<GroupState> states_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Adam>(cfg, std::move(groups));
}

}  // namespace scaleinv::optim_detail
