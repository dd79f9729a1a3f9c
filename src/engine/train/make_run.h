#pragma once
// What a run trains, made from its config in one place: the parameterization table, the scale
// context it is read at, the model initialised from train.seed and the optimizer over its tensors.
// The trainer, the coordinate check and a checkpoint imported from safetensors make theirs here;
// the batched ensemble reads its context here (run_context) and stacks its members' models itself
// (engine/train/ensemble.cpp).
//
// make_run, in this order (the order decides which numbers a run draws, so it never changes):
//   1. table   resolve_param(cfg), or MakeRunOptions::table when given
//   2. ctx     run_context(cfg, table)
//   3. model   build_model_seeded(cfg.train.seed, cfg.model, ctx, cfg.hp): libtorch's global
//              generator seeded under the one build lock, so concurrent runs draw exactly their
//              own parameters; then moved to MakeRunOptions::device
//   4. opt     make_optimizer(cfg.optim, param_groups(model's tensors, model's context)): one group
//              per tensor, in the model's order, on the device the model is on
// Throws what those throw: UserError for a parameterization that cannot be read (param.*), a model
// that cannot be built at this shape (model.*) or an optimizer config that is not valid (optim.*).
#include <memory>
#include <optional>

#include <torch/types.h>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "engine/param/tagged_param.h"
#include "brain/train/config.h"

namespace scaleinv {

// The context a run's model is sized from: the table at cfg.model's width and depth, under
// cfg.optim's family (no ensemble members, no experts: a mixture sets its own).
ScaleContext run_context(const TrainConfig& cfg, const ParamTable& table);

struct MakeRunOptions {
  // The table to build from, when the caller holds it already: resolved earlier (a data-parallel
  // run checks it on every rank before building), a checkpoint's, or altered on purpose (the
  // coordinate check's --break). Empty: resolve_param(cfg).
  std::optional<ParamTable> table;
  torch::Device device = torch::kCPU;  // where the model is, before the optimizer is made
};

struct RunParts {
  ParamTable table;                // 1.
  ScaleContext ctx;                // 2.
  std::shared_ptr<Model> model;    // 3., on MakeRunOptions::device
  std::unique_ptr<Optimizer> opt;  // 4., over the model's tensors
};

RunParts make_run(const TrainConfig& cfg, const MakeRunOptions& options = {});

// A run's numerics on `dev`, as the trainer and the batched ensemble both take them: on CUDA, TF32
// for fp32 matmuls per train.tf32 (a process-wide switch, set here); returns whether each forward
// pass runs under bf16 autocast (train.autocast). On the CPU it sets nothing and returns false.
bool set_cuda_numerics(const TrainConfig& cfg, torch::Device dev);

}  // namespace scaleinv
