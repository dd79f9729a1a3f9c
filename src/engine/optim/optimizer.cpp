// Optimizer plumbing: param groups, gradient clipping, checkpoint layout (kinds, families and validation: optim_config.cpp).
#include "engine/optim/optimizer.h"

#include <map>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/util/errors.h"
#include "engine/optim/optim_detail.h"

namespace scaleinv {

std::vector<ParamGroup> param_groups(const std::vector<TaggedParam>& params, const ScaleContext& ctx) {
  std::vector<ParamGroup> groups;
  groups.reserve(params.size());
  for (const TaggedParam& tp : params) {
    const TensorScale s = ctx.scale(tp.tag.role, tp.tag.in_block);
    ParamGroup g;
    g.name = tp.name;
    g.param = tp.tensor;
    g.role = tp.tag.role;
    g.lr_mult = s.lr;
    g.wd_mult = s.wd;
    g.eps_mult = s.eps;
    groups.push_back(std::move(g));
  }
  return groups;
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_) {
    if (has_grad(g)) g.param.mutable_grad() = torch::Tensor();
  }
}

void Optimizer::clip_gradients() {
  if (cfg_.clip_grad_norm <= 0) return;
  optim_detail::reject_members(groups_, "gradient clipping takes no ensemble groups (the norm is per member)");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const ParamGroup& g : groups_) {
    if (g.param.grad().defined()) norms.push_back(g.param.grad().norm(2).to(torch::kFloat64));
  }
  if (norms.empty()) return;
  const torch::Tensor total = torch::stack(norms).norm(2);
  const torch::Tensor coef = (cfg_.clip_grad_norm / (total + 1e-6)).clamp_max(1.0);
  for (ParamGroup& g : groups_) {
    if (g.param.grad().defined()) g.param.mutable_grad().mul_(coef.to(g.param.grad().device()));
  }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& cfg, std::vector<ParamGroup> groups) {
  validate_optim_config(cfg);  // an unknown kind is refused there (optimizer_kind_rows)
  using Factory = std::unique_ptr<Optimizer> (*)(const OptimConfig&, std::vector<ParamGroup>);
  // The builder of each kind of optimizer_kind_rows(): the update rule, not the family (adam, adamw
  // and sign are one implementation with two switches, engine/optim/adam.cpp).
  static const std::map<std::string, Factory> factories = {
      {"sgd", optim_detail::make_sgd},   {"adam", optim_detail::make_adam},           {"adamw", optim_detail::make_adam},
      {"sign", optim_detail::make_adam}, {"adafactor", optim_detail::make_adafactor}, {"muon", optim_detail::make_muon},
      {"lion", optim_detail::make_lion}};
  return factories.at(cfg.kind)(cfg, std::move(groups));
}

namespace optim_detail {

torch::Tensor& scratch_like(torch::Tensor& slot, const torch::Tensor& like) {
  if (!slot.defined() || slot.sizes() != like.sizes() || slot.scalar_type() != like.scalar_type() ||
      slot.device() != like.device())
    slot = torch::empty_like(like, torch::MemoryFormat::Contiguous);
  return slot;
}

double decoupled_fraction(const OptimConfig& cfg, double base_lr_t, double wd_t) {
  return cfg.wd_mode == "independent" ? wd_t : base_lr_t * wd_t;
}

void decoupled_decay(const OptimConfig& cfg, torch::Tensor& p, double base_lr_t, double wd_t) {
  if (wd_t == 0) return;
  p.mul_(1.0 - decoupled_fraction(cfg, base_lr_t, wd_t));
}

void member_decay(const OptimConfig& cfg, const ParamGroup& g, torch::Tensor& p, double lr_factor) {
  torch::Tensor frac = g.member_wd * g.wd_mult;
  if (cfg.wd_mode != "independent") frac = frac * g.member_lr * lr_factor;
  p.mul_(1.0 - frac);
}

void reject_members(const std::vector<ParamGroup>& groups, const char* why) {
  for (const ParamGroup& g : groups)
    if (g.member_lr.defined() || g.member_wd.defined()) throw std::invalid_argument(why);
}

void save_states(torch::serialize::OutputArchive& ar, const std::string& kind, int64_t steps,
                 const std::vector<ParamGroup>& groups, const std::vector<GroupState>& states) {
  ar.write("kind", c10::IValue(kind));
  ar.write("steps", c10::IValue(steps));
  ar.write("n_groups", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::OutputArchive g;
    g.write("name", c10::IValue(groups[i].name));
    g.write("t", c10::IValue(states[i].t));
    for (const auto& [key, tensor] : states[i].buf) {
      if (tensor.defined()) g.write(key, tensor, /*is_buffer=*/true);
    }
    ar.write(fmt::format("g{}", i), g);
  }
}

void load_states(torch::serialize::InputArchive& ar, const std::string& kind, int64_t* steps,
                 const std::vector<ParamGroup>& groups, std::vector<GroupState>* states,
                 const std::vector<std::string>& keys,
                 const std::function<std::vector<int64_t>(const std::string&, const torch::Tensor&)>& expected_shape) {
  const std::string fix = "resume with the optimizer and model the checkpoint was written with, or start a new run";
  c10::IValue v;
  if (!ar.try_read("kind", v) || !v.isString())
    throw UserError("checkpoint", "optimizer", "no optimizer state in the checkpoint", fix);
  const std::string saved_kind = v.toStringRef();
  if (saved_kind != kind)
    throw UserError("checkpoint", "optim.kind",
                    "optimizer state was written by '" + saved_kind + "' but the config asks for '" + kind + "'", fix);
  ar.read("n_groups", v);
  if (v.toInt() != static_cast<int64_t>(groups.size()))
    throw UserError("checkpoint", "optimizer",
                    fmt::format("optimizer state has {} parameter groups, the model has {}", v.toInt(), groups.size()),
                    fix);
  std::vector<GroupState> loaded(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive g;
    ar.read(fmt::format("g{}", i), g);
    g.read("name", v);
    if (v.toStringRef() != groups[i].name)
      throw UserError("checkpoint", "optimizer",
                      fmt::format("optimizer group {} is '{}' in the checkpoint but '{}' in the model", i,
                                  v.toStringRef(), groups[i].name),
                      fix);
    g.read("t", v);
    loaded[i].t = v.toInt();
    for (const std::string& key : keys) {
      torch::Tensor t;
      if (!g.try_read(key, t, /*is_buffer=*/true)) continue;
      const std::vector<int64_t> want = expected_shape(key, groups[i].param);
      if (t.sizes() != c10::IntArrayRef(want))
        throw UserError("checkpoint", "optimizer",
                        fmt::format("state '{}' of '{}' has shape [{}], expected [{}]", key, groups[i].name,
                                    fmt::join(t.sizes(), ", "), fmt::join(want, ", ")),
                        fix);
      // A copy: the optimizer updates its state in place, the archive may be read again.
      loaded[i].buf[key] =
          t.to(groups[i].param.device(), groups[i].param.scalar_type(), /*non_blocking=*/false, /*copy=*/true)
              .contiguous();
    }
  }
  ar.read("steps", v);
  *steps = v.toInt();
  *states = std::move(loaded);
}

}  // namespace optim_detail
}  // namespace scaleinv
