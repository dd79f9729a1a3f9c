#pragma once
// Ordinary least squares of y on x: the one line fit of the project (coordinate checks and
// diagnostics through brain/util/slope_fit.h, the transfer report's optimum drift, the predicted LR
// at an untrained scale and its interval).
#include <cstddef>
#include <vector>

namespace scaleinv {

// slope and intercept; se: the slope's standard error from the residuals (n - 2 degrees of freedom,
// +inf when n <= 2); sd: the residual standard deviation (NaN when n <= 2); mean_x and sxx (the sum
// of squared deviations of x) for a prediction interval. With fewer than 2 distinct x the slope,
// intercept, se and sd are NaN.
struct OlsFit {
  double slope = 0, intercept = 0, se = 0, sd = 0, mean_x = 0, sxx = 0;
  size_t n = 0;
  double at(double x) const { return intercept + slope * x; }
  // Half-width of the z-quantile prediction interval of a new y at x: z sd sqrt(1 + 1/n + (x - mean_x)^2 / sxx).
  double prediction_half_width(double x, double z) const;
};
// x and y must have the same length (std::invalid_argument otherwise).
OlsFit ols_fit(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace scaleinv
