#pragma once
// The training loop (llm.c style: readable top to bottom in trainer.cpp).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/precision/quantize.h"
#include "brain/train/config.h"
#include "brain/train/run_result.h"
#include "brain/train/window_mean.h"

namespace scaleinv {

struct RunOptions {
  bool resume = false;        // continue from out_dir/checkpoint.pt if present
  int64_t stop_after = -1;    // stop (with a checkpoint) once this many steps are done; -1: run to the end
  bool show_progress = true;  // progress bar on stderr
  bool write_files = true;    // false: nothing on disk (tests, in-memory sweeps)
  // Stop after the current step when SIGINT or SIGTERM arrives (brain/util/stop_signal.h; the caller
  // installs the handlers), with a checkpoint; RunResult::stopped_by says so. One process only: a
  // data-parallel rank ignores it (launch ends the ranks).
  bool stop_on_signal = false;
  // Join the data-parallel ranks when WORLD_SIZE > 1 in the environment (engine/dist/dist.h). Runs that
  // must stay one process whatever the environment (a sweep's points, measurements) set false.
  bool data_parallel = true;
  // Called after every step with the number of steps done (e.g. a sweep's bar over many runs).
  std::function<void(int64_t steps_done)> on_step;
  // When the training losses come back to the host. EveryStep: each step's loss is read at once (a
  // device sync per step on CUDA); a non-finite loss stops the run before that step's update.
  // AtReports: they stay on the device and are read back at logged, evaluated, checkpointed and
  // last steps only; a non-finite loss is found there, the run ends as diverged at its step, the
  // updates after it are dropped and no checkpoint is written after it. Both give the same summary,
  // metrics rows and checkpoints (Train.DeferredLossReadBackIsTheSameRun). Auto: AtReports on CUDA
  // and in a data-parallel run (whose losses are then averaged over the ranks in one all-reduce per
  // read-back, not one per step), EveryStep on one CPU process.
  enum class LossReadBack { Auto, EveryStep, AtReports };
  LossReadBack loss_readback = LossReadBack::Auto;
  // train.precision != fp32: filled, when the run ends, per rounding point ("<tensor>:x", ":w",
  // ":grad") with the counts of underflow and saturation over the run's passes
  // (src/engine/precision/quantize.h). Not part of the run's result: only the precision report reads it.
  std::map<std::string, precision::QuantStats>* precision_stats = nullptr;
};

RunResult train_run(const TrainConfig& cfg, const RunOptions& opts = {});

// UserError (file cfg.source, field data.source / model.vocab / model.n_classes) when the data does
// not fit the model: a language source for a non-language model or the reverse, or more classes
// than the model's output.
void check_data_fits(const TrainConfig& cfg, const DataSource& data);
// The short table printed when a run ends.
std::string render_summary(const TrainConfig& cfg, const RunResult& s);

}  // namespace scaleinv
