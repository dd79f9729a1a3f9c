#include "brain/util/ols.h"
#include "brain/util/nonfinite.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace scaleinv {

double OlsFit::prediction_half_width(double x, double z) const {
  return z * sd * std::sqrt(1.0 + 1.0 / static_cast<double>(n) + (x - mean_x) * (x - mean_x) / sxx);
}

OlsFit ols_fit(const std::vector<double>& u, const std::vector<double>& v) {
  if (u.size() != v.size())
    throw std::invalid_argument("OLS: " + std::to_string(u.size()) + " x for " + std::to_string(v.size()) + " y");
  OlsFit r;
  r.n = u.size();
  const double n = static_cast<double>(u.size());
  double mu = 0, mv = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    mu += u[i];
    mv += v[i];
  }
  mu /= n;
  mv /= n;
  double suu = 0, suv = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    suu += (u[i] - mu) * (u[i] - mu);
    suv += (u[i] - mu) * (v[i] - mv);
  }
  r.mean_x = mu;
  r.sxx = suu;
  if (!(suu > 0)) {
    r.slope = r.intercept = r.se = r.sd = kNaN;
    return r;
  }
  r.slope = suv / suu;
  r.intercept = mv - r.slope * mu;
  r.se = std::numeric_limits<double>::infinity();
  r.sd = kNaN;
  if (u.size() > 2) {
    double rss = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      const double e = v[i] - r.intercept - r.slope * u[i];
      rss += e * e;
    }
    r.sd = std::sqrt(rss / (n - 2));
    r.se = std::sqrt(rss / (n - 2) / suu);
  }
  return r;
}

}  // namespace scaleinv
