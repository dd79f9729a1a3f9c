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

#include "param/table.h"
#include "param/tagged_param.h"

namespace scaleinv {

struct OptimConfig {
  std::string kind = "adamw";   // sgd | adam | adamw | sign | adafactor | muon
  double lr = 1e-3;             // base LR (at the base shape)
  double momentum = 0.0;        // sgd
  double beta1 = 0.9;           // adam/adamw (0: momentumless Adam), adafactor (0: no first moment)
  double beta2 = 0.999;         // adam/adamw; adafactor's second-moment decay
  // Base Adam epsilon, in gradient units (added to sqrt(v)). Adafactor adds its square,
  // eps1 = (eps * eps_mult)^2, to the squared gradient, so the table's single epsilon exponent
  // and the equivalence shift (eps += theta) mean the same for both families. Adafactor needs eps > 0.
  double eps = 1e-8;
  double weight_decay = 0.0;    // base weight-decay coefficient
  // coupled: W -= lr_t * wd * W (AdamW as published: the decay follows the LR and its schedule);
  // independent: W -= wd * W (seed 000 A.2.2's "decoupled" form). `adam` and `sgd` add wd * W to
  // the gradient instead (L2), as torch does.
  std::string wd_mode = "coupled";
  double clip_grad_norm = 0.0;  // 0: off; else step() first scales all gradients to this global norm
  // muon (ref. [muon]; optim/muon.cpp): on the hidden and attention matrices (muon_orthogonalized)
  //   B = mu B + (1 - mu) g;  M = nesterov ? (1 - mu) g + mu B : B
  //   O = NS_k(M / (||M||_F + muon_eps * eps_mult))   (k quintic Newton-Schulz steps, (3.4445, -4.7750,
  //       2.0315); on the transpose when fan_out > fan_in; bf16 on CUDA, fp32 on the CPU)
  //   W -= lr_t * scale(muon_scale) * O, after the decoupled weight decay;
  // every other tensor on AdamW with beta1, beta2, eps and the same weight decay.
  double muon_momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  std::string muon_scale = "spectral";  // spectral: max(1, fan_out/fan_in)^1/2; rms: 0.2 sqrt(max(fan_in, fan_out))
  double muon_eps = 1e-7;
  // schedule
  std::string schedule = "constant";  // constant | cosine | linear | wsd (warmup-stable-decay), after linear warmup
  int64_t warmup_steps = 0;
  int64_t total_steps = 1000;
  double min_lr_ratio = 0.0;    // final LR / base LR for cosine, linear and wsd
  double decay_fraction = 0.2;  // wsd: the last fraction of the post-warmup steps, decaying linearly
};

// The table's family for an optimizer kind (UserError on an unknown kind, field "optim.kind").
OptFamily optimizer_family(const std::string& kind);
// "sgd, adam, adamw, sign, adafactor, muon": the kinds, for help texts and error fixes.
const char* optimizer_kinds();
// The Muon scale rule of a config (UserError, field "optim.muon_scale", on an unknown rule).
MuonScale muon_scale_of(const OptimConfig& cfg);

// One tensor with its table factors (multiplied into the config's base values).
struct ParamGroup {
  std::string name;
  torch::Tensor param;
  Role role = Role::Hidden;   // the table role (Muon orthogonalizes hidden and attention matrices only)
  double lr_mult = 1.0;
  double wd_mult = 1.0;
  double eps_mult = 1.0;
  // Batched ensembles (train/ensemble.h): the param is [E, ...] and each member has its own base LR
  // and weight decay. When defined, these [E, 1, ..., 1] tensors replace cfg.lr and cfg.weight_decay
  // member by member (sgd, adam, adamw, sign; adafactor and gradient clipping take no ensembles).
  torch::Tensor member_lr, member_wd;
};

// Groups for a model's tagged parameters under its ScaleContext (table, family, m, k).
std::vector<ParamGroup> param_groups(const std::vector<TaggedParam>& params, const ScaleContext& ctx);

// LR multiplier of the schedule at `step` (0-based): linear warmup (step+1)/warmup_steps for
// step < warmup_steps, then, with p = (step - warmup) / (total - warmup) clamped to [0, 1] and
// r = min_lr_ratio (a table of shapes in schedule.cpp):
//   constant  1
//   cosine    r + (1 - r) (1 + cos(pi p)) / 2
//   linear    r + (1 - r) (1 - p)
//   wsd       1 for p <= 1 - f, then r + (1 - r) (1 - p) / f   (f = decay_fraction: warmup-stable-
//             decay, a constant LR with a linear cool-down over the run's last fraction)
// Validates the schedule first.
double schedule_factor(const OptimConfig& cfg, int64_t step);

// UserError (where "config") naming the field: unknown optim.schedule, negative optim.warmup_steps,
// optim.total_steps < 1, optim.min_lr_ratio outside [0, 1], optim.decay_fraction outside (0, 1].
void validate_schedule(const OptimConfig& cfg);
// Every field: optim.kind, optim.wd_mode (coupled | independent), optim.lr > 0 (finite), optim.momentum,
// optim.beta1, optim.beta2 in [0, 1), optim.eps >= 0 (> 0 for adafactor), optim.weight_decay >= 0,
// optim.clip_grad_norm >= 0, optim.muon_momentum in [0, 1), optim.ns_steps in [1, 100],
// optim.muon_scale, optim.muon_eps >= 0 (finite), and the schedule. make_optimizer calls it.
void validate_optim_config(const OptimConfig& cfg);

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
