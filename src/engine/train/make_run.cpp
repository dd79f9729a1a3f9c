// A run's table, context, model and optimizer, made in one order (engine/train/make_run.h).
#include "engine/train/make_run.h"

#include <cstdint>

#include "engine/runtime/torch_compat.h"

namespace scaleinv {

ScaleContext run_context(const TrainConfig& cfg, const ParamTable& table) {
  return ScaleContext{table, optimizer_family(cfg.optim.kind), cfg.model.width, cfg.model.depth};
}

RunParts make_run(const TrainConfig& cfg, const MakeRunOptions& options) {
  RunParts r;
  r.table = options.table ? *options.table : resolve_param(cfg);
  r.ctx = run_context(cfg, r.table);
  r.model = build_model_seeded(static_cast<uint64_t>(cfg.train.seed), cfg.model, r.ctx, cfg.hp);  // validates model.*
  r.model->move_to(options.device);
  r.opt = make_optimizer(cfg.optim, param_groups(r.model->tagged_parameters(), r.model->context()));
  return r;
}

bool set_cuda_numerics(const TrainConfig& cfg, torch::Device dev) {
  if (dev.is_cuda()) compat::set_tf32(cfg.train.tf32);
  return dev.is_cuda() && cfg.train.autocast == "bf16";
}

}  // namespace scaleinv
