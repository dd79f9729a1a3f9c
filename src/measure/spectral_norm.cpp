// The spectral norm of coordcheck.h (||W||, ||dW|| of the coordinate check; ref. [spectral]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "measure/coordcheck.h"

namespace scaleinv {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

torch::Tensor spectral_norms(const torch::Tensor& stack, int steps) {
  if (!stack.defined() || stack.dim() != 3) return torch::full({stack.defined() && stack.dim() > 0 ? stack.size(0) : 0}, kNaN, torch::kDouble);
  const torch::Tensor m = stack.detach();
  const int64_t B = m.size(0), rows = m.size(1), cols = m.size(2);
  if (B == 0 || rows == 0 || cols == 0) return torch::full({B}, kNaN, torch::kDouble);
  // Golub-Kahan-Lanczos bidiagonalisation m V = U B with full reorthogonalisation (Golub and Van
  // Loan, Matrix Computations, sec. 10.4), run on all B matrices at once: after k steps the largest
  // singular value of the k x k upper-bidiagonal B bounds sigma_max(m) from below and converges far
  // faster than power iteration on m^T m for the same 2k products (16 steps: within 0.1% on a
  // 1024^2 iid matrix, where 30 power iterations are 0.8% low). A fixed, generic start
  // cos(0.7 i + 0.3): no generator involved. Nothing is read back inside the loop (one read of B at
  // the end, so a stack of E experts on a GPU costs 2k batched products, not E k host reads). Where
  // a matrix's recursion ends early (rank < k: a zero alpha, or a beta ~ 0, an invariant subspace),
  // its later vectors and coefficients are zero, which leaves B's largest singular value exact.
  const int k = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(steps), rows, cols}));
  // a [B, r, c] times x [B, c]. One matrix goes through mv: on the CPU, bmm with one column measured
  // 3-4x slower than mv on an 8192^2 matrix (OpenBLAS, one thread), and the check's largest matrices
  // are single ones.
  auto bmv = [](const torch::Tensor& a, const torch::Tensor& x) {
    return a.size(0) == 1 ? torch::mv(a[0], x[0]).unsqueeze(0) : torch::bmm(a, x.unsqueeze(-1)).squeeze(-1);
  };
  // x minus its projection on the first j basis vectors, twice (classical Gram-Schmidt, repeated:
  // as accurate as the modified form, in two batched products per pass).
  auto orthogonalise = [&bmv](torch::Tensor x, const torch::Tensor& basis, int64_t j) {
    if (j == 0) return x;
    const torch::Tensor q = basis.narrow(1, 0, j);  // [B, j, n]
    for (int pass = 0; pass < 2; ++pass) x = x - bmv(q.transpose(1, 2), bmv(q, x));
    return x;
  };
  // (a / b where b > floor, else 0)
  auto divide = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& ok) {
    return torch::where(ok.unsqueeze(-1), a / torch::where(ok, b, torch::ones_like(b)).unsqueeze(-1), torch::zeros_like(a));
  };
  torch::Tensor U = torch::zeros({B, k, rows}, m.options()), V = torch::zeros({B, k, cols}, m.options());
  torch::Tensor v = torch::cos(torch::arange(cols, m.options()) * 0.7 + 0.3);
  v = (v / v.norm()).expand({B, cols});
  std::vector<torch::Tensor> alpha, beta;
  torch::Tensor finite_b = torch::ones({B}, m.options().dtype(torch::kBool));  // every raw beta finite
  torch::Tensor u = bmv(m, v);
  for (int j = 0; j < k; ++j) {
    V.select(1, j).copy_(v);
    u = orthogonalise(u, U, j);
    const torch::Tensor a = u.norm(2, {1});
    alpha.push_back(a);
    u = divide(u, a, a > 0);
    U.select(1, j).copy_(u);
    if (j + 1 == k) break;
    const torch::Tensor r = orthogonalise(bmv(m.transpose(1, 2), u), V, j + 1);
    const torch::Tensor b = r.norm(2, {1});
    const torch::Tensor ok = b > a * 1e-30;
    finite_b = finite_b & torch::isfinite(b);
    beta.push_back(torch::where(ok, b, torch::zeros_like(b)));
    v = divide(r, b, ok);
    u = bmv(m, v) - beta.back().unsqueeze(-1) * u;
  }
  // The k x k bidiagonal of each matrix, in double on the CPU: one read back.
  const torch::Tensor al = torch::stack(alpha, 1).to(torch::kCPU, torch::kDouble);
  torch::Tensor bd = torch::diag_embed(al), finite = torch::isfinite(al).all(1) & finite_b.cpu();
  if (!beta.empty()) {
    const torch::Tensor be = torch::stack(beta, 1).to(torch::kCPU, torch::kDouble);
    bd = bd + torch::diag_embed(be, 1);
    finite = finite & torch::isfinite(be).all(1);
  }
  return torch::where(finite, torch::linalg_svdvals(torch::nan_to_num(bd)).select(1, 0), torch::full({B}, kNaN, torch::kDouble));
}

double spectral_norm(const torch::Tensor& w, int steps) {
  if (!w.defined() || w.dim() < 2 || w.numel() == 0) return kNaN;
  return spectral_norms(w.reshape({1, w.size(0), -1}), steps)[0].item<double>();
}

}  // namespace scaleinv
