#pragma once
// The one quiet NaN every file means by "not measured" or "no value" (a diverged run's loss, a fit
// without enough points, a quantity not recorded; JSON writes it as null, json_number.h), and the
// one infinity (a diverged seed's loss at an LR, an unbounded interval).
#include <limits>

namespace scaleinv {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace scaleinv
