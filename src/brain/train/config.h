#pragma once
// A training run's configuration: one TOML file (examples/*.toml) plus --set overrides.
// Sections: [model] [param] [hp] [optim] [data] [train]. Every field is optional, every unknown
// or mistyped field is a UserError naming the file and the field.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "brain/data/data_config.h"
#include "brain/models/model_config.h"
#include "brain/optim/optim_config.h"
#include "brain/param/table.h"

namespace scaleinv {

struct TrainSettings {
  int64_t steps = 200;
  int64_t batch_size = 16;
  int64_t seed = 0;             // model init; the data seed is data.seed
  int64_t log_every = 10;       // metrics rows (every step is also kept in memory for the summary)
  int64_t eval_every = 100;     // validation loss (0: only at the end)
  int64_t eval_batches = 4;
  int64_t checkpoint_every = 100;  // 0: only at the end
  std::string out_dir = "runs/default";
  std::string device = "cpu";   // cpu | cuda
  // Simulated low precision (src/engine/precision/quantize.h): each linear's input and weight rounded in
  // the forward pass, its output gradient in the backward pass. fp32 | bf16 | e4m3 | e5m2.
  std::string precision = "fp32";
  // Native mixed precision on CUDA (distinct from the simulated rounding above): "bf16" runs every
  // forward pass under bf16 autocast (matmuls and attention in bf16; weights, gradients and
  // optimizer state in fp32); "off" keeps fp32. Needs device = "cuda".
  std::string autocast = "off";
  // TF32 tensor cores for fp32 matmuls on CUDA (no effect on the CPU).
  bool tf32 = true;
  // CUDA graphs (one process on CUDA, fp32 simulated precision): after a few eager steps, the
  // forward and backward of a step are captured once and replayed every step, which pays the
  // kernel launches of a small model once. The same arithmetic, so not part of a run's identity
  // (sweep ids, --resume checks).
  bool cuda_graph = false;
  // Data-parallel runs (WORLD_SIZE > 1, docs/distributed.md): how long a rank waits for the
  // others (rendezvous, each collective) before it names the lost rank and exits.
  double dist_timeout_s = 60;
};

struct TrainConfig {
  ModelConfig model;
  std::string param = "mup";    // preset name or .toml file
  int param_base_width = 0;     // 0: the table's own base shape
  int param_base_depth = 0;
  Hyper hp;
  OptimConfig optim;
  DataConfig data;
  TrainSettings train;
  std::string source = "(defaults)";  // where the config came from, for messages
};

// Reads a config file (or only defaults when path is empty) and applies --set overrides.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& sets = {});
TrainConfig train_config_from_toml_text(const std::string& text, const std::string& where,
                                        const std::vector<std::string>& sets = {});
nlohmann::json train_config_to_json(const TrainConfig& c);
TrainConfig train_config_from_json(const nlohmann::json& j);  // inverse of the above (checkpoints)
// The fields ("section.key") in which `now` differs from `saved` in a way that changes the run's
// numerics, for --resume: everything except where files go and how often they are written
// (train.out_dir, log_every, eval_every, eval_batches, checkpoint_every, dist_timeout_s), the
// run's length (train.steps; optim.total_steps too while both schedules are constant) and the
// table's name (param.name: the table itself is compared by its fingerprint).
std::vector<std::string> run_altering_differences(const TrainConfig& saved, const TrainConfig& now);
// The table with the config's base-shape overrides applied.
ParamTable resolve_param(const TrainConfig& c);

}  // namespace scaleinv
