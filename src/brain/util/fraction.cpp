#include "brain/util/fraction.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace scaleinv {

bool parse_fraction(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const auto slash = s.find('/');
  if (slash == std::string::npos) {
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !std::isfinite(v)) return false;
    *out = v;
    return true;
  }
  std::string num = s.substr(0, slash), den = s.substr(slash + 1);
  double p = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0') return false;
  double q = std::strtod(den.c_str(), &end);
  if (den.empty() || *end != '\0' || q == 0 || !std::isfinite(p / q)) return false;
  *out = p / q;
  return true;
}

std::string format_fraction(double x) {
  if (!std::isfinite(x)) return x > 0 ? "inf" : (x < 0 ? "-inf" : "nan");
  if (std::fabs(x) > 1e12) return fmt::format("{:.3g}", x);  // beyond what lround below may take
  for (int q = 1; q <= 12; ++q) {
    const double p = x * q;
    if (std::fabs(p - std::round(p)) < 1e-9) {
      const long pi = std::lround(p);
      if (pi == 0) return "0";
      return q == 1 ? fmt::format("{}", pi) : fmt::format("{}/{}", pi, q);
    }
  }
  return fmt::format("{:.3g}", x);
}

}  // namespace scaleinv
