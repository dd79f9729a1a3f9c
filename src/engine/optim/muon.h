#pragma once
// Muon's two shape-level pieces (ref. [muon]; the optimizer itself is optim.kind = "muon",
// engine/optim/optimizer.h): the Newton-Schulz orthogonalization and the scale of the update.
#include <torch/torch.h>

#include <cstdint>

#include "brain/param/table.h"

namespace scaleinv {

// The quintic Newton-Schulz coefficients of ref. [muon]: X <- a X + (b A + c A^2) X, A = X X^T.
inline constexpr double kNsA = 3.4445, kNsB = -4.7750, kNsC = 2.0315;

// O ~ U V^T for M = U S V^T, per matrix over the last two dimensions of m ([..., rows, cols]; a
// batch of matrices for an ensemble or a mixture's experts): X_0 = M / (||M||_F + eps), `steps` quintic iterations, on the
// transpose when rows > cols (so A is the smaller Gram matrix). The iteration maps every singular
// value above about 1e-3 of ||M||_F into roughly [0.7, 1.2] in 5 steps (it trades exactness for speed,
// as the reference does), leaves the singular vectors and signs unchanged, and is invariant under
// M -> s M for s > 0 up to eps. Computed in `compute` (bf16 on CUDA as the reference, fp32 or fp64
// on the CPU); returned in m's dtype and shape.
torch::Tensor newton_schulz(const torch::Tensor& m, int64_t steps, double eps, c10::ScalarType compute);

// The factor on O for a fan_out x fan_in matrix: Spectral max(1, fan_out/fan_in)^(1/2), Rms
// 0.2 * sqrt(max(fan_in, fan_out)) (brain/param/table.h MuonScale).
double muon_scale_factor(MuonScale rule, int64_t fan_out, int64_t fan_in);

}  // namespace scaleinv
