#pragma once
// Hyperparameter-transfer analysis of a sweep store (issues 8 and 16; docs/design.md "Data flow
// of a sweep" and "Acceptance evidence"): per parameterization and analysis axis, where the optimal
// learning rate sits at each value of the axis, how it moves, and what keeping the base's LR costs.
//
// Analysis axes (a table, kAxes in transfer.cpp; any other numeric grid axis gets a generic row):
//  - model scales, width and depth: transfer is judged (shift, wider/deeper is better, regret);
//  - hyperparameter axes, e.g. train.batch_size, train.steps (the horizon), optim.weight_decay,
//    optim.warmup_steps: the exponent d log2 LR* / d log2 x beside the reference rule of the row
//    (square-root rule for Adam's batch size, Bjorck et al.'s LR* ~ D^-beta for the horizon, a
//    fixed AdamW timescale for weight decay: docs/references.md [sqrt-rule], [horizon], [wd-tau]),
//    and the shape of the optimum (a peak inside the range is the surge of Li et al. [surge]).
// Every other varying axis splits the data into groups.
//
// Definitions (printed in the report):
//  - mean loss per log2-LR grid point: mean of final_loss over seeds; a grid point where any seed
//    diverged counts as +inf (that LR is unusable), so it is never the optimum;
//  - optimum: the best grid point and its two neighbours define a parabola in log2 LR; its vertex,
//    clamped to the neighbours' interval, is the optimum. At the grid edge (the best point is the
//    smallest or largest LR) the edge itself is reported and flagged; the true optimum lies beyond;
//  - interval: seeds resampled with replacement, jointly for every curve of a group (fixed RNG
//    seed); each statistic recomputed per resample; the 5-95% percentiles (none with one seed);
//  - drift (the exponent on a hyperparameter axis): OLS slope of the optimum (log2 LR) against
//    log2 of the axis value (values <= 0, e.g. weight decay 0, left out), doublings of LR per
//    doubling; shift: optimum at the largest value minus at the smallest. Transfer holds when
//    every value's optimum is within 1 doubling of the smallest value's (so at every scale, not
//    only the largest; issue 16);
//  - base LR: the smallest value's best LR grid point. Wider (deeper) is better: at the base LR
//    the mean loss does not increase from value to value (within a relative tolerance);
//  - regret at each value: the loss at the base LR (the nearest grid point where it was not run)
//    against the best grid-point loss there of (a) the same parameterization re-tuned and (b)
//    "standard" re-tuned (when the group holds a parameterization named standard), in percent;
//    the headline is the worst over values, not the largest value's;
//  - weight-decay timescale (AdamW, Wang and Aitchison [wd-tau]): the per-step decay fraction is
//    lr x schedule x wd (optim.wd_mode "coupled", the base LR) or wd ("independent"), so
//    tau = 1/(lr wd) or 1/wd steps; reported at each optimum, in steps and as a fraction of the run
//    (decoupled decay only: adamw, muon, adafactor; adam and sgd put wd into the gradient, L2).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace scaleinv {

struct SweepRow {
  std::string id, param;
  int64_t width = 0, depth = 0, seed = 0;
  double lr_log2 = 0;
  double final_loss = 0;   // NaN when missing
  bool diverged = false;
  std::map<std::string, std::string> axes;  // the other grid axes (not param/width/depth/lr/seed): key -> value
  int64_t steps = 0;            // train.steps of the point's config (0: unknown)
  double weight_decay = 0;      // optim.weight_decay of the point's config
  bool wd_independent = false;  // optim.wd_mode = "independent" (decay wd per step, not lr x wd)
  bool wd_decoupled = false;    // the optimizer decays decoupled (its row, brain/optim/optimizer_kinds.h): a timescale
  std::string config;           // the point's resolved config (JSON text; "" when the store has none)
};

struct SweepTable {
  std::string db, name;            // several databases: "a.db + b.db", their sweep names likewise
  std::vector<SweepRow> rows;
  int64_t duplicates = 0;          // points read once though in several databases (same id)
  std::set<std::string> hparam_axes;  // grid axes a store declares hyperparameters (an imported store's meta):
                                      // re-tuned at every cell by a joint law (brain/report/joint_law.h)
};

// Reads the points table. UserError (exit 2) when the file is missing, is not a sweep database or
// holds no points.
SweepTable read_sweep_rows(const std::string& db_path);
// Several databases as one table (e.g. a sweep re-run with more seeds beside the first one): a
// point id (the hash of its resolved config) already read is read once, counted in `duplicates`,
// and the first database's row is kept. UserError as above, for the first file that fails, and for
// two stores that are different sweeps (named both, with the first config field that differs):
//  - a config field that each store holds at one value over all its points, and (the
//    parameterization's own fields, hp.* and param.*, too) over each parameterization both hold,
//    differs between them; the grid's axes (and the coordinates: width, depth, LR, seeds, param
//    name) and where a run writes its files are left out. Read as one, sweeps of other configs at
//    widths 32..256 and 512..1024 would be fitted as one law over 32..1024;
//  - two stores hold a point at the same coordinates (param, width, depth, LR, seed, other grid
//    axes) with different configs, which read as one would stand in for each other's points.
// Every reader of several stores (predict, transfer-report, scaleinv.predict and scaleinv.report)
// reads them through this function. Fixes that name the sweep command follow the caller
// (brain/util/errors.h's InputNames: scaleinv.sweep's keywords from Python).
SweepTable read_sweep_rows(const std::vector<std::string>& db_paths);

struct Optimum {
  double lr_log2 = 0;      // NaN when every grid point diverged
  double loss = 0;         // the parabola at the vertex (the grid mean when not fitted)
  int best_index = -1;     // the best grid point (-1: none finite)
  bool at_edge = false;    // best grid point is the smallest or largest LR
  bool fitted = false;     // false: the grid point itself (edge, or a diverged neighbour)
};

// Locates the optimum of y(x) (x increasing; y may hold +inf for diverged points).
Optimum locate_optimum(const std::vector<double>& x, const std::vector<double>& y);

struct LrPoint {
  double lr_log2 = 0;
  double mean_loss = 0;    // +inf when any seed diverged
  int seeds = 0;           // seeds run at this point
  int diverged = 0;        // of which diverged
};

struct ScaleCurve {
  double scale = 0;        // the value of the analysis axis (width, depth, batch size, ...)
  std::vector<LrPoint> points;  // by increasing LR
  Optimum opt;
  double lo = 0, hi = 0;   // bootstrap interval of opt.lr_log2 (NaN with one seed)
  int n_seeds = 0;
  int64_t steps = 0;       // train.steps of the curve's runs
  double tau_steps = 0;    // AdamW timescale at the optimum, steps (NaN without weight decay)
  double tau_fraction = 0; // tau_steps / steps
};

// Keeping the base LR at one value of the axis, against re-tuning there.
struct ScaleRegret {
  double scale = 0;
  double lr_log2_used = 0;   // the LR grid point used (the base LR, or the nearest run there)
  double loss = 0;           // mean loss there (+inf: diverged)
  double self_best = 0;      // best grid-point loss of this parameterization there
  double standard_best = 0;  // best grid-point loss of "standard" there (NaN: none in the group)
  double vs_self = 0, vs_self_lo = 0, vs_self_hi = 0;              // percent, with its interval
  double vs_standard = 0, vs_standard_lo = 0, vs_standard_hi = 0;  // percent (NaN: no standard)
};

struct ParamTransfer {
  std::string param;
  std::vector<ScaleCurve> curves;   // by increasing scale
  double slope = 0;                 // NaN with fewer than two located optima
  double slope_lo = 0, slope_hi = 0;  // its bootstrap interval
  double shift = 0;                 // doublings, largest minus smallest scale (NaN if undetermined)
  // The largest |optimum - the smallest scale's optimum| over every scale, doublings (+inf: every
  // LR diverged at some scale), and the scale where it is.
  double max_deviation = 0, max_deviation_at = 0;
  bool holds = false;               // shift finite and max_deviation <= shift_tolerance
  bool any_edge = false;            // some optimum sits at the LR grid edge
  std::string verdict;              // one line, e.g. "transfer holds: optimum moved +0.3 doublings ..."
  std::string shape;                // hyperparameter axes: "rises", "falls", "flat", "peaks at 16 (surge)", ...
  double shared_lr_log2 = 0;        // the base LR: the smallest value's best grid point
  std::vector<double> loss_at_shared;  // per curve (NaN: not run there)
  std::optional<bool> better_with_scale;  // nullopt: cannot tell (missing point)
  std::vector<ScaleRegret> regrets;  // per curve
  // The worst regret over the axis' values (+inf: the base LR diverges somewhere), where, and its
  // interval; against "standard" re-tuned (NaN when the group has none) and against itself.
  double worst_vs_standard = 0, worst_vs_standard_lo = 0, worst_vs_standard_hi = 0, worst_vs_standard_at = 0;
  double worst_vs_self = 0, worst_vs_self_lo = 0, worst_vs_self_hi = 0, worst_vs_self_at = 0;
};

// One row per analysis axis (see the header comment).
struct AxisInfo {
  std::string key;           // grid key, or "width" / "depth"
  std::string label;         // "batch size"
  bool scale = false;        // a model scale: transfer is judged
  std::string rule;          // the reference for the exponent ("" when none)
  double rule_exponent = 0;  // d log2 LR* / d log2 x under that rule (NaN when it gives no number)
};
// The row of `key` (a generic one, label = key, for an axis the table does not name).
AxisInfo axis_info(const std::string& key);

struct TransferGroup {
  std::string axis;        // "width", "depth" or a grid key such as "train.batch_size"
  AxisInfo info;           // axis_info(axis)
  std::string fixed;       // the scales held fixed, e.g. "depth 4" or "width 128, depth 2"
  std::string context;     // other axes held fixed ("" when none)
  std::vector<ParamTransfer> params;
  std::string title() const;  // "width transfer (depth 4)", "batch size (width 128, depth 2)"
  std::string slug() const;   // file-name friendly
};

// A choice made at the base scale and kept at every scale (issue 16's schedules: does the decay
// shape or the warmup chosen at the base stay the best?). For a grid axis other than the
// coordinates (a categorical one such as optim.schedule, or a numeric one such as
// optim.warmup_steps) crossed with width or depth, per parameterization and whatever else is held
// fixed: at each scale, the best grid-point loss of every value of the axis (its LR re-tuned
// there); the base choice is the value best at the smallest scale; its regret at each scale
// against the best value there, (a) with its LR re-tuned there, (b) at its base LR (its best grid
// point at the smallest scale; the nearest grid point where not run). Intervals: the same joint
// seed bootstrap as the LR analysis, the base choice re-made in every resample.
struct ChoiceScale {
  double scale = 0;
  std::vector<double> best_loss;  // per value of ChoiceTransfer::choices: best grid-point loss (NaN: not run; +inf: all diverged)
  std::string best_choice;        // "" when no value has a finite loss
  double regret = 0, regret_lo = 0, regret_hi = 0;                          // (a), percent
  double regret_base_lr = 0, regret_base_lr_lo = 0, regret_base_lr_hi = 0;  // (b), percent
};

struct ChoiceTransfer {
  std::string choice_axis;   // the grid key, e.g. "optim.schedule"
  std::string scale_axis;    // "width" or "depth"
  std::string param, fixed, context;  // fixed: "depth 2"; context: other axes held fixed ("" when none)
  std::vector<std::string> choices;   // the axis' values, sorted (numerically when all are numbers)
  std::string base_choice;            // "" when undetermined
  double base_lr_log2 = 0;            // the base choice's best grid point at the smallest scale
  std::vector<ChoiceScale> scales;    // by increasing scale
  // The worst regret over scales, its interval and where (NaN: undetermined; +inf: diverged).
  double worst = 0, worst_lo = 0, worst_hi = 0, worst_at = 0;
  double worst_base_lr = 0, worst_base_lr_lo = 0, worst_base_lr_hi = 0, worst_base_lr_at = 0;
  bool holds = false;                 // worst (a) <= TransferOptions::choice_tolerance_pct
  std::string title() const;          // "optim.schedule across width (depth 2)"
};

// The base LR against standard re-tuned in every swept hyperparameter (a stronger baseline than
// its LR alone; issue 16): where the databases hold standard with grid axes beyond the LR that are
// hyperparameters (hp.*, optim.*; e.g. the residual branch multiplier), at each scale standard's
// best grid-point loss over its LR and all of them, against the loss of a parameterization at its
// base LR (its smallest scale's best grid point; the nearest where not run). Standard rows count
// only when they match the parameterization's rows in everything else (the model scale held fixed,
// train.steps, every non-hyperparameter axis), and only on the parameterization's seeds (paired).
// Intervals: the parameterization's seeds resampled (its base LR re-chosen in every resample).
struct FullBaselineScale {
  double scale = 0;
  double loss = 0;           // the parameterization at its base LR (NaN: not run there)
  double standard_best = 0;  // standard's best over everything swept (NaN: no standard row)
  std::string standard_at;   // where: "hp.branch_mult=0.18, log2 LR -7.00"
  double regret = 0, regret_lo = 0, regret_hi = 0;  // percent
};

struct FullBaseline {
  std::string scale_axis, param, fixed, context;  // as the LR analysis' group (context: the param's other axes)
  std::vector<std::string> tuned;                 // standard's swept hyperparameters beside the LR
  double base_lr_log2 = 0;
  std::vector<FullBaselineScale> scales;          // by increasing scale
  double worst = 0, worst_lo = 0, worst_hi = 0, worst_at = 0;
  bool holds = false;                             // worst <= TransferOptions::choice_tolerance_pct
};

// The most bootstrap resamples a report or prediction takes. The interval's Monte Carlo error falls as
// 1/sqrt(N): at 100,000 it is about 0.3% of the interval's width, and each resample holds every
// point's losses (--bootstrap 100000000 took 4 GB in 15 s before running out of memory).
inline constexpr int kMaxBootstrap = 100000;

// UserError (file `where`, field `field`) unless 0 <= n <= kMaxBootstrap; `example` shows the fix's
// spelling ("--bootstrap 200" on the command line, "bootstrap=200" in Python).
void check_bootstrap(int64_t n, const std::string& where, const std::string& field, const std::string& example);

struct TransferOptions {
  int bootstrap = 200;
  uint64_t rng_seed = 20240611;
  double lo_q = 0.05, hi_q = 0.95;
  double shift_tolerance = 1.0;     // doublings
  double better_tolerance = 1e-3;   // relative increase still counted as "not worse"
  double choice_tolerance_pct = 1.0;  // a base choice (or a full-baseline regret) "holds" when its worst regret is at most this
};

struct TransferAnalysis {
  std::string db, name;
  int64_t rows = 0, diverged_rows = 0;
  TransferOptions opts;
  std::vector<TransferGroup> groups;
  std::vector<ChoiceTransfer> choices;
  std::vector<FullBaseline> full_baseline;
};

// Choices kept from the base scale (see ChoiceTransfer), for every grid axis with two values or more
// crossed with a model scale with two values or more. Defined in choice_transfer.cpp.
std::vector<ChoiceTransfer> analyze_choices(const SweepTable& table, const TransferOptions& opts = {});

// The base LR against standard re-tuned in every swept hyperparameter (see FullBaseline); empty
// unless standard was swept in a hyperparameter beside its LR. Defined in full_baseline.cpp.
std::vector<FullBaseline> analyze_full_baseline(const SweepTable& table, const TransferOptions& opts = {});

// The analysis axes present: width and depth, then every numeric grid axis with two values or
// more (the axis table's rows first, in its order). An axis with one value is listed too: callers
// skip it.
std::vector<std::string> analysis_axes(const SweepTable& table);

// The LR analysis of every axis, the choices (analyze_choices) and the full baseline.
TransferAnalysis analyze_transfer(const SweepTable& table, const TransferOptions& opts = {});
nlohmann::json transfer_to_json(const TransferAnalysis& a);

}  // namespace scaleinv
