#pragma once
// The coordinate check of the zoo's models (docs/design.md "Data flow of a coordinate check"; issue
// 5): the driver that builds and trains every (width, depth, seed) and the spectral norm it measures.
// What is measured and how it is judged is measure/coord_result.h (torch-free).
#include <torch/torch.h>

#include "data/data.h"
#include "measure/coord_result.h"
#include "models/model.h"
#include "optim/optimizer.h"

namespace scaleinv {

// The spectral norm (largest singular value) of a matrix [rows, cols] (trailing dims flattened) by
// `steps` Golub-Kahan-Lanczos steps (2 matrix-vector products each, fully reorthogonalised) from a
// fixed start vector (no random draw: the caller's generator is untouched), in the tensor's dtype
// and device. A lower bound that is within ~0.1% at 16 steps on an iid matrix (whose top singular
// values crowd together, the slow case) and exact for a matrix of rank < steps. NaN for a
// non-finite matrix.
double spectral_norm(const torch::Tensor& w, int steps = 16);
// The same for each matrix of a stack [B, rows, cols] (an expert stack), all B at once: [B] double
// on the CPU. spectral_norm is this with B = 1.
torch::Tensor spectral_norms(const torch::Tensor& stack, int steps = 16);

// Validates the configuration (UserError, exit 2: no widths, a width or depth < 1, a width that
// does not split into heads, fewer than 2 widths and 2 depths, unknown model/param/optimizer,
// steps < 1, no seeds, unknown break mode), runs the grid and judges every row.
CoordCheckResult run_coordcheck(const CoordCheckConfig& cfg);

}  // namespace scaleinv
