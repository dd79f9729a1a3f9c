// Shared pieces of the diagnostics: slope fits with seed intervals, option checks, the training
// helpers (src/measure/diagnostics.h, diag_detail.h).
#include "measure/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/errors.h"
#include "measure/diag_detail.h"
#include "models/layers.h"

namespace scaleinv::diag {

// ---- fits ------------------------------------------------------------------------------------

double t975(int dof) {
  static const double kT[] = {0,      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                              2.201,  2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                              2.080,  2.074,  2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return std::numeric_limits<double>::infinity();
  if (dof <= 30) return kT[dof];
  return 1.96;
}

double ols_slope(const std::vector<double>& x, const std::vector<double>& y, double* intercept, double* slope_se) {
  const size_t n = std::min(x.size(), y.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  const double b = sxx > 0 ? sxy / sxx : std::numeric_limits<double>::quiet_NaN();
  const double a = my - b * mx;
  if (intercept) *intercept = a;
  if (slope_se) {
    double ssr = 0;
    for (size_t i = 0; i < n; ++i) ssr += std::pow(y[i] - a - b * x[i], 2);
    *slope_se = n > 2 && sxx > 0 ? std::sqrt(ssr / static_cast<double>(n - 2) / sxx)
                                 : std::numeric_limits<double>::infinity();
  }
  return b;
}

Fit fit_slope(const std::vector<double>& xs, const std::vector<std::vector<double>>& ys, bool log_x, bool log_y) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto tr = [](double v, bool lg) { return lg ? (v > 0 ? std::log(v) : std::numeric_limits<double>::quiet_NaN()) : v; };
  std::vector<double> x;
  for (double v : xs) x.push_back(tr(v, log_x));
  Fit f;
  double single_se = nan;
  for (const auto& row : ys) {
    std::vector<double> y;
    bool ok = row.size() == xs.size();
    for (double v : row) {
      y.push_back(tr(v, log_y));
      ok = ok && std::isfinite(y.back());
    }
    f.per_seed.push_back(ok ? ols_slope(x, y, nullptr, &single_se) : nan);
  }
  const size_t S = f.per_seed.size();
  if (S == 1) {
    f.slope = f.per_seed[0];
    f.se = single_se;
    const double h = t975(static_cast<int>(xs.size()) - 2) * f.se;
    f.lo = f.slope - h;
    f.hi = f.slope + h;
    return f;
  }
  Fit m = fit_mean(f.per_seed);
  m.per_seed = f.per_seed;
  return m;
}

Fit fit_mean(const std::vector<double>& v) {
  Fit f;
  f.per_seed = v;
  const size_t S = v.size();
  if (S == 0) return f;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(S);
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  f.slope = mean;
  if (S == 1) {
    f.se = std::numeric_limits<double>::infinity();
    f.lo = -f.se;
    f.hi = f.se;
    return f;
  }
  f.se = std::sqrt(ss / static_cast<double>(S - 1) / static_cast<double>(S));
  const double h = t975(static_cast<int>(S) - 1) * f.se;
  f.lo = mean - h;
  f.hi = mean + h;
  return f;
}

namespace {
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

nlohmann::json fit_json(const Fit& f) {
  nlohmann::json per = nlohmann::json::array();
  for (double v : f.per_seed) per.push_back(num(v));
  return {{"slope", num(f.slope)}, {"lo", num(f.lo)}, {"hi", num(f.hi)}, {"se", num(f.se)}, {"per_seed", per}};
}

std::string fit_text(const Fit& f, int p) {
  if (!std::isfinite(f.slope)) return "nan";
  if (!std::isfinite(f.lo) || !std::isfinite(f.hi)) return fmt::format("{:.{}f} [one seed]", f.slope, p);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", f.slope, p, f.lo, p, f.hi, p);
}

// ---- helpers -----------------------------------------------------------------------------------

namespace detail {

void require(bool ok, const std::string& option, const std::string& problem, const std::string& fix) {
  if (!ok) throw UserError("command line", option, problem, fix);
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

std::string join(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ", ") + fmt::format("{}", x);
  return s;
}

void require_grid(const std::vector<int>& v, const std::string& option, size_t min_count) {
  for (int x : v)
    require(x > 0, option, fmt::format("{} is not a positive size", x), "give positive integers, e.g. 64,128,256");
  std::set<int> distinct(v.begin(), v.end());
  require(distinct.size() >= min_count, option,
          fmt::format("{} distinct value(s) given ({}), a slope needs at least {}", distinct.size(), join(v), min_count),
          "give a comma-separated list of at least two sizes, e.g. 64,128,256");
}

void require_optimizer(const std::string& kind) {
  bool known = true;
  try {
    optimizer_family(kind);
  } catch (const UserError&) {
    known = false;
  }
  require(known, "--optimizer", fmt::format("unknown optimizer '{}'", kind), std::string("use one of ") + optimizer_kinds());
}

void require_activation(const std::string& name) {
  require(name == "linear" || name == "relu" || name == "abs" || name == "tanh" || name == "gelu", "--activation",
          fmt::format("unknown activation '{}'", name), "use one of linear, relu, abs, tanh, gelu");
}

ParamTable load_diag_param(const std::string& name) {
  if (name == "ode") {
    ParamTable t = preset("depth-mup");
    t.name = "ode";
    t.source = "depth-mup with (alpha, gamma) = (1, 0): the ODE limit of seed 004 Claim 5.4";
    t.branch = 1.0;
    for (Role r : {Role::Hidden, Role::Vector, Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO}) {
      // Adam / Adafactor: gamma = 0; SGD's true LR is eta L^(alpha - gamma) = eta L (depth_gamma adds alpha).
      t.row(r).depth_lr = {-1.0, 0.0, 0.0};
      t.row(r).depth_eps = 1.0;  // W_l's gradients shrink like L^-alpha = L^-1 (seed 004 4.1)
    }
    return t;
  }
  return load_param(name);
}

double rms(const torch::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0.0;
  return std::sqrt(t.detach().to(torch::kDouble).pow(2).mean().item<double>());
}

std::unique_ptr<Optimizer> make_diag_optimizer(Model& model, const std::string& kind, double lr, double beta1,
                                               bool train_io) {
  std::vector<TaggedParam> params = model.tagged_parameters();
  if (!train_io) {
    std::vector<TaggedParam> kept;
    for (auto& p : params) {
      if (p.tag.in_block) kept.push_back(p);
      else p.tensor.set_requires_grad(false);
    }
    params = std::move(kept);
  }
  OptimConfig oc;
  oc.kind = kind;
  oc.lr = lr;
  oc.beta1 = beta1;
  oc.momentum = 0.0;
  oc.eps = kind == "adafactor" ? 1e-15 : 1e-8;
  oc.weight_decay = 0.0;
  oc.schedule = "constant";
  return make_optimizer(oc, param_groups(params, model.context()));
}

double train_step(Model& model, Optimizer& opt, const Batch& b) {
  torch::Tensor loss = model.loss(b.x, b.y);
  loss.backward();
  opt.step();
  opt.zero_grad();
  return loss.item<double>();
}

Batch gaussian_batch(uint64_t seed, uint64_t teacher_seed, int64_t batch, int64_t in_dim, int64_t n_classes) {
  torch::NoGradGuard ng;
  auto g = at::detail::createCPUGenerator(seed);
  auto gt = at::detail::createCPUGenerator(teacher_seed);
  Batch b;
  b.x = at::randn({batch, in_dim}, g, torch::kFloat);
  torch::Tensor teacher = at::randn({in_dim, n_classes}, gt, torch::kFloat);
  b.y = b.x.matmul(teacher).argmax(1).to(torch::kLong);
  return b;
}

double var_phi(const std::string& activation, double s2) {
  constexpr double kPi = 3.14159265358979323846;
  if (activation == "linear") return s2;
  if (activation == "relu") return s2 * (0.5 - 1.0 / (2.0 * kPi));
  if (activation == "abs") return s2 * (1.0 - 2.0 / kPi);
  // Probabilists' Gauss-Hermite by a fine midpoint rule on [-10, 10] sd: plenty for smooth phi.
  const double s = std::sqrt(s2);
  const int n = 4000;
  const double lo = -10, hi = 10, h = (hi - lo) / n;
  double m1 = 0, m2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = lo + (i + 0.5) * h;
    const double w = std::exp(-0.5 * z * z) / std::sqrt(2 * kPi) * h;
    const double x = s * z;
    double y = 0;
    if (activation == "tanh") y = std::tanh(x);
    else y = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));  // gelu (exact)
    m1 += w * y;
    m2 += w * y * y;
  }
  return m2 - m1 * m1;
}

Bar::Bar(bool on, long total, const std::string& label) {
  if (on) p_.emplace(total, label, "run");
}

void Bar::tick(const std::string& status) {
  ++done_;
  if (p_) p_->update(done_, status);
}

void Bar::status(const std::string& status) {
  if (p_) p_->update(done_, status);
}

void Bar::finish() {
  if (p_) p_->finish();
}

}  // namespace detail
}  // namespace scaleinv::diag
