#pragma once
// The optimal learning rate at a scale that was not trained (issue 41's `predict`), read from a
// sweep store; `scaleinv predict` prints it, `scaleinv.predict` returns it. Pure: reads nothing
// but the table given, writes nothing.
//
// The law. Per group of an axis (as transfer-report groups a store: the axis varies, the other
// scales and grid axes are held fixed) and per parameterization, the optimum located at every
// value of the axis (brain/report/transfer.h: the vertex of the parabola through the best grid point and
// its two neighbours, on the seed-averaged curve) is fitted by a power law in the axis,
//   log2 LR*(x) = a + b log2 x                                  (ordinary least squares)
// which is the form of every rule the axis table names: exponent 0 under a scale-invariant
// parameterization in its own coordinates, Bjorck et al.'s LR*(D) = B D^-beta for the horizon,
// the square-root rule for Adam's batch size (docs/references.md [horizon], [sqrt-rule]).
//
// The interval (90%):
//  - seeds: the joint seed bootstrap transfer-report uses (the same resamples, TransferOptions):
//    the law is re-fitted in every resample and read at the target; the 5% and 95% percentiles;
//  - the law's shape: with three values or more, the residual spread s of the point fit (n - 2
//    degrees of freedom) gives the least-squares prediction half-width
//      z s sqrt(1 + 1/n + (x_T - mean x)^2 / Sxx),  z = 1.645, x = log2 of the axis values,
//    which grows with the target's distance from the data (a law that bends at scale shows as
//    residual spread); it is added to each side of the seed interval in quadrature. With two values
//    the law cannot be checked: the interval is the seeds' alone, and a note says so;
//  - extrapolation: the target's distance in doublings outside the fitted values. Beyond
//    `max_extrapolation` doublings (default 3: 8x past the largest value) or beyond the fitted
//    span itself (a law measured over one doubling is not read three doublings away) the
//    prediction is declined: status "declined", with the reason.
// Near-optimal runs (`near_optimal_pct` > 0): optima are flat (the LR varies 1.4-4x within 0.25%
// of the best loss), so instead of the parabola vertex each curve's optimum is the centre of its
// near-optimal band: from where the seed-mean curve (linear in log2 LR between grid points, as the
// regret reads it) first rises above best x (1 + pct/100) on the left of its best grid point to
// where it does on the right. Every run within the tolerance moves it, not only the argmin and its
// two neighbours; a band that reaches the grid's end is a bound (at_edge). The same estimator is
// used for the fit, the bootstrap draws and the held-out measured optimum.
// Regimes. A horizon (train.steps) or batch-size fit comes from a product grid, so the other of the
// two is held fixed within its group; a note names the policy: at a fixed batch the optimum falls
// with the horizon (Bjorck et al.), where the batch is re-tuned at every scale it rises (Li et al.,
// Step Law), so a fit of one regime is not read in the other.
// Other axes of the target. A target may name several axes (width=2048, depth=48). The group's
// own axis is predicted as above; every other named axis whose value differs from the one the
// group holds fixed adds b_k log2(target_k / held_k), with b_k from a group of that axis in the
// same store for the same parameterization (its interval added in quadrature; the axes assumed
// to act separately, log-additively: a note says so; `predict --joint` fits them as one law, see
// brain/report/joint_law.h). The added axis is declined as the group's own is: a target outside that
// law's fitted values by more than max_extrapolation doublings or its span. An axis the store never varied for a
// parameterization predicted holds no law: a target on it is refused (UserError naming the axis
// and what the points hold: one value, e.g. a CLI sweep's depth 2, or none, a Python sweep's depth
// that was never set), unless it is the value the points hold (nothing moves). A group that holds
// no value of the axis, or whose law in it has fewer than two located optima, is declined.
//
// Held out (`holdout`): every group with three values or more is fitted on all values but the
// largest and read at the largest (with `fit_upto`: fitted on the values up to it, two at least,
// and read at each larger value, one check each). error = predicted - measured optimum, in doublings; regret =
// the held-out curve's mean loss at the predicted LR (linear in log2 LR between the neighbouring
// grid points, so never below either: conservative where the curve is convex) against its best
// grid point, in percent; both with their bootstrap intervals (per resample: that resample's law
// and curve). Baselines: the smallest value's optimum carried unchanged, which is also the
// parameterization's own rule (a swept LR is the base LR the table's exponents scale), and the
// largest fitted value's optimum carried (what a user carries by hand, issue 60).
// Another hyperparameter (`hparam`, a numeric grid key swept beside the LR and a scale, e.g.
// hp.branch_mult): its optimum is read, fitted, held out and declined exactly as the LR's, on the
// store's profile over the LR (brain/report/hparam_profile.h: at every value of the key the LR re-tuned,
// so a held-out regret is that of the predicted value with the LR re-tuned there). The tables and
// notes name the key where they name the LR; under a scale-invariant parameterization a multiplier's
// own rule is the base's value carried (exponent 0), which the baseline column is.
// hparam "all" predicts the LR and then every swept hyperparameter (brain/report/hparam_profile.h's
// swept_hparams) that has a group to fit, one markdown section each.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "brain/report/transfer.h"

namespace scaleinv {

struct PredictOptions {
  // The target: axis -> value. Axes: "width", "depth" or a numeric grid key of the store
  // ("train.batch_size", "train.steps"; "batch" and "steps" are read as those).
  std::map<std::string, double> at;
  bool holdout = false;          // the held-out check instead of (or beside) a target
  double fit_upto = 0;           // holdout: fit on the values <= this, check every larger one (0: all but the largest)
  std::string param;             // only this parameterization ("" = every one)
  std::string hparam;            // "" or "lr": the LR; a swept hyperparameter's grid key (above); "all":
                                 // the LR and every swept hyperparameter with a group to fit, in that order
  double max_extrapolation = 3;  // doublings outside the fitted values, at most
  double near_optimal_pct = 0;   // > 0: each optimum is its near-optimal band's centre (above); 0: the parabola vertex
  double z = 1.6448536269514722; // the normal quantile of the interval's upper end (90%: 0.95)
  TransferOptions transfer;      // bootstrap resamples, generator seed, percentiles
};

struct PowerLawFit {
  std::vector<double> values;       // the axis values fitted, increasing
  std::vector<double> optima;       // their located optima, log2 LR (NaN: every LR diverged)
  std::vector<double> lo, hi;       // each optimum's bootstrap interval (NaN with one seed)
  std::vector<bool> at_edge;        // the optimum sits at the LR grid's edge (a bound, not a value)
  double intercept = 0, slope = 0;  // log2 LR* = intercept + slope log2 x (NaN: fewer than two optima)
  double slope_lo = 0, slope_hi = 0;
  double residual_sd = 0;           // doublings (NaN with two points)
};

// The centre of the near-optimal band of y(x) (x increasing, y may hold +inf): where y is within
// `pct` percent of its best finite value (see above); the crossing next to a diverged point is that
// point's inner neighbour. lr_log2 NaN when every point diverged.
Optimum near_optimal_centre(const std::vector<double>& x, const std::vector<double>& y, double pct);

struct Prediction {
  std::string axis, fixed, context, param;  // the group (as transfer-report titles it) and param
  std::string hparam = "lr";  // what is predicted: "lr" or a grid key; every *_log2 below is log2 of it
  PowerLawFit fit;
  double target = 0;          // the axis value read (the held-out value under holdout)
  double extrapolation = 0;   // doublings outside the fitted values (0 inside)
  std::string status;         // "predicted" or "declined: <reason>"
  double lr_log2 = 0, lo = 0, hi = 0;  // the prediction and its interval (NaN when declined)
  std::vector<std::string> notes;      // what the reader must know (edge optima, two values, composed axes)
  // Held out (NaN otherwise).
  bool held_out = false;
  double measured = 0, measured_lo = 0, measured_hi = 0;  // the held-out value's optimum
  double error = 0, error_lo = 0, error_hi = 0;           // doublings, predicted - measured
  double regret = 0, regret_lo = 0, regret_hi = 0;        // percent
  double base_lr_log2 = 0, base_error = 0, base_regret = 0, base_regret_lo = 0, base_regret_hi = 0;
  // The largest fitted value's optimum carried (what a user carries by hand), the same readings.
  double last_lr_log2 = 0, last_error = 0, last_regret = 0, last_regret_lo = 0, last_regret_hi = 0;
  std::string title() const;  // "mup, width (depth 2)"
};

// The predictions for `opts.at` (one per group of each named axis and parameterization) and,
// with opts.holdout, the held-out checks. UserError (exit 2) for a target axis the store does not
// hold and that is no scale (named with the axes it holds) or that it never varied (above), a value
// that is not a positive finite number, neither a target nor holdout, fit_upto without holdout or
// splitting no group (two values or more at or below it and one above), a parameterization the
// store lacks, an hparam the store does not sweep beside the LR (or also named as a target axis),
// or no group to fit.
std::vector<Prediction> predict(const SweepTable& table, const PredictOptions& opts);

// The checks that need no store (a target or holdout, fit_upto, max_extrapolation, positive
// values, an hparam that is not also a target axis): UserError as predict's. predict runs them first; a caller may run them before reading.
void check_predict_request(const PredictOptions& opts);

// The markdown tables `scaleinv predict` prints (predictions, then held-out checks); the
// optimum's estimator is named when it is the near-optimal band's (opts.near_optimal_pct > 0).
std::string predict_markdown(const std::vector<Prediction>& preds, const PredictOptions& opts = {});
nlohmann::json predict_to_json(const std::vector<Prediction>& preds, const PredictOptions& opts);

}  // namespace scaleinv
