// Adam (L2 weight decay in the gradient), AdamW (decoupled decay, coupled or independent; seed 000
// A.2.2) and sign descent (seed 000 eq. 15's momentumless Adam without epsilon).
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  p -= lr_t * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps_t)
// beta1 = 0 keeps no first moment (m = g). With eps = 0 an entry whose gradient was always exactly 0
// gets no update (not 0/0).
#include <cmath>
#include <limits>

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/runtime/torch_compat.h"
#include "engine/optim/optim_detail.h"

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
  // decay and epsilon (a handful of roles), the same update as the loop below. AdamW's decoupled
  // decay fraction (coupled mode: base LR x schedule x wd; independent: wd) is passed as
  // weight_decay divided by the tensor's LR, since the kernel multiplies the two; Adam's L2
  // coefficient goes in as it is, the kernel adding it times p to the gradient as the loop does.
  // An ensemble group ([E, ...], per-member LR and weight decay) goes in member by member: its
  // slice p[e] joins the set of member e's LR and decay, so an ensemble of E members steps in about
  // E x roles launches instead of a dozen or more per tensor. False where it does not apply (sign
  // descent, beta1 = 0, eps = 0, libtorch 1.13, the CPU unless a compat::FusedAdamScope asks for it,
  // anywhere inside one that says Off): the loop runs.
  bool fused_step(double lr_factor) {
    if (sign_ || !(cfg_.beta1 > 0) || !(cfg_.eps > 0) || groups_.empty()) return false;
    const int64_t t = states_.front().t + 1;
    for (const GroupState& st : states_)
      if (st.t + 1 != t) return false;
    // Every tensor is asked before any set is stepped: a set that fell back after another was
    // stepped by the kernel would step that one twice. The moments (allocated here only on a
    // device the kernel takes: the loop keeps its own elsewhere) take the param's layout;
    // fused_adam_takes also asks for a defined gradient.
    for (size_t i = 0; i < groups_.size(); ++i) {
      const torch::Tensor& p = groups_[i].param;
      if (!p.defined() || !compat::fused_adam_takes(p, p.grad(), p, p)) return false;
      torch::Tensor& m = states_[i].buf["m"];
      if (!m.defined()) m = torch::zeros_like(p);
      torch::Tensor& v = states_[i].buf["v"];
      if (!v.defined()) v = torch::zeros_like(p);
      if (!compat::fused_adam_takes(p, p.grad(), m, v)) return false;
    }
    struct Set {
      std::vector<torch::Tensor> p, g, m, v;
    };
    std::map<std::tuple<double, double, double>, Set> sets;  // (lr, weight_decay, eps) -> tensors
    // The kernel's weight_decay for a tensor of LR lr whose decay is wd_t (for AdamW the
    // decoupled_fraction over lr, for Adam the L2 coefficient), or false where AdamW would decay a
    // tensor whose LR is 0 (frac / lr undefined): the loop runs then.
    auto kernel_lr_wd = [&](double lr, double wd_t, double base_lr_t, double* wd) {
      const double frac = decoupled_fraction(cfg_, base_lr_t, wd_t);
      if (!l2_ && frac != 0 && !(lr > 0)) return false;
      *wd = l2_ ? wd_t : (frac == 0 ? 0.0 : frac / lr);
      return true;
    };
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      GroupState& st = states_[i];
      const double eps = cfg_.eps * g.eps_mult;
      if (!g.member_lr.defined()) {
        const double lr = group_lr(g, lr_factor);
        double wd = 0;
        if (!kernel_lr_wd(lr, group_wd(g), cfg_.lr * lr_factor, &wd)) return false;
        Set& s = sets[{lr, wd, eps}];
        s.p.push_back(g.param);
        s.g.push_back(g.param.grad());
        s.m.push_back(st.buf.at("m"));
        s.v.push_back(st.buf.at("v"));
        continue;
      }
      // member_decay's and the loop's per-member values, from host copies read once
      MemberSlices& ms = members_[i];
      if (ms.lr.empty()) {
        ms.lr = host_values(g.member_lr);
        ms.wd = host_values(g.member_wd);
      }
      ms.refresh(g.param, st.buf.at("m"), st.buf.at("v"));
      const std::vector<torch::Tensor> grads = g.param.grad().unbind(0);
      if (grads.size() != ms.lr.size() || ms.wd.size() != ms.lr.size()) return false;
      for (size_t e = 0; e < ms.lr.size(); ++e) {
        const double lr = ms.lr[e] * lr_factor * g.lr_mult;
        double wd = 0;
        if (!kernel_lr_wd(lr, ms.wd[e] * g.wd_mult, ms.lr[e] * lr_factor, &wd)) return false;
        Set& s = sets[{lr, wd, eps}];
        s.p.push_back(ms.p[e]);
        s.g.push_back(grads[e]);
        s.m.push_back(ms.m[e]);
        s.v.push_back(ms.v[e]);
      }
    }
    for (auto& [key, s] : sets)
      if (!compat::fused_adam(l2_ ? compat::WeightDecay::Coupled : compat::WeightDecay::Decoupled, s.p, s.g, s.m, s.v,
                              t, std::get<0>(key), cfg_.beta1, cfg_.beta2, std::get<1>(key), std::get<2>(key)))
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

  // An ensemble group's member slices for the fused path: views p[e], m[e], v[e], rebuilt when
  // the memory behind them is replaced (a checkpoint's load assigns new moments); the views keep
  // the old memory alive, so a new tensor cannot reuse its address. With them, the members' base
  // LR and weight decay as doubles (the [E, 1, ...] tensors' values: fixed for a run).
  struct MemberSlices {
    std::vector<double> lr, wd;
    std::vector<torch::Tensor> p, m, v;
    const void* of[3] = {nullptr, nullptr, nullptr};
    void refresh(const torch::Tensor& param, const torch::Tensor& mb, const torch::Tensor& vb) {
      const void* now[3] = {param.data_ptr(), mb.data_ptr(), vb.data_ptr()};
      if (std::equal(now, now + 3, of)) return;
      p = param.unbind(0);
      m = mb.unbind(0);
      v = vb.unbind(0);
      std::copy(now, now + 3, of);
    }
  };
  static std::vector<double> host_values(const torch::Tensor& member) {
    const torch::Tensor h = member.detach().to(torch::kCPU, torch::kFloat64).contiguous().flatten();
    return {h.data_ptr<double>(), h.data_ptr<double>() + h.numel()};
  }

  bool l2_;    // adam: wd*p is added to the gradient
  bool sign_;  // sign descent
  std::vector<GroupState> states_;
  std::map<size_t, MemberSlices> members_;  // by group index, ensemble groups on the fused path
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Adam>(cfg, std::move(groups));
}

}  // namespace scaleinv::optim_detail
