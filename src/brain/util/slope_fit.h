#pragma once
// Slope fits with a confidence interval over seeds: the one per-seed fitter of the measurements
// (coordinate checks, docs/design.md "Data flow of a coordinate check", step 4; the diagnostics'
// diag::fit_slope).
//
// Given x_i (widths or depths, i = 1..n) and, per seed s = 1..S, values y_si, the slope of
// (ln) y against (ln) x is fitted by ordinary least squares separately for every seed. The
// estimate is the mean of the S per-seed slopes; its standard error is their sample standard
// deviation over sqrt(S); the 95% interval is mean +- t_{0.975, S-1} * SE (Student t: the seeds
// are S independent replicates of the whole sweep, so the interval covers the slope's seed noise,
// correlations between x values included).
// With one seed the interval falls back to the OLS standard error of that seed's fit, with n - 2
// degrees of freedom (it then measures only the scatter around a power law, not seed noise);
// with one seed and two x values no interval can be computed (SlopeFitOptions::no_interval says
// what the half-width is then; `method` says so).
#include "brain/util/ols.h"
#include <string>
#include <vector>

namespace scaleinv {

struct SlopeFit {
  bool valid = false;          // false: rejected (BadValues::reject only; `problem` says why)
  std::string problem;         // why not valid
  double slope = 0;            // mean of the per-seed slopes
  double intercept = 0;        // mean of the per-seed intercepts of (ln) y = intercept + slope (ln) x
  double se = 0;               // standard error of `slope`
  int dof = 0;                 // degrees of freedom of the t quantile (0: no interval)
  double t = 0;                // t_{0.975, dof}
  double half_width = 0;       // t * se: the 95% interval is slope +- half_width
  std::string method;          // "seeds" (S >= 2), "ols" (S = 1, n >= 3), "none"
  std::vector<double> per_seed;  // the per-seed slopes
};

// The two behaviours the callers rely on, as explicit options of the one fitter.
struct SlopeFitOptions {
  bool log_x = true, log_y = true;  // fit ln x / ln y (values must then be > 0)
  // What a value that cannot be fitted does: a y that is not finite, or <= 0 under log_y.
  //   reject   (fit_loglog_slope): the whole fit is invalid (valid = false, `problem` names the
  //            first bad value, the numbers stay 0). The input is checked first: a row without
  //            x.size() entries throws std::invalid_argument; no seeds, an x that is not finite
  //            (or not > 0 under log_x) and fewer than 2 distinct x make the fit invalid.
  //   nan_seed (diag::fit_slope): that seed's slope and intercept are NaN (so is the mean over
  //            seeds, never a silent number), and so is a row without x.size() entries; x is not
  //            checked (an x <= 0 under log_x, or fewer than 2 distinct x, gives every seed NaN
  //            through ols_fit). No seeds: every number 0. valid is true.
  enum class BadValues { reject, nan_seed } bad_values = BadValues::reject;
  // One seed with fewer than 3 x values (no residual degrees of freedom; method "none", dof 0):
  //   zero     (fit_loglog_slope): se and half_width 0.
  //   infinite (diag::fit_slope): se is that seed's OLS se (+inf with two x), half_width +inf.
  enum class NoInterval { zero, infinite } no_interval = NoInterval::zero;
};

// y_by_seed[s][i] is the value at x[i] for seed s.
SlopeFit fit_seed_slopes(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed,
                         const SlopeFitOptions& opts);

// Log-log slope for the coordinate check: fit_seed_slopes with the default options (ln x, ln y,
// reject, zero). Every row must have x.size() entries (std::invalid_argument otherwise).
SlopeFit fit_loglog_slope(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed);

// Ordinary least squares (ols_fit, OlsFit): brain/util/ols.h, included here.

// The mean of S replicate values (per-seed slopes, per-seed statistics) with its standard error
// sd / sqrt(S) and the 95% half-width t_{0.975, S-1} * se. S = 1: se and half-width +inf, dof 0.
// S = 0: everything NaN.
struct MeanInterval {
  double mean = 0, se = 0, t = 0, half_width = 0;
  int dof = 0;
};
MeanInterval mean_interval(const std::vector<double>& values);

// The exponent past the leading finite-width correction: the coordinate check's second look at a
// width row whose slope misses its prediction (coord_result.h). A finite network's observable
// averages are a power series in 1/width around the infinite-width limit, in the feature-learning
// regime too, with coefficients that are not small when feature learning is strong
// (ref. [finite-width]); so the mean over seeds of ln RMS is
// a + e ln d + c/d + O(d^-2). Per seed, least squares of ln y on (1, ln d, 1/d); e and c are the
// means over seeds with their 95% intervals (mean_interval; c in units of the width). valid needs
// >= 4 distinct x (a residual degree of freedom per seed), >= 2 seeds, and every y finite and > 0.
// next_order is the bias of e from the O(d^-2) term the fit leaves out, at the size the fitted c
// implies (ln(1 + c/d) = c/d - c^2/(2 d^2) + ...): (c^2 / 2) |beta|, beta the ln d coefficient of
// d^-2 regressed on (1, ln d, 1/d) over these widths.
struct InverseWidthFit {
  bool valid = false;
  MeanInterval e, c;
  double next_order = 0;
};
InverseWidthFit fit_inverse_width(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed);

// Two-sided Student t quantile t_{p, dof} for p in (0.5, 1), dof >= 1 (exact table for p = 0.975
// and dof <= 30; the Cornish-Fisher expansion otherwise, accurate to ~1e-3 for dof >= 3).
double student_t_quantile(double p, int dof);

// The finite-size term of the coordinate-check tolerance along width. The theory's exponents are
// those of the part of a sum that is aligned (coherent over the d coordinates). What remains of a
// sum over n independent directions (the probe's inputs, whose updates are not aligned with a given
// input, and the outputs, whose rows are not aligned with a given update) is incoherent: relative
// to the aligned part it has size sqrt(n / d). So a Theta(d^e) quantity measures as
// A d^e sqrt(1 + n/d), whose log-log slope over [x_min, x_max] is off by at most
//   (1/2) [ln(1 + n/x_min) - ln(1 + n/x_max)] / ln(x_max / x_min)          (n > 0)
// With n = 0 the term is the brief's generic O(x^-1/2) correction with constant 1:
//   ln(1 + x_min^-1/2) / ln(x_max / x_min)                                  (n = 0; used along depth)
double finite_size_term(double x_min, double x_max, double n = 0);

}  // namespace scaleinv
