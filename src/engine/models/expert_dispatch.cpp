// The experts' SwiGLU over sorted (token, expert) pairs, looped or padded (engine/models/expert_dispatch.h).
#include "engine/models/expert_dispatch.h"

#include <vector>

namespace scaleinv {

torch::Tensor experts_looped(const torch::Tensor& xs, const torch::Tensor& counts_host, const ExpertWeights& w) {
  const int64_t* c = counts_host.data_ptr<int64_t>();
  const int64_t E = counts_host.size(0);
  // unbind, not gate[j]: select's backward writes each expert's gradient into a zero tensor of the
  // whole stack, E of them a step (E^2 n d work); unbind's stacks the E slices once.
  const std::vector<torch::Tensor> gate = w.gate.unbind(0), up = w.up.unbind(0), down = w.down.unbind(0);
  std::vector<torch::Tensor> ys;
  int64_t off = 0;
  for (int64_t j = 0; j < E; ++j) {
    if (c[j] == 0) continue;
    const torch::Tensor s = xs.narrow(0, off, c[j]);
    const torch::Tensor h = torch::silu(torch::matmul(s, gate[j].t()) * w.mult) * (torch::matmul(s, up[j].t()) * w.mult);
    ys.push_back(torch::matmul(h, down[j].t()) * w.mult);
    off += c[j];
  }
  return torch::cat(ys);
}

torch::Tensor experts_padded(const torch::Tensor& xs, const torch::Tensor& expert_of, const torch::Tensor& counts,
                             int64_t capacity, const ExpertWeights& w) {
  const int64_t E = w.gate.size(0), d = xs.size(1);
  // Row p goes to slot p - start(e(p)) of expert e(p): start is the exclusive running sum of counts.
  const torch::Tensor start = counts.cumsum(0) - counts;
  const torch::Tensor rank = torch::arange(xs.size(0), expert_of.options()) - start.index_select(0, expert_of);
  const torch::Tensor dest = expert_of * capacity + rank;
  const torch::Tensor xp = torch::zeros({E * capacity, d}, xs.options()).index_copy(0, dest, xs).view({E, capacity, d});
  const torch::Tensor h = torch::silu(torch::bmm(xp, w.gate.transpose(1, 2)) * w.mult) *
                          (torch::bmm(xp, w.up.transpose(1, 2)) * w.mult);           // [E, C, n]
  const torch::Tensor y = torch::bmm(h, w.down.transpose(1, 2)) * w.mult;           // [E, C, d]
  return y.reshape({E * capacity, d}).index_select(0, dest);
}

}  // namespace scaleinv
