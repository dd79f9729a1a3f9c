#pragma once
// Tensor helpers the optimizer tests share.
#include <algorithm>

#include <torch/torch.h>

namespace scaleinv::testing {

// A copy of t that is a leaf requiring its gradient.
inline torch::Tensor leaf(const torch::Tensor& t) { return t.clone().detach().requires_grad_(true); }

// max |a - b| over max |b|.
inline double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

}  // namespace scaleinv::testing
