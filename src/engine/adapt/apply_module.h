#pragma once
// Any row of the table on a libtorch module scaleinv did not write, from C++ (issue 15): the C++
// twin of the Python module's scaleinv.apply. own_model.h has the rules (roles from shapes, the
// seed 000 eq. 28 shift to a' = 0, what is refused).
//
//   auto model = std::make_shared<MyNet>(1024), base = std::make_shared<MyNet>(128),
//        delta = std::make_shared<MyNet>(256);
//   OptimConfig cfg;  cfg.kind = "adamw";  cfg.lr = 1e-2;
//   OwnApplied a = apply_parameterization(*model, *base, *delta, preset("mup"), cfg);
//   auto opt = make_optimizer(cfg, a.groups);           // engine/optim/optimizer.h
//   for (...) { loss.backward(); opt->step(schedule_factor(cfg, step)); }
//
// apply_parameterization rescales every tensor of `model` in place (init factor) and returns one
// ParamGroup per tensor with the shifted row's lr_mult, wd_mult and eps_mult and its role (Muon
// orthogonalizes hidden and attention matrices). base and delta are read, never written. Layouts:
// torch::nn::Embedding's weight is [num, dim] (in_out), every other matrix [out, in, ...].
// A tied embedding's readout multiplier (OwnTie) is not installed (libtorch modules have no forward
// hooks): the plan's notes name it and the user's forward applies it.
// Throws UserError (where "model") as own_model.h lists: tied tensors of two other roles, unknown roles, a shape that
// does not fit, adam with weight decay, adafactor, unit-scaled rows.
#include <vector>

#include <torch/torch.h>

#include "brain/adapt/own_model.h"
#include "engine/optim/optimizer.h"

namespace scaleinv {

struct OwnApplied {
  OwnPlan plan;
  std::vector<ParamGroup> groups;
};

// The names, shapes, layouts and init RMS of a module's trainable tensors (named_parameters order);
// `tied` gets every name whose tensor already appeared under another name, with that first name.
std::vector<OwnTensor> own_tensors(torch::nn::Module& m, std::vector<TiedUse>* tied = nullptr);

OwnApplied apply_parameterization(torch::nn::Module& model, torch::nn::Module& base, torch::nn::Module& delta,
                                  const ParamTable& table, const OptimConfig& optim,
                                  const std::vector<RoleOverride>& overrides = {});

}  // namespace scaleinv
