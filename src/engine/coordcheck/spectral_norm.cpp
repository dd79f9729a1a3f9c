// The spectral norm of coordcheck.h (||W||, ||dW|| of the coordinate check; ref. [spectral]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "engine/coordcheck/coordcheck.h"
#include "brain/util/nonfinite.h"

namespace scaleinv {

namespace {

// Elements of one block of rows in the fused m^T (m x): 2 MiB of float32, read from memory once
// for s = m_b x and again from the cache for acc += m_b^T s.
constexpr int64_t kGramBlock = int64_t{1} << 19;

// G x = m^T (m x) for each matrix of m [B, r, c] (rows with unit stride) still active, [B, c] (zero
// for a stopped one, which is not read): one pass over each matrix, block of rows by block of rows,
// s = m_b x, then m_b^T s added while m_b is still in the cache (the two plain mv's read a matrix
// larger than the cache twice, and that read is their whole cost; the check's width-8192 matrices
// are 256 MiB). Both products are libtorch's BLAS mv (MKL in pip's libtorch: coordcheck --model mlp
// at widths 4096, 8192, 2 seeds took 12.8 s with it against 17.7 s with a hand-written AVX2
// one-pass kernel).
torch::Tensor gram_blocks(const torch::Tensor& m, const torch::Tensor& x, const std::vector<char>& active) {
  const int64_t B = m.size(0), rows = m.size(1), cols = m.size(2);
  const torch::Tensor xc = x.contiguous();
  torch::Tensor out = torch::zeros({B, cols}, m.options());
  const int64_t rb = std::max<int64_t>(1, kGramBlock / cols);
  torch::Tensor sb = torch::empty({std::min(rb, rows)}, m.options());
  for (int64_t b = 0; b < B; ++b) {
    if (!active[static_cast<size_t>(b)]) continue;
    const torch::Tensor mb = m[b], xb = xc[b];
    torch::Tensor acc = out[b];
    for (int64_t i = 0; i < rows; i += rb) {
      const torch::Tensor blk = mb.narrow(0, i, std::min(rb, rows - i));
      torch::Tensor s = sb.narrow(0, 0, blk.size(0));
      at::mv_out(s, blk, xb);
      acc.addmv_(blk.t(), s);
    }
  }
  return out;
}

// The largest eigenvalue of each matrix's j x j Lanczos tridiagonal (alpha on the diagonal, beta
// beside it), in double on the CPU: [B].
torch::Tensor largest_ritz(const std::vector<torch::Tensor>& alpha, const std::vector<torch::Tensor>& beta) {
  torch::Tensor t = torch::diag_embed(torch::stack(alpha, 1));
  if (!beta.empty()) {
    const torch::Tensor be = torch::stack(beta, 1);
    t = t + torch::diag_embed(be, 1) + torch::diag_embed(be, -1);
  }
  return torch::linalg_eigvalsh(torch::nan_to_num(t)).select(1, static_cast<int64_t>(alpha.size()) - 1).contiguous();
}
}  // namespace

// How many steps: the estimate theta_k = sqrt(lambda_max(T_k)) rises to sigma, and each matrix
// stops at the first k >= 2 with k (theta_k - theta_{k-1}) / 2 <= rel_tol theta_k (or at max_steps).
// Why k/2 times the last rise: where the top of the spectrum has no gap (an iid matrix: its
// eigenvalues crowd at the Marchenko-Pastur edge, the slow case), Lanczos's error falls as C / k^2
// (ref. [lanczos-kw]: the expected relative error from a random start is within 2.575 (ln n)^2 /
// (k - 1)^2 whatever the spectrum), so the last rise is about 2C / k^3 and the error still left
// is k/2 times it; where there is a gap (a trained matrix's spike, an update's few directions)
// the error falls geometrically and is below the last rise. Measured at tol 1e-3 (float64 truth):
// iid 128^2..8192^2 and 8192 x 784 stop after 11-32 steps, 0.5e-4 to 4e-4 low (a fixed 16 steps
// left 0.2-0.35% at 4096-8192); the muP MLP's trained weights and Adam updates after 3-7 steps,
// under 2e-5 low. A relative error e moves a width slope by at most e / ln(d_max / d_min).
// A fixed, generic start cos(0.7 i + 0.3): no generator involved. Each step reads the B alphas and
// betas back (one small copy: a GPU stack of E experts still takes one batched pass a step). Where
// a matrix's recursion ends early (an invariant subspace: beta ~ 0 relative to T, e.g. rank < k, or
// a zero matrix), T's largest eigenvalue is exact (to rounding) and the matrix stops there.
torch::Tensor spectral_norms(const torch::Tensor& stack, int max_steps, double rel_tol, std::vector<int>* steps_taken) {
  if (!stack.defined() || stack.dim() != 3) return torch::full({stack.defined() && stack.dim() > 0 ? stack.size(0) : 0}, kNaN, torch::kDouble);
  const torch::Tensor m = stack.detach();
  const int64_t B = m.size(0), rows = m.size(1), cols = m.size(2);
  if (B == 0 || rows == 0 || cols == 0) return torch::full({B}, kNaN, torch::kDouble);
  // The largest singular value of m is the square root of the largest eigenvalue of G = m^T m, found
  // by symmetric Lanczos on G with full reorthogonalisation (Golub and Van Loan, Matrix Computations,
  // 4th ed., sec. 10.1), run on all B matrices at once. This is the Golub-Kahan-Lanczos
  // bidiagonalisation m V = U B_k of the same start vector (sec. 10.4) in another form: GKL's V_k and
  // Lanczos's Q_k span the same Krylov space K_k(m^T m, v), and B_k^T B_k is Lanczos's tridiagonal
  // T_k (sec. 10.4.1), so sqrt(lambda_max(T_k)) = sigma_max(B_k): the same estimate, up to rounding.
  // What changes is the memory traffic. GKL takes the two products m v and m^T u a step (2k - 1
  // passes over m); Lanczos takes one product G q a step, and on the CPU `gram` below forms m^T (m q)
  // block of rows by block, each read from memory once: k passes. The check's large matrices are
  // memory-bound.
  // G is cols x cols of rank <= min(rows, cols); a start vector with a part in G's null space needs
  // rank + 1 steps to reach the top eigenvector (a [1, d] gate's norm after 1 step is only |m q|).
  const int k = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(max_steps, 1)), rows + 1, cols}));
  // m [B, r, c] times x [B, c]. One matrix goes through mv: on the CPU, bmm with one column measured
  // 3-4x slower than mv on an 8192^2 matrix (OpenBLAS, one thread).
  auto bmv = [](const torch::Tensor& a, const torch::Tensor& x) {
    return a.size(0) == 1 ? torch::mv(a[0], x[0]).unsqueeze(0) : torch::bmm(a, x.unsqueeze(-1)).squeeze(-1);
  };
  // Which matrices still step (a matrix that stopped is not read again on the CPU's fused path).
  std::vector<char> active(static_cast<size_t>(B), 1);
  // G x = m^T (m x), [B, c]: fused (gram_blocks) on the CPU for rows with unit stride, else the two
  // batched products (on a GPU its bandwidth makes the second pass cheap).
  const bool fused = m.device().is_cpu() && m.stride(2) == 1;
  auto gram = [&](const torch::Tensor& x) { return fused ? gram_blocks(m, x, active) : bmv(m.transpose(1, 2), bmv(m, x)); };
  // x minus its projection on the first j basis vectors, twice (classical Gram-Schmidt, repeated:
  // as accurate as the modified form, in two batched products per pass).
  auto orthogonalise = [&bmv](torch::Tensor x, const torch::Tensor& basis, int64_t j) {
    if (j == 0) return x;
    const torch::Tensor q = basis.narrow(1, 0, j);  // [B, j, n]
    for (int pass = 0; pass < 2; ++pass) x = x - bmv(q.transpose(1, 2), bmv(q, x));
    return x;
  };
  torch::Tensor Q = torch::zeros({B, k, cols}, m.options());
  torch::Tensor q = torch::cos(torch::arange(cols, m.options()) * 0.7 + 0.3);
  q = (q / q.norm()).expand({B, cols});
  std::vector<torch::Tensor> alpha, beta;  // [B] each, double on the CPU
  std::vector<double> result(static_cast<size_t>(B), kNaN), prev(static_cast<size_t>(B), 0.0);
  std::vector<int> taken(static_cast<size_t>(B), 0);
  torch::Tensor beta_dev;  // the last beta, on m's device
  torch::Tensor q_prev = torch::zeros({B, cols}, m.options());
  torch::Tensor scale = torch::zeros({B}, m.options());
  const double tol = m.scalar_type() == torch::kDouble ? 1e-12 : 1e-5;
  for (int j = 0; j < k; ++j) {
    Q.select(1, j).copy_(q);
    torch::Tensor r = gram(q);
    const torch::Tensor a = (r * q).sum(1);
    alpha.push_back(a.to(torch::kCPU, torch::kDouble));
    const torch::Tensor lambda = largest_ritz(alpha, beta);
    const double* al = alpha.back().data_ptr<double>();
    const double* la = lambda.data_ptr<double>();
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (!active[static_cast<size_t>(b)]) continue;
      taken[static_cast<size_t>(b)] = j + 1;
      const bool finite = std::isfinite(al[b]) && (beta.empty() || std::isfinite(beta.back().data_ptr<double>()[b]));
      const double theta = std::sqrt(std::max(la[b], 0.0));
      const bool settled = j >= 1 && (j + 1) * (theta - prev[static_cast<size_t>(b)]) / 2 <= rel_tol * theta;
      prev[static_cast<size_t>(b)] = theta;
      if (!finite || settled || j + 1 == k) {
        result[static_cast<size_t>(b)] = finite ? theta : kNaN;
        active[static_cast<size_t>(b)] = 0;
      }
      any = any || active[static_cast<size_t>(b)];
    }
    if (!any) break;
    r = r - a.unsqueeze(-1) * q;
    if (j > 0) r = r - beta_dev.unsqueeze(-1) * q_prev;
    r = orthogonalise(r, Q, j + 1);
    const torch::Tensor bn = r.norm(2, {1});
    // An invariant subspace (rank < k, a zero matrix): bn is rounding noise there, not 0, and a vector
    // normalised from noise keeps components along Q of (noise / bn), which G then amplifies step
    // by step (measured: a rank-3 matrix's estimate 45% high). So a matrix ends its recursion where
    // bn <= tol * s, s the largest |alpha| + beta so far (~||T||): T's largest eigenvalue is then
    // within bn of G's (Golub and Van Loan, sec. 10.1.4), sigma within tol / 2 relative, and a bn
    // above that keeps noise / bn at ~ eps / tol, which the second Gram-Schmidt pass removes.
    scale = torch::maximum(scale, a.abs() + bn);
    const torch::Tensor ok = bn > scale * tol;
    beta_dev = torch::where(ok | ~torch::isfinite(bn), bn, torch::zeros_like(bn));
    beta.push_back(beta_dev.to(torch::kCPU, torch::kDouble));
    // A matrix whose recursion ended has its estimate exact now: it stops (not read again).
    const torch::Tensor ended = (~ok & torch::isfinite(bn)).to(torch::kCPU);
    for (int64_t b = 0; b < B; ++b)
      if (active[static_cast<size_t>(b)] && ended[b].item<bool>()) {
        result[static_cast<size_t>(b)] = prev[static_cast<size_t>(b)];
        active[static_cast<size_t>(b)] = 0;
      }
    q_prev = q;
    q = torch::where(ok.unsqueeze(-1), r / torch::where(ok, bn, torch::ones_like(bn)).unsqueeze(-1), torch::zeros_like(r));
  }
  if (steps_taken) *steps_taken = taken;
  return torch::tensor(result, torch::kDouble);
}

double spectral_norm(const torch::Tensor& w, int max_steps, double rel_tol) {
  if (!w.defined() || w.dim() < 2 || w.numel() == 0) return kNaN;
  return spectral_norms(w.reshape({1, w.size(0), -1}), max_steps, rel_tol)[0].item<double>();
}

}  // namespace scaleinv
