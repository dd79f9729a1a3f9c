// Adam (L2 weight decay in the gradient), AdamW (decoupled decay, coupled or independent; seed 000
// A.2.2) and sign descent (seed 000 eq. 15's momentumless Adam without epsilon).
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  p -= lr_t * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps_t)
// beta1 = 0 keeps no first moment (m = g). With eps = 0 an entry whose gradient was always exactly 0
// gets no update (not 0/0).
#include <cmath>
#include <limits>

#include <map>
#include <tuple>

#include "core/torch_compat.h"
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
    if (fused_step(lr_factor)) return;
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    for_each_group_with_grad(lr_factor, [&](ParamGroup& g, size_t i, double lr, double wd) {
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[i];
      const int64_t t = ++st.t;

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
        return;
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
    });
    ++steps_;
  }

  // AdamW and Adam on CUDA: one fused multi-tensor kernel per set of tensors that share LR, weight
  // decay and epsilon multipliers (a handful of roles), the same update as the loop below. AdamW's
  // decoupled decay fraction (coupled mode: base LR x schedule x wd; independent: wd) is passed as
  // weight_decay divided by the tensor's LR, since the kernel multiplies the two; Adam's L2
  // coefficient (group_wd) goes in as it is, the kernel adding it times p to the gradient as the
  // loop does. False where it does not apply (sign descent, ensembles, the CPU, beta1 = 0, eps = 0,
  // libtorch 1.13): the loop runs.
  bool fused_step(double lr_factor) {
    if (sign_ || !(cfg_.beta1 > 0) || !(cfg_.eps > 0) || groups_.empty()) return false;
    const int64_t t = states_.front().t + 1;
    for (const GroupState& st : states_)
      if (st.t + 1 != t) return false;
    // Every tensor is asked before any set is stepped: a set that fell back after another was
    // stepped by the kernel would step that one twice. The moments (CUDA only: the loop keeps its
    // own on the CPU) take the param's layout; fused_adam_takes also asks for a defined gradient.
    for (size_t i = 0; i < groups_.size(); ++i) {
      const torch::Tensor& p = groups_[i].param;
      if (groups_[i].member_lr.defined() || !p.defined() || !p.is_cuda()) return false;
      torch::Tensor& m = states_[i].buf["m"];
      if (!m.defined()) m = torch::zeros_like(p);
      torch::Tensor& v = states_[i].buf["v"];
      if (!v.defined()) v = torch::zeros_like(p);
      if (!compat::fused_adam_takes(p, p.grad(), m, v)) return false;
    }
    struct Set {
      std::vector<torch::Tensor> p, g, m, v;
      double lr = 0, wd = 0, eps = 0;
    };
    std::map<std::tuple<double, double, double>, Set> sets;
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      GroupState& st = states_[i];
      const double lr = group_lr(g, lr_factor);
      const double wd_t = group_wd(g);
      const double frac = cfg_.wd_mode == "independent" ? wd_t : cfg_.lr * lr_factor * wd_t;  // decoupled_decay's
      if (!l2_ && frac != 0 && !(lr > 0)) return false;
      Set& s = sets[{g.lr_mult, g.wd_mult, g.eps_mult}];
      s.lr = lr;
      s.wd = l2_ ? wd_t : (frac == 0 ? 0.0 : frac / lr);
      s.eps = cfg_.eps * g.eps_mult;
      s.p.push_back(g.param);
      s.g.push_back(g.param.grad());
      s.m.push_back(st.buf.at("m"));
      s.v.push_back(st.buf.at("v"));
    }
    for (auto& [key, s] : sets)
      if (!compat::fused_adam(l2_ ? compat::WeightDecay::Coupled : compat::WeightDecay::Decoupled, s.p, s.g, s.m, s.v,
                              t, s.lr, cfg_.beta1, cfg_.beta2, s.wd, s.eps))
        return false;
    for (GroupState& st : states_) st.t = t;
    ++steps_;
    return true;
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
