// The root mean square of a tensor's entries: the one RMS every measurement uses (coordinate
// checks, diagnostics, unit-scaling checks, a user model's init report). Throws nothing.
#pragma once

#include <torch/types.h>

namespace scaleinv {

// sqrt(mean of v^2) over every entry, as ||v||_2 / sqrt(numel): the reduction runs in the
// tensor's own floating type (float accumulates in float, pairwise, no double copy of a large
// tensor; integer and half types are widened to float first). NaN for an undefined or empty tensor.
double tensor_rms(const torch::Tensor& t);

}  // namespace scaleinv
