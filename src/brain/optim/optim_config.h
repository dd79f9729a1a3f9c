#pragma once
// An optimizer's configuration (OptimConfig), its validation and its LR schedule: plain data and
// arithmetic, no torch, so a run's configuration is read, checked and written by the torch-free
// brain (docs/design.md "Build shape"). engine/optim/optimizer.h builds optimizers from it.
#include <cstdint>
#include <string>
#include <vector>

#include "brain/optim/optimizer_kinds.h"  // the kinds' rows: optimizer_kind, optimizer_family, optimizer_kinds
#include "brain/param/table.h"

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
  // muon (ref. [muon]; engine/optim/muon.cpp): on the hidden, attention and expert matrices (muon_orthogonalized;
  // each expert of an [E, out, in] stack on its own)
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

// The Muon scale rule of a config (UserError, field "optim.muon_scale", on an unknown rule).
MuonScale muon_scale_of(const OptimConfig& cfg);

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

}  // namespace scaleinv
