#pragma once
// Weights packed side by side in one buffer, and one matmul over them (the attention's q, k, v).
//
// Attention computes q, k and v from one input with one GEMM against [W_q; W_k; W_v] (layers.h).
// With three separate parameters that stacked weight is a copy made every step (a cat of three
// [d, d] matrices, and the same again for its gradient's traffic); a fused-QKV Linear, as PyTorch
// models write it, holds one [3d, d] parameter instead. pack_rows keeps the three parameters (their
// names, roles, optimizer groups and checkpoints unchanged) but moves their data into one buffer,
// row blocks one after the other, so that linear_packed can read the stack as one tensor in place.
//
// Packing changes where the values live, never what they are: a forward through linear_packed
// equals linear(x, cat(ws)) up to the GEMM's rounding (the same GEMM shape), and its gradients
// are views of one [sum rows, in] product. Anything that later gives a parameter storage of its
// own (Module::to to another device, set_data) ends the packing; rows_adjacent then says false and
// callers fall back to the cat.
#include <torch/torch.h>

#include <vector>

namespace scaleinv {

// True when every tensor is 2-D, contiguous, with the same column count, dtype and device, and
// ws[i + 1] starts in the same storage right where ws[i] ends (row blocks of one matrix).
bool rows_adjacent(const std::vector<torch::Tensor>& ws);

// Moves the values of `ws` (2-D parameters with equal column counts, dtype and device) into one
// new [sum rows, cols] buffer, in order, and points each parameter at its row block (set_data:
// the same tensor objects, so optimizer groups and tags built later, or before, still hold them).
// Returns false and changes nothing when a tensor is not 2-D or the shapes, dtypes or devices
// differ. Call before an optimizer holds per-parameter state of a different layout (state built
// with zeros_like is fine either way).
bool pack_rows(const std::vector<torch::Tensor>& ws);

// x [..., in] times the stacked weight [sum rows, in]^T, read in place: one GEMM forward, one each
// for the input's and the weights' gradients in backward (each weight's gradient a row block of
// the one [sum rows, in] product). Under autocast the input and the stacked weight are cast to
// its dtype once in forward and kept for backward, as autocast's own linear keeps them. Throws
// std::invalid_argument unless rows_adjacent(ws).
torch::Tensor linear_packed(const torch::Tensor& x, const std::vector<torch::Tensor>& ws);

}  // namespace scaleinv
