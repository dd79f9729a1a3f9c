// Muon (ref. [muon]): momentum with Nesterov, the update of every hidden, attention and expert matrix
// orthogonalized by Newton-Schulz and scaled by its shape (engine/optim/muon.h), decoupled weight decay;
// embeddings, the readout and vector-like tensors on AdamW (engine/optim/adam.cpp), as the reference does.
// The formulas are those of OptimConfig's comment (engine/optim/optimizer.h).
#include "engine/optim/muon.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/optim/optim_detail.h"

namespace scaleinv {

torch::Tensor newton_schulz(const torch::Tensor& m, int64_t steps, double eps, c10::ScalarType compute) {
  TORCH_CHECK(m.dim() >= 2, "newton_schulz: needs a matrix, got ", m.dim(), " dimensions");
  const bool tall = m.size(-2) > m.size(-1);
  torch::Tensor x = tall ? m.transpose(-2, -1) : m;
  const int64_t rows = x.size(-2), cols = x.size(-1);
  x = x.reshape({-1, rows, cols}).to(compute);  // a batch of matrices: one baddbmm per product
  // ||M||_F per matrix, in fp32 at least (a bf16 sum of squares loses the scale).
  const auto acc = compute == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const torch::Tensor norm = x.to(acc).pow(2).sum({-2, -1}, /*keepdim=*/true).sqrt();
  x = (x.to(acc) / (norm + eps)).to(compute);
  for (int64_t i = 0; i < steps; ++i) {
    const torch::Tensor a = torch::bmm(x, x.transpose(-2, -1));                 // X X^T   [rows, rows]
    const torch::Tensor b = torch::baddbmm(a, a, a, /*beta=*/kNsB, /*alpha=*/kNsC);  // b A + c A^2
    x = torch::baddbmm(x, b, x, /*beta=*/kNsA, /*alpha=*/1.0);                  // a X + B X
  }
  std::vector<int64_t> shape = m.sizes().vec();
  if (tall) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  x = x.reshape(shape);
  if (tall) x = x.transpose(-2, -1);
  return x.to(m.scalar_type()).contiguous();
}

double muon_scale_factor(MuonScale rule, int64_t fan_out, int64_t fan_in) {
  const double out = static_cast<double>(fan_out), in = static_cast<double>(fan_in);
  if (rule == MuonScale::Rms) return 0.2 * std::sqrt(std::max(in, out));
  return std::sqrt(std::max(1.0, out / in));
}

namespace optim_detail {
namespace {

// The leading dimensions of a group's tensor that stack matrices: a member's, an expert's.
int64_t stack_dims(const ParamGroup& g) { return (g.member_lr.defined() ? 1 : 0) + (g.role == Role::Expert ? 1 : 0); }

class Muon final : public Optimizer {
 public:
  Muon(OptimConfig cfg, std::vector<ParamGroup> groups)
      : Optimizer(std::move(cfg), std::move(groups)), rule_(muon_scale_of(cfg_)) {
    std::vector<ParamGroup> rest;
    for (size_t i = 0; i < groups_.size(); ++i) {
      const ParamGroup& g = groups_[i];
      // Stacks of matrices: an ensemble's tensors carry a leading member dimension, a mixture's
      // experts a leading expert one ([members,] [experts,] out, in, ...).
      if (muon_orthogonalized(g.role) && g.param.defined() && g.param.dim() >= stack_dims(g) + 2) {
        muon_.push_back(i);
      } else {
        rest.push_back(g);
      }
    }
    states_.resize(muon_.size());
    OptimConfig adamw = cfg_;
    adamw.kind = "adamw";
    adamw.clip_grad_norm = 0;  // clipped once, over every tensor, in step()
    adamw_ = make_adam(adamw, std::move(rest));
  }

  void step(double lr_factor = 1.0) override {
    torch::NoGradGuard no_grad;
    clip_gradients();
    const double mu = cfg_.muon_momentum;
    for (size_t j = 0; j < muon_.size(); ++j) {
      ParamGroup& g = groups_[muon_[j]];
      if (!g.param.grad().defined()) continue;
      torch::Tensor p = g.param;
      const torch::Tensor& grad = g.param.grad();
      GroupState& st = states_[j];
      ++st.t;
      torch::Tensor& buf = st.buf["momentum"];
      if (!buf.defined()) buf = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
      buf.mul_(mu).add_(grad, 1.0 - mu);
      torch::Tensor dir = buf;
      if (cfg_.nesterov) dir = scratch_like(st.scratch, p).copy_(grad).mul_(1.0 - mu).add_(buf, mu);
      // The matrix each update orthogonalizes: [out, in] (trailing dims flattened), per member and
      // per expert.
      const bool members = g.member_lr.defined();
      const int64_t lead = stack_dims(g) + 1;
      std::vector<int64_t> mshape(p.sizes().begin(), p.sizes().begin() + lead);
      mshape.push_back(-1);
      const int64_t fan_out = p.size(lead - 1);
      int64_t stacked = 1;
      for (int64_t i = 0; i + 1 < lead; ++i) stacked *= p.size(i);
      const int64_t fan_in = p.numel() / (stacked * fan_out);
      const c10::ScalarType compute =
          p.is_cuda() ? torch::kBFloat16 : (p.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
      const torch::Tensor o =
          newton_schulz(dir.reshape(mshape), cfg_.ns_steps, cfg_.muon_eps * g.eps_mult, compute).view(p.sizes());
      const double scale = muon_scale_factor(rule_, fan_out, fan_in);
      if (members) {
        member_decay(cfg_, g, p, lr_factor);
        p.addcmul_(o, g.member_lr, -lr_factor * g.lr_mult * scale);
      } else {
        decoupled_decay(cfg_, p, cfg_.lr * lr_factor, cfg_.weight_decay * g.wd_mult);
        p.add_(o, -cfg_.lr * lr_factor * g.lr_mult * scale);
      }
    }
    adamw_->step(lr_factor);
    ++steps_;
  }

  // Layout: the Muon groups as every optimizer's (optim_detail::save_states, kind "muon"), the AdamW
  // groups in a nested archive "adamw".
  void save(torch::serialize::OutputArchive& ar) const override {
    save_states(ar, cfg_.kind, steps_, muon_groups(), states_);
    torch::serialize::OutputArchive inner;
    adamw_->save(inner);
    ar.write("adamw", inner);
  }
  void load(torch::serialize::InputArchive& ar) override {
    load_states(ar, cfg_.kind, &steps_, muon_groups(), &states_, {"momentum"},
                [](const std::string&, const torch::Tensor& p) { return p.sizes().vec(); });
    torch::serialize::InputArchive inner;
    ar.read("adamw", inner);
    adamw_->load(inner);
  }

 private:
  std::vector<ParamGroup> muon_groups() const {
    std::vector<ParamGroup> out;
    for (size_t i : muon_) out.push_back(groups_[i]);
    return out;
  }

  MuonScale rule_;
  std::vector<size_t> muon_;            // indices into groups_ of the orthogonalized tensors
  std::vector<GroupState> states_;      // per entry of muon_
  std::unique_ptr<Optimizer> adamw_;    // every other tensor
};

}  // namespace

std::unique_ptr<Optimizer> make_muon(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  return std::make_unique<Muon>(cfg, std::move(groups));
}

}  // namespace optim_detail
}  // namespace scaleinv
