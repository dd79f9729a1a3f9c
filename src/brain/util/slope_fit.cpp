// Slope fits over seeds: OLS, the t-interval, the one per-seed fitter (see slope_fit.h).
#include "brain/util/slope_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

namespace scaleinv {

MeanInterval mean_interval(const std::vector<double>& values) {
  MeanInterval m;
  const double S = static_cast<double>(values.size());
  if (values.empty()) {
    m.mean = m.se = m.t = m.half_width = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  for (double v : values) m.mean += v;
  m.mean /= S;
  if (values.size() == 1) {
    m.se = m.t = m.half_width = std::numeric_limits<double>::infinity();
    return m;
  }
  double ss = 0;
  for (double v : values) ss += (v - m.mean) * (v - m.mean);
  m.se = std::sqrt(ss / (S - 1)) / std::sqrt(S);
  m.dof = static_cast<int>(values.size()) - 1;
  m.t = student_t_quantile(0.975, m.dof);
  m.half_width = m.t * m.se;
  return m;
}

double student_t_quantile(double p, int dof) {
  if (!(p > 0.5 && p < 1) || dof < 1) throw std::invalid_argument(fmt::format("t quantile: p = {}, dof = {}", p, dof));
  static const double k975[31] = {0,      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                  2.201,  2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
                                  2.074,  2.069,  2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (std::fabs(p - 0.975) < 1e-12 && dof <= 30) return k975[dof];
  // Cornish-Fisher expansion of t in terms of the normal quantile z (Abramowitz-Stegun 26.7.5).
  // z from the Acklam-style rational approximation of the normal quantile (|error| < 1e-8).
  const double q = p;
  const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                      1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                      6.680131188771972e+01,  -1.328068155288572e+01};
  const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                      -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  double z;
  if (q < 0.97575) {
    const double r0 = q - 0.5, r = r0 * r0;
    z = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * r0 /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double r = std::sqrt(-2 * std::log(1 - q));
    z = -(((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) /
        ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1);
  }
  const double v = dof, z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z, z9 = z7 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v) +
         (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * v * v * v * v);
}

InverseWidthFit fit_inverse_width(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed) {
  InverseWidthFit f;
  std::vector<double> xs = x;
  std::sort(xs.begin(), xs.end());
  if (std::unique(xs.begin(), xs.end()) - xs.begin() < 4 || y_by_seed.size() < 2 || !(xs.front() > 0)) return f;
  // Columns 1, ln x, u = x_min / x (u in (0, 1] keeps the normal equations well scaled; c = c_u x_min).
  const size_t n = x.size();
  std::vector<std::array<double, 3>> rows(n);
  for (size_t i = 0; i < n; ++i) rows[i] = {1.0, std::log(x[i]), xs.front() / x[i]};
  // Least squares of v on the three columns: the coefficients, or nullopt for a singular system.
  auto solve = [&](const std::vector<double>& v) -> std::optional<std::array<double, 3>> {
    double ata[3][4] = {};  // [A^T A | A^T v]
    for (size_t i = 0; i < n; ++i)
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 3; ++c) ata[r][c] += rows[i][r] * rows[i][c];
        ata[r][3] += rows[i][r] * v[i];
      }
    for (int col = 0; col < 3; ++col) {  // Gauss-Jordan with partial pivoting
      int piv = col;
      for (int r = col + 1; r < 3; ++r)
        if (std::fabs(ata[r][col]) > std::fabs(ata[piv][col])) piv = r;
      if (std::fabs(ata[piv][col]) < 1e-300) return std::nullopt;
      for (int c = 0; c < 4; ++c) std::swap(ata[col][c], ata[piv][c]);
      for (int r = 0; r < 3; ++r) {
        if (r == col) continue;
        const double m = ata[r][col] / ata[col][col];
        for (int c = col; c < 4; ++c) ata[r][c] -= m * ata[col][c];
      }
    }
    return std::array<double, 3>{ata[0][3] / ata[0][0], ata[1][3] / ata[1][1], ata[2][3] / ata[2][2]};
  };
  std::vector<double> es, cs;
  for (const std::vector<double>& ys : y_by_seed) {
    if (ys.size() != n) return f;
    std::vector<double> ly(n);
    for (size_t i = 0; i < n; ++i) {
      if (!(std::isfinite(ys[i]) && ys[i] > 0)) return f;
      ly[i] = std::log(ys[i]);
    }
    const auto coef = solve(ly);
    if (!coef) return f;
    es.push_back((*coef)[1]);
    cs.push_back((*coef)[2] * xs.front());
  }
  std::vector<double> u2(n);
  for (size_t i = 0; i < n; ++i) u2[i] = rows[i][2] * rows[i][2];
  const auto beta = solve(u2);  // u^2 = (x_min / x)^2 on the columns: its ln x coefficient
  if (!beta) return f;
  f.e = mean_interval(es);
  f.c = mean_interval(cs);
  const double c_u = f.c.mean / xs.front();  // c in units of u
  f.next_order = 0.5 * c_u * c_u * std::fabs((*beta)[1]);
  f.valid = true;
  return f;
}

double finite_size_term(double x_min, double x_max, double n) {
  if (!(x_min > 0) || !(x_max > x_min)) return 0;
  const double range = std::log(x_max / x_min);
  if (n > 0) return 0.5 * (std::log1p(n / x_min) - std::log1p(n / x_max)) / range;
  return std::log1p(1 / std::sqrt(x_min)) / range;
}

SlopeFit fit_seed_slopes(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed,
                         const SlopeFitOptions& opts) {
  const bool reject = opts.bad_values == SlopeFitOptions::BadValues::reject;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SlopeFit f;
  if (reject) {
    for (const auto& row : y_by_seed)
      if (row.size() != x.size())
        throw std::invalid_argument(fmt::format("slope fit: {} values for {} x", row.size(), x.size()));
    if (y_by_seed.empty()) {
      f.problem = "no seeds";
      return f;
    }
  }
  std::vector<double> u;
  for (double xi : x) {
    if (reject && (!std::isfinite(xi) || (opts.log_x && !(xi > 0)))) {
      f.problem = opts.log_x ? fmt::format("x = {} is not positive", xi) : fmt::format("x = {} is not finite", xi);
      return f;
    }
    u.push_back(opts.log_x ? (xi > 0 ? std::log(xi) : nan) : xi);
  }
  if (reject) {
    double umin = INFINITY, umax = -INFINITY;
    for (double ui : u) umin = std::min(umin, ui), umax = std::max(umax, ui);
    if (u.size() < 2 || !(umax > umin)) {
      f.problem = "fewer than 2 distinct x";
      return f;
    }
  }
  std::vector<OlsFit> fits;  // one per seed; all NaN for a seed with a bad value (nan_seed)
  for (const auto& row : y_by_seed) {
    std::vector<double> v;
    bool ok = row.size() == x.size();
    for (double y : row) {
      const char* bad = !std::isfinite(y)            ? "a value is not finite (diverged)"
                        : (opts.log_y && !(y > 0)) ? "a value is zero"
                                                   : nullptr;
      if (bad && reject) {
        f.problem = bad;
        return f;
      }
      ok = ok && !bad;
      v.push_back(bad ? nan : opts.log_y ? std::log(y) : y);
    }
    fits.push_back(ok ? ols_fit(u, v) : OlsFit{nan, nan, nan});
  }
  f.valid = true;
  if (fits.empty()) return f;  // nan_seed without seeds: every number 0
  double mi = 0;
  for (const OlsFit& o : fits) {
    mi += o.intercept;
    f.per_seed.push_back(o.slope);
  }
  const MeanInterval m = mean_interval(f.per_seed);
  f.slope = m.mean;
  f.intercept = mi / static_cast<double>(fits.size());
  if (fits.size() >= 2) {
    f.se = m.se;
    f.dof = m.dof;
    f.t = m.t;
    f.half_width = m.half_width;
    f.method = "seeds";
  } else if (u.size() >= 3) {
    f.se = fits[0].se;
    f.dof = static_cast<int>(u.size()) - 2;
    f.t = student_t_quantile(0.975, f.dof);
    f.half_width = f.t * f.se;
    f.method = "ols";
  } else {
    f.method = "none";
    if (opts.no_interval == SlopeFitOptions::NoInterval::infinite) {
      f.se = fits[0].se;
      f.half_width = std::numeric_limits<double>::infinity();
    }
  }
  return f;
}

SlopeFit fit_loglog_slope(const std::vector<double>& x, const std::vector<std::vector<double>>& y_by_seed) {
  return fit_seed_slopes(x, y_by_seed, SlopeFitOptions{});
}

}  // namespace scaleinv
