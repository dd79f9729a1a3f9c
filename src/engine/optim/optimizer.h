#pragma once
// Optimizers with per-tensor LR, weight decay and epsilon from the parameterization table
// (docs/design.md "Where new things go": an optimizer). Modelled on libtorch's optimizers with one
// param group per tensor, but written here because the table needs what torch::optim lacks:
// momentumless Adam and sign descent, Adafactor, Muon (ref. [muon]), independent weight decay
// (seed 000 A.2.2), per-tensor epsilon.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "brain/optim/optim_config.h"
#include "brain/param/table.h"
#include "engine/param/tagged_param.h"

namespace scaleinv {

// One tensor with its table factors (multiplied into the config's base values).
struct ParamGroup {
  std::string name;
  torch::Tensor param;
  Role role = Role::Hidden;   // the table role (Muon orthogonalizes hidden and attention matrices only)
  double lr_mult = 1.0;
  double wd_mult = 1.0;
  double eps_mult = 1.0;
  // Batched ensembles (engine/train/ensemble.h): the param is [E, ...] and each member has its own base LR
  // and weight decay. When defined, these [E, 1, ..., 1] tensors replace cfg.lr and cfg.weight_decay
  // member by member (sgd, adam, adamw, sign; adafactor and gradient clipping take no ensembles).
  torch::Tensor member_lr, member_wd;
};

// Groups for a model's tagged parameters under its ScaleContext (table, family, m, k).
std::vector<ParamGroup> param_groups(const std::vector<TaggedParam>& params, const ScaleContext& ctx);

class Optimizer {
 public:
  Optimizer(OptimConfig cfg, std::vector<ParamGroup> groups) : cfg_(std::move(cfg)), groups_(std::move(groups)) {}
  virtual ~Optimizer() = default;
  // One update with LR = cfg.lr * lr_factor * group.lr_mult. Parameters without a gradient are skipped.
  virtual void step(double lr_factor = 1.0) = 0;
  void zero_grad();  // sets .grad() to undefined (set_to_none)
  // State for checkpoints (step count and every moment tensor), per group index with the group's
  // name stored beside it; load checks the kind, group count, names and shapes (UserError, field
  // "optim.kind" / "checkpoint") and then continues bit for bit.
  virtual void save(torch::serialize::OutputArchive& ar) const = 0;
  virtual void load(torch::serialize::InputArchive& ar) = 0;
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const OptimConfig& config() const { return cfg_; }
  int64_t steps_taken() const { return steps_; }

 protected:
  // Scales every gradient so their global L2 norm is at most cfg.clip_grad_norm (when > 0), as
  // torch::nn::utils::clip_grad_norm_ does, without a host sync. Each step() calls it first.
  void clip_gradients();
  // Whether group g takes part in this step: its parameter exists and has a gradient.
  static bool has_grad(const ParamGroup& g) { return g.param.defined() && g.param.grad().defined(); }
  // Group g's LR this step: the base LR x the schedule's factor x the table's per-tensor factor;
  // its weight decay: the base weight decay x the table's factor. Every optimizer's one formula.
  double group_lr(const ParamGroup& g, double lr_factor) const { return cfg_.lr * lr_factor * g.lr_mult; }
  double group_wd(const ParamGroup& g) const { return cfg_.weight_decay * g.wd_mult; }
  // Every optimizer's loop over its groups: f(g, i, lr, wd) for each group with a gradient, in
  // order, with its LR and weight decay this step (group_lr, group_wd).
  template <class F>
  void for_each_group_with_grad(double lr_factor, F&& f) {
    for (size_t i = 0; i < groups_.size(); ++i) {
      ParamGroup& g = groups_[i];
      if (has_grad(g)) f(g, i, group_lr(g, lr_factor), group_wd(g));
    }
  }
  OptimConfig cfg_;
  std::vector<ParamGroup> groups_;
  int64_t steps_ = 0;
};

// Validates cfg (validate_optim_config) and builds the optimizer for cfg.kind.
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& cfg, std::vector<ParamGroup> groups);

}  // namespace scaleinv
