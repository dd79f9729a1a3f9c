#pragma once
// Batched ensembles (issue 8): several training runs that share every shape are trained together
// as one model whose tensors carry a leading member dimension [E, ...] (batched matmuls, one
// optimizer over stacked tensors with a per-member LR). Each member starts from exactly the
// parameters its own run would (it is built under its own seed and stacked), reads the batches its
// own run would, and gets its own LR, so its losses equal a separate train_run's up to float
// reassociation (tested). Members diverge independently: a diverged member is recorded at its step
// and drops out of the loss; the others go on.
//
// Members may differ in optim.lr, optim.weight_decay, train.seed and data.seed; everything else
// (ensemble_key) must be equal. Configs the batched path cannot take (ensemble_supported) run one
// after another through train_run, with the same results.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"
#include "brain/train/ensemble_key.h"
#include "engine/train/trainer.h"

namespace scaleinv {

// Whether members train as one batched model (On), one train_run after another (Off, the
// reference path), or whichever batching_pays says (Auto). Results agree either way (tested).
enum class Batching { Auto, On, Off };

struct EnsembleOptions {
  Batching batching = Batching::Auto;
  bool show_progress = false;   // the trainer's own bar (sweeps draw theirs over the grid instead)
  // Called after every step with the member-steps done so far: steps x members when batched;
  // one by one, the finished members' steps plus the current member's (a sweep's bar).
  std::function<void(int64_t member_steps_done)> on_step;
  // Steps between read-backs of the members' losses (0: after every step on the CPU, every
  // train.log_every steps on CUDA, where a read-back synchronizes the device). A member's
  // divergence takes effect on the device at its step either way (its loss leaves the sum at
  // once); the read-back records it with that step, so every interval gives the same results.
  int64_t readback_every = 0;
};

// Whether the batched path takes this config: bigram, gpt or resmlp; sgd, adam, adamw or sign
// without gradient clipping; fp32 (no simulated precision); a table without unit scaling. When
// false train_ensemble falls back to one run per member. train.cuda_graph, a speed switch, is not
// taken by the batched path (its steps run eager: one launch per op already serves every member);
// members run one by one take it as train_run does.
bool ensemble_supported(const TrainConfig& c);

// Auto's choice: batch on a GPU, where a small member's step is bound by kernel launches that
// batching shares (expected, not yet measured: no GPU was lent); not on a CPU, where it was
// measured slower than one member after another (docs/speed.md: 8 members at width 64 cost
// 8.5-8.8x one member batched; at the demo's width 512, 171 vs 135 ms per member-step), because
// one member's step there is already arithmetic, not per-op overhead.
bool batching_pays(const TrainConfig& c);
// Whether train_ensemble would batch several members of config c under `mode`.
bool will_batch(const TrainConfig& c, Batching mode);

// Trains every member (all must share ensemble_key; std::invalid_argument otherwise) and returns
// one RunResult per member, in order. Nothing is written to disk (no checkpoints, no metrics); the
// validation loss is evaluated once, at the end.
std::vector<RunResult> train_ensemble(const std::vector<TrainConfig>& members, const EnsembleOptions& opts = {});

}  // namespace scaleinv
