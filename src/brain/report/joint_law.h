#pragma once
// A hyperparameter's optimum as one power law in several scale axes at once (issue 60; `scaleinv
// predict --joint N,D`, `scaleinv.predict(..., joint=[...])`). Pure: reads nothing but the table
// given, writes nothing.
//
// The law. For one parameterization,
//   log2 h*(x) = a + sum_i b_i log2 x_i                         (ordinary least squares)
// over the axes named (width, depth, N, D, train.steps, train.batch_size, any numeric grid key), the
// form of Step Law (Li et al. 2025, docs/references.md [step-law]: LR* = 1.79 N^-0.713 D^0.307,
// B* = 0.58 D^0.571) and of every one-axis rule predict.h fits; with one axis it is predict.h's law.
// h is the LR, or another swept hyperparameter (`hparam`, e.g. a batch size).
//
// Cells. The re-tuned axes are the LR, the predicted hyperparameter, and every axis the store
// declares a hyperparameter (an imported store's meta) or `retune` names; any other axis that
// varies and is not in the law is pooled (the law does not see it; the output names it: B* in D
// alone is fitted over cells at every N). A cell is one point of the law's and the pooled axes;
// its rows are averaged over seeds per re-tuned point, and its loss surface is that seed-mean loss
// (+inf where a seed diverged; a point not run is missing, not diverged). A target may name pooled
// axes too (the loss is read there), and holdout_upto may split on one.
// The fitted rows (`near_optimal_pct`):
//  - 0: each cell's optimum, the re-tuned point of least loss (its h) -- one row per cell;
//  - > 0: every re-tuned point of the cell within pct% of its best loss -- one row each, Step Law's
//    estimator (0.25%), which uses every near-optimal run rather than one noisy argmin.
// The measured optimum of a cell (what an error is measured against) is always its argmin.
//
// The interval (90% by default). The law is re-fitted on `bootstrap` resamples of the fitted cells
// (cells drawn with replacement, so the rows of one cell stay together; a fixed generator seed);
// var_law(x) is the variance of the resampled laws at x, which grows with the distance of x from
// the cells along every axis. The cells' own optima scatter about the law by s (the residual SD of
// the cells' argmin optima about the fitted law, n_cells - p degrees of freedom). A new cell's
// optimum at x is predicted within
//   law(x) +- t_{q, n_cells - p} sqrt(var_law(x) + s^2)
// (Student t; q = 0.95 for 90%). Its coverage is measured by leave-one-scale-out (loso_coverage).
//
// Declined. A target further than `max_extrapolation` doublings outside the fitted cells' range on
// any axis, or further than that axis' fitted span, is declined with the reason; so is a fit with
// fewer cells than coefficients plus one (no residual to judge it).
//
// Regret and baselines. Per cell, the profile of h: at each value of h, the least loss over the
// other re-tuned axes. Regret at a value = that profile (linear in log2 h between grid values; NaN
// outside them) against its best, in percent. The expected regret at a prediction is k sigma^2,
// k the profiles' curvature (percent per doubling^2: the median over the fitted cells of the
// quadratic through each profile's best point and its neighbours within one doubling, fitted by
// least squares) and sigma the prediction's standard deviation; at a baseline value v it is
// k ((v - prediction)^2 + sigma^2). The baselines: the largest fitted scale's optimum carried (the
// fitted cell largest on the axis the holdout splits on, else the law's first, ties broken by the
// nearest in the others), the
// parameterization's own rule (the smallest fitted cell's optimum carried: a swept LR is the base
// LR the table's exponents scale), and a reference law when one is given (`reference`: a published
// law, e.g. Step Law's, c prod x_i^e_i in h's own units).
// Loss at the prediction. The cells' best losses are fitted by the same form, log2 L* = c +
// sum_i d_i log2 x_i (a power law without an irreducible term: good over a few doublings, biased
// beyond; in the pooled axes too, which the loss depends on), and read at the target with its
// least-squares interval (t sd sqrt(1 + leverage)); the loss expected at the
// predicted h adds the expected regret.
//
// Held out (`holdout_upto`): the cells with every law axis at or below the value given for it are
// fitted, every other cell is held out and read as a target, with its measured optimum, error
// (doublings, predicted - measured), regret, and the baselines' errors and regrets.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "brain/report/transfer.h"

namespace scaleinv {

// The fitted rows' default tolerance (percent): every run within 0.25% of its cell's best, Step
// Law's; over the stores docs/predict.md holds out it beat each cell's argmin on average.
inline constexpr double kJointNearOptimalPct = 0.25;

struct JointLawOptions {
  std::vector<std::string> axes;            // the law's axes (e.g. {"N", "D"}); "batch"/"steps" read as train.*
  std::string hparam = "lr";                // what the law predicts: "lr" or a numeric grid key
  std::vector<std::string> retune;          // further axes re-tuned at every cell (beside the LR and hparam)
  std::map<std::string, double> at;         // a target (every law axis); empty: none
  std::map<std::string, double> holdout_upto;  // axis -> largest fitted value; non-empty: the held-out check
  std::map<std::string, double> reference;  // "c" and one exponent per law axis; empty: no reference law
  std::string reference_name = "reference law";
  bool loso = false;                        // the leave-one-scale-out coverage is asked for (then at and
                                            // holdout_upto may both be empty: the law alone is fitted)
  std::string param;                        // only this parameterization ("" = every one)
  double near_optimal_pct = kJointNearOptimalPct;  // 0: each cell's argmin; > 0: every run within pct% of its cell's best
  double max_extrapolation = 3;             // doublings outside the fitted cells, per axis, at most
  double level = 0.90;                      // the interval's coverage
  int bootstrap = 200;                      // cell resamples (0: the law's own spread is left out)
  uint64_t rng_seed = 12345;
};

struct LawCell {
  std::map<std::string, double> x;  // the law's axes
  double optimum = 0;               // log2 h of the cell's best re-tuned point (NaN: all diverged)
  double best_loss = 0;
  bool at_edge = false;             // the optimum sits at the edge of the cell's h values
  int rows = 0;                     // rows it gives the fit (1, or its near-optimal points)
  std::vector<std::pair<double, double>> profile;  // (log2 h, least loss over the other re-tuned axes), by h
};

struct JointLawFit {
  std::string param;
  std::vector<std::string> axes;
  std::vector<double> coef, coef_lo, coef_hi;  // intercept first, then one per axis (log2 units)
  double residual_sd = 0;           // the cells' optima about the law, doublings
  int n_cells = 0, n_rows = 0, dof = 0;
  double t = 0;                     // the interval's Student t quantile
  double curvature = 0;             // percent regret per doubling^2 (NaN: no profile to read it)
  std::vector<std::string> loss_axes;  // the loss law's axes: the law's and the pooled ones positive in every cell
  std::vector<double> loss_coef;    // log2 L* law, intercept first (empty: fewer cells than coefficients + 1)
  double loss_sd = 0;
  std::vector<LawCell> cells;       // the fitted cells
  std::vector<std::string> pooled;  // axes that vary but are neither in the law nor re-tuned
  std::vector<std::string> retuned; // the axes re-tuned at every cell besides h
};

struct JointPrediction {
  std::string param;
  std::map<std::string, double> x;  // the target (or the held-out cell)
  std::string status;               // "predicted" or "declined: <reason>"
  double extrapolation = 0;         // the largest doublings outside the fitted cells over the axes
  double value = 0, lo = 0, hi = 0, sd = 0;  // log2 h, its interval, its standard deviation
  double expected_regret = 0;       // percent
  double loss = 0, loss_lo = 0, loss_hi = 0;  // the loss expected at the prediction (NaN: no loss law)
  // Baselines: log2 h and the expected regret there (and, held out, the error and measured regret).
  struct Baseline {
    std::string name;
    double value = 0, expected_regret = 0, error = 0, regret = 0;
  };
  std::vector<Baseline> baselines;
  bool held_out = false;
  double measured = 0, error = 0, regret = 0, measured_loss = 0;  // NaN unless held out
  bool covered = false;             // held out: measured within [lo, hi]
  bool measured_at_edge = false;
};

struct JointLawResult {
  JointLawOptions opts;
  std::vector<JointLawFit> fits;             // one per parameterization
  std::vector<JointPrediction> predictions;  // targets, then held-out cells
  std::vector<std::string> notes;
};

// The law, the target's prediction and the held-out checks. UserError (exit 2) for: no axis, an axis
// the store lacks (named with the axes it has) or that holds one value (nothing to fit), an hparam
// that is also a law axis or is not swept, a target missing a law axis or not positive, a
// parameterization the store lacks, axes collinear in the fitted cells (named: the law cannot
// separate them), fewer fitted cells than coefficients plus one, a holdout_upto that fits or holds
// out nothing, a malformed reference law. With several parameterizations, one that cannot be fitted
// (too few cells, one value, collinear axes) is left out with a note naming why, unless none fits.
JointLawResult fit_joint_law(const SweepTable& table, const JointLawOptions& opts);

// Leave-one-scale-out: for every value v of the first law axis above its two smallest, the law is
// fitted on the cells below v and read at the cells at v. How many measured optima fell inside the
// interval, of how many read (declined cells are not counted), and the mean |error|.
struct Coverage {
  int covered = 0, read = 0;
  double mean_abs_error = 0;
};
Coverage loso_coverage(const SweepTable& table, const JointLawOptions& opts);

std::string joint_law_markdown(const JointLawResult& r);
nlohmann::json joint_law_to_json(const JointLawResult& r);

}  // namespace scaleinv
