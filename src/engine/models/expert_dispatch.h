#pragma once
// The experts' SwiGLU over the (token, expert) pairs of a mixture (engine/models/moe.cpp), with the pairs
// already sorted by expert: row p of xs belongs to expert e(p), the rows of expert j being the
// counts[j] rows after those of the experts before it. Both functions return, row for row,
//
//   y_p = m W_down,e(p) (silu(m W_gate,e(p) x_p) * (m W_up,e(p) x_p))          [N k, d]
//
// (m the expert row's forward multiplier) and differ only in how the work is launched:
//   experts_looped   one matmul per expert and matrix on its slice of xs: 3 E launches forward, and
//                    experts with no tokens cost nothing (the CPU path);
//   experts_padded   the slices copied into one [E, C, d] buffer zero-padded to C = max_j counts[j],
//                    then three batched matmuls (the CUDA path: 3 launches whatever E is; the padding
//                    rows are zero, so they add nothing to y or to any gradient, at the cost of
//                    E C - N k rows of idle arithmetic).
// The two agree to rounding (test_moe.cpp, ExpertDispatch.*). Throws what the tensors throw.
#include <cstdint>

#include "engine/runtime/torch_compat.h"

namespace scaleinv {

struct ExpertWeights {
  torch::Tensor gate, up;  // [E, n, d]
  torch::Tensor down;      // [E, d, n]
  double mult = 1;         // the expert row's forward multiplier m
};

// counts_host: [E] int64 on the CPU (the assignment counts, already read back).
torch::Tensor experts_looped(const torch::Tensor& xs, const torch::Tensor& counts_host, const ExpertWeights& w);

// expert_of: [N k] int64, e(p) for each sorted row, on xs's device; counts: [E] int64 on xs's device;
// capacity: max_j counts[j] (read from the host copy).
torch::Tensor experts_padded(const torch::Tensor& xs, const torch::Tensor& expert_of, const torch::Tensor& counts,
                             int64_t capacity, const ExpertWeights& w);

}  // namespace scaleinv
