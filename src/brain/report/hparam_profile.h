#pragma once
// A hyperparameter other than the LR, made predictable (issue 41: "the recommended value of every
// tuned hyperparameter"). A sweep whose grid crosses a numeric hyperparameter KEY (a residual-branch
// multiplier, an init scale, a weight decay, a warmup) with the LR and a scale axis is read as a
// table in which KEY takes the LR's place, so that predict (brain/report/predict.h) fits, bootstraps,
// holds out and declines KEY's optimum exactly as it does the LR's. Pure: reads nothing but the
// table given, writes nothing.
//
// The profile. Per curve of KEY (param, width, depth, every other grid axis held fixed, one value
// of KEY), the LR is re-tuned: the LR grid point of least seed-mean loss (a point where any seed
// diverged counts +inf, as everywhere in the transfer analysis; ties go to the smaller LR). Each
// seed's run at that LR becomes one row with lr_log2 = log2 KEY. A value of KEY whose every LR
// diverged gives each seed a diverged row. So the profiled loss at a KEY value is its loss with the
// LR re-tuned there, and a held-out regret is that of training at the predicted KEY with the LR
// re-tuned. The LR choice is made once on all seeds; the bootstrap resamples the losses at the
// chosen LR, not the choice (a small optimism, the same at every KEY value).
// Rows with KEY <= 0 (weight decay 0) have no log2 and are left out, and counted.
#include <string>
#include <vector>

#include "brain/report/transfer.h"

namespace scaleinv {

struct HparamProfile {
  SweepTable table;         // KEY in lr_log2 (log2 of its value), KEY gone from every row's axes
  std::string key;
  int64_t left_out = 0;     // rows with KEY <= 0
  int64_t lr_values = 0;    // the most LR grid points any curve re-tuned over
};

// The numeric grid axes of `t` that are hyperparameters: two or more distinct values, every value a
// number, and neither a scale (width, depth, batch size, horizon, expert count: the axes predict
// reads a target on) nor a search's bookkeeping (search.*).
std::vector<std::string> swept_hparams(const SweepTable& t);

// The profile of `key` (above). UserError (exit 2) when `key` is no swept hyperparameter of `t`
// (named with those it holds), or when no value of it is positive.
HparamProfile profile_over_lr(const SweepTable& t, const std::string& key);

}  // namespace scaleinv
