#pragma once
// Unit-scaled operations (issue 7): every op has a forward scale and separate backward scales, as
// libtorch custom autograd functions, so that at initialisation activations, weights and gradients
// all have RMS ~ 1 (seed 003: "it's easier to just control the scale of our activations than the
// scale of everything else" -- section "Activation Scaling"; its "Proof" section's CLT argument
// gives the 1/sqrt(fan_in) forward scale, and "Next" asks for the gradient to be scaled too).
//
// Why separate backward scales are harmless: a backward scale that differs from the forward scale
// multiplies every gradient upstream of it by a constant. A per-tensor constant factor on a
// gradient does not change the update of a per-tensor scale-invariant optimizer (Adam, sign
// descent; up to epsilon). Where one tensor feeds several ops (a residual split, the q/k/v fan-out
// of attention) the contributions must keep the true gradient's ratio, so the ops there take
// explicit re-weighting factors (residual_rule, scaled_linear's grad_out_weights).
//
// Every op is generic over leading dimensions: x [..., in] with W [out, in], or an ensemble's
// x [E, ..., in] with W [E, out, in] (batched matmul per member).
//
// The plain path (every table without unit scaling) never calls these: the layers use plain torch
// ops there, bit for bit as before.
#include <torch/torch.h>

namespace scaleinv::unit {

// y = fwd * x W^T. Backward: grad_x = bwd_x * (g * grad_out_weights) W, grad_W = bwd_w * g^T x
// (summed over all rows; per member for a 3-d W). grad_out_weights (optional, [out]) re-weights
// the output features' gradients flowing to x only, not to W.
torch::Tensor scaled_linear(const torch::Tensor& x, const torch::Tensor& w, double fwd, double bwd_x, double bwd_w,
                            const torch::Tensor& grad_out_weights = {});
// Unit rule for a linear op with `rows` rows of input: grad-input 1/sqrt(fan_out), grad-weight 1/sqrt(rows).
inline double unit_bwd_x(int64_t fan_out) { return 1.0 / std::sqrt(static_cast<double>(fan_out)); }
inline double unit_bwd_w(int64_t rows) { return 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(rows, 1))); }

// c = fwd * matmul(a, b) with equal batch dimensions. grad_a = bwd_a * g b^T, grad_b = bwd_b * a^T g.
torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double fwd, double bwd_a, double bwd_b);

// Identity forward; the gradient times s.
torch::Tensor scale_grad(const torch::Tensor& x, double s);

// Elementwise nonlinearities with their variance corrections: forward fwd * phi(x), backward
// bwd * phi'(x) g. unit_act_scales gives fwd = 1/RMS(phi(z)) and bwd = 1/RMS(phi'(z)) for
// z ~ N(0, 1) (numerical quadrature; ReLU: sqrt(2) and sqrt(2) exactly).
enum class UnitAct { Relu, Gelu };
struct ActScales {
  double fwd = 1, bwd = 1;
};
ActScales unit_act_scales(UnitAct a);
torch::Tensor scaled_activation(UnitAct a, const torch::Tensor& x, double fwd, double bwd);

// out = a * skip + b * branch; grad_skip = a_bwd g, grad_branch = b_bwd g.
torch::Tensor residual_add(const torch::Tensor& skip, const torch::Tensor& branch, double a, double b, double a_bwd,
                           double b_bwd);

// The tau rule for the l-th residual add (l = 1, 2, ...) of a stream x_0 + beta sum_l f_l whose
// x_0 and branches f_l have unit RMS: the unit-scaled stream x_l / sqrt(1 + l beta^2) is
//   x^_l = sqrt(1 - tau_l) x^_{l-1} + sqrt(tau_l) f_l,   tau_l = beta^2 / (1 + l beta^2),
// the same direction as the plain stream (so a pre-LN model computes the same function).
// Backward (for `unit_backward`): the branch's gradient enters at unit scale; branch_ratio K is
// the ratio of the branch's internal backward scales to its forward ones (product of bwd/fwd along
// it); the split re-weights the branch's contribution to rho = b / (a K) of the skip's, and both are
// normalised by n = 1/sqrt(1 + rho^2) so the stream's gradient stays unit.
struct ResidualRule {
  double tau = 0;
  double a = 1, b = 1;                    // forward: a x + b f
  double skip_bwd = 1, branch_bwd = 1;    // residual_add's backward scales
  double split_bwd = 1;                   // scale_grad on the branch side of the split
};
ResidualRule residual_rule(int l, double beta, double branch_ratio, bool unit_backward);

// Mean cross-entropy of logits [N, V] against targets [N] (the value exactly as
// torch::nn::functional::cross_entropy); backward: the true gradient times bwd.
torch::Tensor scaled_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, double bwd);
// Unit rule: the mean cross-entropy's logit gradient has RMS ~ 1/(N sqrt(V)) at init.
inline double unit_ce_bwd(int64_t n, int64_t v) { return static_cast<double>(n) * std::sqrt(static_cast<double>(v)); }

// Attention at init (logits ~ 0, softmax uniform over the visible keys, unit v and incoming gradient):
// the output averages t+1 (causal) or T values, so its RMS is sqrt(H_T / T) (H_T = sum_{n<=T} 1/n) or
// 1/sqrt(T); attention_avg_correction is the inverse, and makes grad_v unit too (the same sum).
double attention_avg_correction(int64_t T, bool causal);
// Backward scale on the attention scores that makes grad_q and grad_k unit at init, given the
// logit scale, d_head and the average correction c: 1/sqrt(s^2 c^2 d_head A_T),
// A_T = (1/T) sum_{n=1}^{T} (n-1)/n^2 (causal) or (T-1)/T^2.
double attention_score_grad_scale(int64_t T, bool causal, double logit_scale, int64_t d_head, double c);

}  // namespace scaleinv::unit
