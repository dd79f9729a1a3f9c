#pragma once
// The coordinate check of the zoo's models (docs/design.md "Data flow of a coordinate check"; issue
// 5): the driver that builds and trains every (width, depth, seed) and the spectral norm it measures.
// What is measured and how it is judged is brain/coordcheck/coord_result.h (torch-free).
#include <torch/torch.h>

#include <vector>

#include "engine/data/data.h"
#include "brain/coordcheck/coord_result.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"

namespace scaleinv {

// The spectral norm (largest singular value) of a matrix [rows, cols] (trailing dims flattened) by
// Lanczos on m^T m (one pass over m a step, fully reorthogonalised) from a fixed start vector (no
// random draw: the caller's generator is untouched), in the tensor's dtype and device, stopped where
// its own convergence says it is within rel_tol (spectral_norm.cpp says why the rule holds), at most
// max_steps steps. A lower bound: measured within 4e-4 on iid matrices up to 8192^2 (the slow case:
// 11-32 steps), within 2e-5 on trained weights and Adam updates (3-7 steps); exact for a matrix of
// rank < the steps taken. NaN for a non-finite matrix.
double spectral_norm(const torch::Tensor& w, int max_steps = 32, double rel_tol = 1e-3);
// The same for each matrix of a stack [B, rows, cols] (an expert stack), all B at once, each stopping
// on its own: [B] double on the CPU; steps_taken, when given, gets each matrix's step count (each a
// pass over it). spectral_norm is this with B = 1.
torch::Tensor spectral_norms(const torch::Tensor& stack, int max_steps = 32, double rel_tol = 1e-3,
                             std::vector<int>* steps_taken = nullptr);

// Validates the configuration (UserError, exit 2: no widths, a width or depth < 1, a width that
// does not split into heads, fewer than 2 widths and 2 depths, unknown model/param/optimizer,
// steps < 1, no seeds, unknown break mode), runs the grid and judges every row.
CoordCheckResult run_coordcheck(const CoordCheckConfig& cfg);

}  // namespace scaleinv
