// The RMS of a tensor (see tensor_rms.h).
#include "engine/runtime/tensor_rms.h"

#include <cmath>
#include <limits>

namespace scaleinv {

double tensor_rms(const torch::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return std::numeric_limits<double>::quiet_NaN();
  const torch::Tensor d = t.detach();
  const torch::Tensor f = d.scalar_type() == torch::kDouble ? d : d.to(torch::kFloat);
  return f.norm().item<double>() / std::sqrt(static_cast<double>(t.numel()));
}

}  // namespace scaleinv
