#pragma once
// Shared pieces of the optimizers (not part of the public API): per-group state, checkpointing,
// decoupled weight decay, scratch buffers.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"

namespace scaleinv::optim_detail {

// One group's state. `buf` is checkpointed; scratch tensors are reused between steps, never saved.
struct GroupState {
  int64_t t = 0;                              // updates this group has received
  std::map<std::string, torch::Tensor> buf;   // moments, allocated lazily at the first update
  torch::Tensor scratch, scratch2;
};

// Returns `slot`, (re)allocated to like's shape and options when it does not match.
torch::Tensor& scratch_like(torch::Tensor& slot, const torch::Tensor& like);

// Decoupled decay (adamw, sign, adafactor): coupled p *= 1 - base_lr_t*wd_t, independent p *= 1 - wd_t,
// with base_lr_t = cfg.lr * schedule (the per-tensor LR factor is NOT included) and wd_t = cfg.weight_decay
// * wd_mult. So in both modes the per-step decay fraction scales as the table says (m^-wd, brain/param/table.h),
// and the equivalence shift (which moves the LR factor, not wd) leaves it unchanged; coupled decay still
// follows the base LR and its schedule (seed 000 A.2.2).
void decoupled_decay(const OptimConfig& cfg, torch::Tensor& p, double base_lr_t, double wd_t);
// That per-step fraction (p *= 1 - fraction): base_lr_t * wd_t when coupled, wd_t when independent.
double decoupled_fraction(const OptimConfig& cfg, double base_lr_t, double wd_t);
// The same for an ensemble group (g.member_lr / g.member_wd defined): per-member fractions
// coupled lr_factor * member_lr * member_wd * wd_mult, independent member_wd * wd_mult.
void member_decay(const OptimConfig& cfg, const ParamGroup& g, torch::Tensor& p, double lr_factor);
// Throws std::invalid_argument when a group carries member tensors the optimizer cannot take.
void reject_members(const std::vector<ParamGroup>& groups, const char* why);

// Checkpoint layout: "kind" (string), "steps" (int), "n_groups" (int) and, per group i, a nested
// archive "g<i>" with "name" (string), "t" (int) and one tensor per state key.
void save_states(torch::serialize::OutputArchive& ar, const std::string& kind, int64_t steps,
                 const std::vector<ParamGroup>& groups, const std::vector<GroupState>& states);
// `expected_shape(key, param)` gives the shape a state tensor must have.
void load_states(torch::serialize::InputArchive& ar, const std::string& kind, int64_t* steps,
                 const std::vector<ParamGroup>& groups, std::vector<GroupState>* states,
                 const std::vector<std::string>& keys,
                 const std::function<std::vector<int64_t>(const std::string&, const torch::Tensor&)>& expected_shape);

std::unique_ptr<Optimizer> make_sgd(const OptimConfig& cfg, std::vector<ParamGroup> groups);
std::unique_ptr<Optimizer> make_adam(const OptimConfig& cfg, std::vector<ParamGroup> groups);  // adam, adamw, sign
std::unique_ptr<Optimizer> make_adafactor(const OptimConfig& cfg, std::vector<ParamGroup> groups);
std::unique_ptr<Optimizer> make_muon(const OptimConfig& cfg, std::vector<ParamGroup> groups);
std::unique_ptr<Optimizer> make_lion(const OptimConfig& cfg, std::vector<ParamGroup> groups);

}  // namespace scaleinv::optim_detail
