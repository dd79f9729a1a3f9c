// The experts' SwiGLU over sorted (token, expert) pairs (engine/models/expert_dispatch.h): the padded,
// batched form (the CUDA path) against the looped one (the CPU path, itself held to a per-token
// reference by Moe.DroplessDispatchMatchesThePerTokenSum), outputs and every gradient, with uneven
// counts and an expert given no token. Run on the CPU, so CI without a GPU checks the CUDA path's
// arithmetic.
#include <gtest/gtest.h>

#include <vector>

#include "engine/models/expert_dispatch.h"

using namespace scaleinv;

namespace {

struct Case {
  torch::Tensor xs, expert_of, counts;
  ExpertWeights w;
};

Case make_case(const std::vector<int64_t>& per_expert) {
  torch::manual_seed(3);
  const int64_t E = static_cast<int64_t>(per_expert.size()), d = 6, n = 10;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  Case c;
  c.counts = torch::tensor(per_expert, torch::kInt64);
  c.expert_of = torch::repeat_interleave(torch::arange(E, torch::kInt64), c.counts);
  c.xs = torch::randn({c.expert_of.size(0), d}, f64).requires_grad_(true);
  c.w = {torch::randn({E, n, d}, f64).requires_grad_(true), torch::randn({E, n, d}, f64).requires_grad_(true),
         torch::randn({E, d, n}, f64).requires_grad_(true), 0.7};
  return c;
}

// Output and the gradients of xs, gate, up, down under a fixed random cotangent.
std::vector<torch::Tensor> run(const Case& c, bool padded) {
  for (const auto& t : {c.xs, c.w.gate, c.w.up, c.w.down}) t.mutable_grad() = torch::Tensor();
  const int64_t capacity = c.counts.max().item<int64_t>();
  const torch::Tensor y = padded ? experts_padded(c.xs, c.expert_of, c.counts, capacity, c.w)
                                 : experts_looped(c.xs, c.counts, c.w);
  torch::manual_seed(11);
  (y * torch::randn(y.sizes(), y.options())).sum().backward();
  return {y.detach(), c.xs.grad().clone(), c.w.gate.grad().clone(), c.w.up.grad().clone(), c.w.down.grad().clone()};
}

}  // namespace

TEST(ExpertDispatch, PaddedAgreesWithLoopedInOutputAndGradients) {
  const Case c = make_case({3, 0, 7, 1, 4});
  const std::vector<torch::Tensor> a = run(c, false), b = run(c, true);
  const char* what[] = {"output", "d xs", "d gate", "d up", "d down"};
  ASSERT_EQ(a[0].size(0), 15);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-12, 1e-12)) << what[i] << ": max diff " << (a[i] - b[i]).abs().max().item<double>();
}

TEST(ExpertDispatch, AnExpertWithNoTokenGetsNoGradientFromThePadding) {
  const Case c = make_case({3, 0, 7, 1, 4});
  const std::vector<torch::Tensor> b = run(c, true);
  for (int i = 2; i <= 4; ++i) EXPECT_EQ(b[i][1].abs().max().item<double>(), 0.0);
  EXPECT_GT(b[2][0].abs().max().item<double>(), 0.0);
}
