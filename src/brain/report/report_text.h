#pragma once
// How the report's tables write a hyperparameter and a number (predict, joint_law).
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace scaleinv {

// The hyperparameter a law is fitted for is the LR ("" or "lr"; otherwise a swept key).
inline bool is_lr(const std::string& hparam) { return hparam.empty() || hparam == "lr"; }
// Its name in a table: "LR" for the LR, the key otherwise.
inline std::string hparam_label(const std::string& hparam) { return is_lr(hparam) ? "LR" : hparam; }
// A number in format f ("{:+.2f}": signed, two decimals), "inf" or "n/a" where it is not finite.
inline std::string fmt_num(double v, const char* f = "{:+.2f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : (std::isinf(v) ? "inf" : "n/a");
}

}  // namespace scaleinv
