#pragma once
// One run's result, in one type and one JSON form: what a training run returns (the engine's
// train_run and ensembles), what a sweep's store records of a point (brain/sweep/sweep_store.h
// write_points), and what a user's training function reports from Python (run_result_of_report).
// Torch-free.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace scaleinv {

struct RunResult {
  int64_t steps_done = 0;
  bool diverged = false;
  int64_t diverged_step = -1;   // the step whose loss was NaN/inf; -1: none
  int stopped_by = 0;           // the signal that stopped the run early (RunOptions::stop_on_signal; 0: none)
  double final_loss = 0;        // mean training loss over the last 10% of the run's steps (at least 1), resumed or not
  double final_val_loss = 0;    // NaN when no evaluation ran
  double unigram_entropy = 0;   // nats/token of the training text (language data), else 0; NaN: not reported
  double expert_max_violation = std::numeric_limits<double>::quiet_NaN();  // a mixture: the final
                                // evaluation's expert load, engine/models/model.h expert_max_violation
                                // (rank 0's batches); NaN for a dense model or without evaluation
  int64_t params = 0;
  double items_per_s = 0;       // tokens/s for language models, samples/s otherwise
  double wall_s = 0;
  std::vector<double> losses;   // training loss of every step of the run (a resumed run: from the
                                // checkpoint's history on); a user's report: its losses, evenly spaced
  std::string items_unit;       // "tok" or "samples"
  int rank = 0;                 // data-parallel rank of this process, and the number of ranks
  int world = 1;
  std::string error;            // non-empty: the run raised this (a user's training function); a
                                // sweep records the point as diverged and the message in `failures`
};

// The JSON form: steps_done, diverged, diverged_step, final_loss, final_val_loss (null when NaN),
// unigram_entropy, params, items_per_s, items_unit, wall_s; expert_max_violation for a mixture and
// error when set. A run's metrics log ends with it ("summary") and the precision report embeds it.
nlohmann::json run_result_to_json(const RunResult& r);

// What a user's training function returned (scaleinv.sweep / scaleinv.search: a dict with
// `losses`, and optionally `steps`, `val_loss`, `wall_s`, `items_per_s`, `error`) as a run's result.
// The losses are evenly spaced over the run's `steps` (one per step, a logged subset, or the final
// loss alone; default one per step): the first non-finite one makes the run diverged at its step.
// val_loss, items_per_s and unigram_entropy are NaN when not given.
RunResult run_result_of_report(const nlohmann::json& report);

}  // namespace scaleinv
