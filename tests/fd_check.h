#pragma once
// Finite-difference gradient checks for tests (double precision).
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace scaleinv::testing {

struct FdResult {
  bool ok = true;
  double worst_rel = 0;   // largest |fd - g| / (rtol-scale) seen
  std::string message;    // the first failure
};

// Compares d f / d t (autograd) with central differences on a few entries of t: the entry with the
// largest |gradient| and `n_random` entries chosen by a fixed local generator. f must return a
// scalar and must read t (a double tensor with requires_grad, e.g. a parameter or an input leaf).
// Passes when |fd - g| <= rtol * max(|fd|, |g|) + atol for every entry checked.
inline FdResult fd_check(const std::function<torch::Tensor()>& f, const torch::Tensor& t, int n_random = 4,
                         double h = 1e-5, double rtol = 1e-6, double atol = 1e-9) {
  FdResult res;
  torch::Tensor g;
  {
    torch::Tensor y = f();
    g = torch::autograd::grad({y}, {t}, /*grad_outputs=*/{}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true)[0];
  }
  if (!g.defined()) g = torch::zeros_like(t);
  g = g.reshape({-1});
  const int64_t n = t.numel();
  std::vector<int64_t> idx{g.abs().argmax().item<int64_t>()};
  uint64_t state = 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n_random && n > 1; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    idx.push_back(static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n)));
  }
  torch::NoGradGuard no_grad;
  torch::Tensor flat = t.detach().view({-1});  // shares storage with t
  for (int64_t i : idx) {
    const double orig = flat[i].item<double>();
    flat[i] = orig + h;
    const double fp = f().item<double>();
    flat[i] = orig - h;
    const double fm = f().item<double>();
    flat[i] = orig;
    const double fd = (fp - fm) / (2 * h);
    const double an = g[i].item<double>();
    const double tol = rtol * std::max(std::abs(fd), std::abs(an)) + atol;
    const double err = std::abs(fd - an);
    res.worst_rel = std::max(res.worst_rel, err / tol);
    if (err > tol && res.ok) {
      res.ok = false;
      res.message = fmt::format("entry {}: autograd {:.12g}, finite difference {:.12g} (|diff| {:.3g} > tol {:.3g})", i,
                                an, fd, err, tol);
    }
  }
  return res;
}

}  // namespace scaleinv::testing
