#pragma once
// The training loop (llm.c style: readable top to bottom in trainer.cpp).
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/precision/quantize.h"
#include "brain/train/config.h"
#include "brain/train/window_mean.h"

namespace scaleinv {

struct RunOptions {
  bool resume = false;        // continue from out_dir/checkpoint.pt if present
  int64_t stop_after = -1;    // stop (with a checkpoint) once this many steps are done; -1: run to the end
  bool show_progress = true;  // progress bar on stderr
  bool write_files = true;    // false: nothing on disk (tests, in-memory sweeps)
  // Stop after the current step when SIGINT or SIGTERM arrives (brain/util/stop_signal.h; the caller
  // installs the handlers), with a checkpoint; RunSummary::stopped_by says so. One process only: a
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
};

struct RunSummary {
  int64_t steps_done = 0;
  bool diverged = false;
  int64_t diverged_step = -1;   // the step whose loss was NaN/inf
  int stopped_by = 0;           // the signal that stopped the run early (RunOptions::stop_on_signal; 0: none)
  double final_loss = 0;        // mean training loss over the last 10% of the run's steps (at least 1), resumed or not
  double final_val_loss = 0;    // NaN when no evaluation ran
  double unigram_entropy = 0;   // nats/token of the training text (language data), else 0
  double expert_max_violation = std::numeric_limits<double>::quiet_NaN();  // a mixture: the final
                                // evaluation's expert load, engine/models/model.h expert_max_violation
                                // (rank 0's batches); NaN for a dense model or without evaluation
  int64_t params = 0;
  double items_per_s = 0;       // tokens/s for language models, samples/s otherwise
  double wall_s = 0;
  std::vector<double> losses;   // training loss of every step of the run (a resumed run: from the checkpoint's history on)
  std::string items_unit;       // "tok" or "samples"
  int rank = 0;                 // data-parallel rank of this process, and the number of ranks
  int world = 1;
  // train.precision != fp32: per rounding point ("<tensor>:x", ":w", ":grad") the counts of
  // underflow and saturation over the run's passes (src/engine/precision/quantize.h).
  std::map<std::string, precision::QuantStats> precision_stats;
};

RunSummary train_run(const TrainConfig& cfg, const RunOptions& opts = {});

// UserError (file cfg.source, field data.source / model.vocab / model.n_classes) when the data does
// not fit the model: a language source for a non-language model or the reverse, or more classes
// than the model's output.
void check_data_fits(const TrainConfig& cfg, const DataSource& data);
nlohmann::json summary_to_json(const RunSummary& s);
// The short table printed when a run ends.
std::string render_summary(const TrainConfig& cfg, const RunSummary& s);

}  // namespace scaleinv
