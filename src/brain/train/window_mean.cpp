// A run's final loss from its curve (see window_mean.h).
#include "brain/train/window_mean.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace scaleinv {

double window_mean(const std::vector<double>& losses, double fraction) {
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t n = losses.size();
  // (- 1e-9: 0.1 x 150 is 15.000000000000002 in binary, and means 15.)
  const auto want = static_cast<size_t>(std::ceil(fraction * static_cast<double>(n) - 1e-9));
  const size_t k = std::min(n, std::max<size_t>(1, want));
  double s = 0;
  for (size_t i = n - k; i < n; ++i) s += losses[i];
  return s / static_cast<double>(k);
}

}  // namespace scaleinv
