// The spectral norm of coordcheck.h (||W||, ||dW|| of the coordinate check; ref. [spectral]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "measure/coordcheck.h"

namespace scaleinv {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// acc += a^T (a x) for the rows of a row-major block a [rows, cols] (row stride ld), in ONE pass
// over a: four rows at a time are read from memory once for their dot products d = a_i . x (eight
// partial sums a row, so the compiler keeps them in vector registers: a float sum in one accumulator
// is a serial chain it may not reorder), and sum_i d_i a_i is added to acc while those rows are still
// in the cache. Two mv's (a x, then a^T of that) read the matrix from memory twice, and on a matrix
// larger than the cache that read is the whole cost (the check's width-8192 matrices are 256 MiB).
template <typename T>
inline void gram_rows(const T* a, int64_t rows, int64_t cols, int64_t ld, const T* x, T* acc) {
  constexpr int R = 4;
  int64_t i = 0;
  for (; i + R <= rows; i += R) {
    const T* r[R];
    for (int q = 0; q < R; ++q) r[q] = a + (i + q) * ld;
    T s[R][8] = {};
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8)
      for (int q = 0; q < R; ++q)
        for (int l = 0; l < 8; ++l) s[q][l] += r[q][j + l] * x[j + l];
    T d[R];
    for (int q = 0; q < R; ++q) {
      d[q] = ((s[q][0] + s[q][1]) + (s[q][2] + s[q][3])) + ((s[q][4] + s[q][5]) + (s[q][6] + s[q][7]));
      for (int64_t jj = j; jj < cols; ++jj) d[q] += r[q][jj] * x[jj];
    }
    for (int64_t c = 0; c < cols; ++c) acc[c] += (d[0] * r[0][c] + d[1] * r[1][c]) + (d[2] * r[2][c] + d[3] * r[3][c]);
  }
  for (; i < rows; ++i) {
    const T* row = a + i * ld;
    T d = 0;
    for (int64_t j = 0; j < cols; ++j) d += row[j] * x[j];
    for (int64_t c = 0; c < cols; ++c) acc[c] += d * row[c];
  }
}

// The same compiled for AVX2 and FMA, taken where the CPU has them (the build targets baseline
// x86-64, SSE2): 10-20% faster on an 8192^2 matrix here.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) void gram_rows_avx2(const float* a, int64_t rows, int64_t cols, int64_t ld,
                                                         const float* x, float* acc) {
  gram_rows<float>(a, rows, cols, ld, x, acc);
}
__attribute__((target("avx2,fma"))) void gram_rows_avx2(const double* a, int64_t rows, int64_t cols, int64_t ld,
                                                         const double* x, double* acc) {
  gram_rows<double>(a, rows, cols, ld, x, acc);
}
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

// out = a^T (a x) for one matrix a [rows, cols]: rows split into one chunk a thread, each summed
// into its own partial (no atomics); the partials are added in a fixed order, so the result does
// not depend on the scheduling.
template <typename T>
void gram_mv(const T* a, int64_t rows, int64_t cols, int64_t ld, const T* x, T* out) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / 64));
  std::vector<T> partial(static_cast<size_t>(threads * cols), T(0));
  at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
      T* acc = partial.data() + t * cols;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
      if (has_avx2()) {
        gram_rows_avx2(a + r0 * ld, r1 - r0, cols, ld, x, acc);
        continue;
      }
#endif
      gram_rows<T>(a + r0 * ld, r1 - r0, cols, ld, x, acc);
    }
  });
  std::copy(partial.begin(), partial.begin() + cols, out);
  for (int64_t t = 1; t < threads; ++t)
    for (int64_t c = 0; c < cols; ++c) out[c] += partial[static_cast<size_t>(t * cols + c)];
}
}  // namespace

namespace {
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
  // passes over m); Lanczos takes one product G q a step, and on the CPU gram_mv forms m^T (m q) in
  // one pass, each row of m read once: k passes. The check's large matrices are memory-bound.
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
  // G x = m^T (m x), [B, c]: fused (one pass over each matrix) on the CPU for float and double rows
  // with unit stride, else the two batched products (on a GPU its bandwidth makes the second pass
  // cheap).
  const bool fused = m.device().is_cpu() && (m.scalar_type() == torch::kFloat || m.scalar_type() == torch::kDouble) &&
                     m.stride(2) == 1;
  auto gram = [&](const torch::Tensor& x) {
    if (!fused) return bmv(m.transpose(1, 2), bmv(m, x));
    const torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::zeros({B, cols}, m.options());
    AT_DISPATCH_FLOATING_TYPES(m.scalar_type(), "gram_mv", [&] {
      const scalar_t* base = m.data_ptr<scalar_t>();
      for (int64_t b = 0; b < B; ++b)
        if (active[static_cast<size_t>(b)])
          gram_mv<scalar_t>(base + b * m.stride(0), rows, cols, m.stride(1), xc.data_ptr<scalar_t>() + b * cols,
                            out.data_ptr<scalar_t>() + b * cols);
    });
    return out;
  };
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
