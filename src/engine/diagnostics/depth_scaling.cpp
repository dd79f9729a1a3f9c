// Depth scaling of the residual MLP (seed 000 eqs. 29-31; seed 004 Claims 5.1-5.5, H.2;
// src/engine/diagnostics/diagnostics.h).
//
// For each depth L and seed, on one fixed batch: the top activation x_L at init, the sum of the
// branches x_L - x_0 (seed 000 eq. 29 starts from h_0 = 0, so this is its h_{L+1}), and the
// change of x_L after one optimizer step; log-log slopes in L with intervals over seeds.
//
// Predictions.
//  * depth_theory: branch sum ~ L^(1/2 - alpha) (mean-zero branches, rho = 1/2: mean subtraction
//    makes E f_l = 0 exactly); one-step update ~ L^(1 - alpha - gamma) with correlated layer
//    gradients, L^(1/2 - alpha - gamma) without.
//  * at these depths, the wide-limit recursion of the second moment (docs/design.md "Depth theory
//    as implemented"):
//    q_l = q_{l-1} + beta^2 Var phi(z), z ~ N(0, w2 q_in), q_in = 1 under pre-LN (f_l(LN x) = Theta(1),
//    seed 000 eq. 29's assumption) and q_{l-1} without it; beta = a k^-branch, w2 = (mult std)^2 n.
//    Its slopes over the same depths are the finite-depth predictions (with pre-LN the branch sum's
//    equals the asymptotic one exactly).
//
// Tolerance on the init slopes (derived, the same for every table): the seed interval
// t_{S-1} se, plus the finite-width scatter a single seed cannot show: a mean square over n
// coordinates fluctuates by about sqrt(2/n) relative, moving log RMS at either end of the depth range
// by sqrt(2/n)/2 each, so the slope by at most sqrt(2/n) / ln(L_max / L_min).
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "engine/runtime/tensor_rms.h"
#include "brain/util/fraction.h"
#include "engine/diagnostics/diag_detail.h"
#include "engine/diagnostics/diagnostics.h"
#include "brain/util/slope_fit.h"
#include "engine/models/layers.h"
#include "brain/theory/depth_theory.h"

namespace scaleinv::diag {

namespace {

void validate(const DepthScalingOptions& o) {
  using detail::require;
  using detail::require_lr;
  require(!o.params.empty(), "--param", "no parameterization given", "e.g. --param depth-mup,standard");
  detail::require_grid(o.depths, "--depths");
  require(o.width >= 2, "--width", fmt::format("width {} < 2", o.width), "e.g. --width 128");
  require(o.seeds >= 1, "--seeds", fmt::format("seeds {} < 1", o.seeds), "give at least 1 seed");
  require(o.batch >= 1, "--batch", fmt::format("batch {} < 1", o.batch), "e.g. --batch 64");
  detail::require_optimizer(o.optimizer);
  detail::require_activation(o.activation);
  require_lr(o.lr, "--lr 1e-3");
  require(std::isfinite(o.branch_mult) && o.branch_mult > 0, "--branch-mult", "must be positive", "e.g. 1");
  require(o.base_depth >= 1, "--base-depth", "must be positive", "e.g. 4");
  require(o.data == "gaussian" || o.data == "fashion_mnist", "--data", fmt::format("unknown data '{}'", o.data),
          "use gaussian or fashion_mnist");
  require(o.in_dim >= 1, "--in-dim", "must be positive", "e.g. 64");
}

struct Rec {
  torch::Tensor x0, xL;
};

Rec record(Model& m, const torch::Tensor& x, int L) {
  torch::NoGradGuard ng;
  m.set_recording(true);
  m.forward(x);
  Rec r;
  for (const auto& [name, t] : m.recorded()) {
    if (name == "x0") r.x0 = t.detach().clone();
    if (name == fmt::format("x{}", L)) r.xL = t.detach().clone();
  }
  m.set_recording(false);
  return r;
}

}  // namespace

DepthScalingResult run_depth_scaling(const DepthScalingOptions& o) {
  validate(o);
  const OptFamily family = optimizer_family(o.optimizer);
  const int in_dim = o.data == "fashion_mnist" ? 784 : o.in_dim;
  std::vector<Batch> batches;
  for (int s = 0; s < o.seeds; ++s) {
    if (o.data == "fashion_mnist") {
      DataConfig dc;
      dc.source = "fashion_mnist";
      dc.flatten = true;
      dc.fashion_dir = o.fashion_dir;
      dc.seed = s;
      batches.push_back(make_data(dc)->batch(Split::Train, 0, o.batch));
    } else {
      batches.push_back(detail::gaussian_batch(uint64_t(s) + 1, uint64_t(s) + 999, o.batch, in_dim, 10));
    }
  }
  std::vector<double> xs(o.depths.begin(), o.depths.end());
  const double lmin = *std::min_element(xs.begin(), xs.end()), lmax = *std::max_element(xs.begin(), xs.end());

  DepthScalingResult r;
  r.opts = o;
  detail::Bar bar(o.show_progress, long(o.params.size() * o.depths.size() * o.seeds), "depth-scaling");
  for (const auto& name : o.params) {
    ParamTable table = detail::load_diag_param(name);
    table.base_depth = o.base_depth;
    const DepthTheory dt = depth_theory(table, family);
    DepthScalingParam dp;
    dp.param = name;
    dp.alpha = dt.alpha;
    dp.gamma = dt.gamma;
    dp.pred_branch_asym = dt.top_init_rho_half;
    dp.pred_update_correlated = dt.update_correlated;
    dp.pred_update_uncorrelated = dt.update_uncorrelated;
    dp.top.assign(o.seeds, std::vector<double>(o.depths.size()));
    dp.branch_sum = dp.update = dp.top;
    double q0 = 0;
    std::vector<double> w2_at, beta_at;
    for (size_t di = 0; di < o.depths.size(); ++di) {
      const int L = o.depths[di];
      ModelConfig mc;
      mc.kind = "resmlp";
      mc.width = o.width;
      mc.depth = L;
      mc.in_dim = in_dim;
      mc.n_classes = 10;
      mc.activation = o.activation;
      mc.pre_ln = o.pre_ln;
      mc.mean_subtract = true;
      Hyper hp;
      hp.branch_mult = o.branch_mult;
      const ScaleContext ctx{table, family, o.width, L};
      // The recursion's numbers for this depth: the hidden pre-activation variance per unit input
      // second moment, and the branch multiplier.
      const ParamTag hid{Role::Hidden, true, width_fan_in_std(o.width, ctx)};
      w2_at.push_back(std::pow(role_multiplier(Role::Hidden, true, ctx) * init_std(hid, ctx, hp), 2) * o.width);
      beta_at.push_back(hp.branch_mult * branch_multiplier(table, ctx.k()));
      for (int s = 0; s < o.seeds; ++s) {
        torch::manual_seed(static_cast<uint64_t>(s));
        auto model = build_model(mc, ctx, hp);
        const Batch& b = batches[s];
        const Rec before = record(*model, b.x, L);
        auto opt = detail::make_diag_optimizer(*model, o.optimizer, o.lr, 0.9, o.train_io);
        detail::train_steps(*model, *opt, 1, [&](int64_t) { return b; });
        const Rec after = record(*model, b.x, L);
        dp.top[s][di] = tensor_rms(before.xL);
        dp.branch_sum[s][di] = tensor_rms(before.xL - before.x0);
        dp.update[s][di] = tensor_rms(after.xL - before.xL);
        q0 += std::pow(tensor_rms(before.x0), 2) / (o.seeds * o.depths.size());
        bar.tick(fmt::format("{} L={} seed {}", name, L, s));
      }
    }
    dp.top_slope = fit_slope(xs, dp.top, true, true);
    dp.branch_slope = fit_slope(xs, dp.branch_sum, true, true);
    dp.update_slope = fit_slope(xs, dp.update, true, true);
    dp.q0 = q0;
    dp.c_phi = detail::var_phi(o.activation, 1.0);
    std::vector<double> lx, lt, lb;
    for (size_t di = 0; di < o.depths.size(); ++di) {
      double q = q0;
      for (int l = 0; l < o.depths[di]; ++l)
        q += beta_at[di] * beta_at[di] * detail::var_phi(o.activation, w2_at[di] * (o.pre_ln ? 1.0 : q));
      lx.push_back(std::log(xs[di]));
      lt.push_back(0.5 * std::log(q));
      lb.push_back(0.5 * std::log(std::max(q - q0, 1e-300)));
    }
    dp.pred_top_finite = ols_fit(lx, lt).slope;
    dp.pred_branch_finite = ols_fit(lx, lb).slope;
    dp.tol = std::sqrt(2.0 / o.width) / std::log(lmax / lmin);
    r.params.push_back(std::move(dp));
  }
  bar.finish();
  return r;
}

std::string depth_scaling_table(const DepthScalingResult& r) {
  const DepthScalingOptions& o = r.opts;
  std::string s = fmt::format(
      "depth scaling (seed 000 eqs. 29-31; seed 004): resmlp width {}, {}{}, mean subtraction, branch a = {}, base "
      "depth {}, {} lr {} one step on one fixed batch of {} ({}){}, depths {}, {} seed(s)\n",
      o.width, o.activation, o.pre_ln ? ", pre-LN" : ", no LN", o.branch_mult, o.base_depth, o.optimizer, o.lr,
      o.batch, o.data, o.train_io ? "" : ", only W_l train", fmt::join(o.depths, ", "), o.seeds);
  s += "log-log slopes in L [95% interval over seeds]; finite-width allowance sqrt(2/n)/ln(Lmax/Lmin) added to the "
       "interval for the verdicts\n";
  for (const auto& p : r.params) {
    s += fmt::format("\nparam {} (alpha = {}, gamma = {})\n", p.param, format_fraction(p.alpha), format_fraction(p.gamma));
    s += fmt::format("{:>6}{:>14}{:>14}{:>14}\n", "L", "RMS(x_L)", "RMS(x_L-x_0)", "RMS(dx_L)");
    for (size_t di = 0; di < o.depths.size(); ++di) {
      double a = 0, b = 0, c = 0;
      for (size_t si = 0; si < p.top.size(); ++si) {
        a += p.top[si][di] / p.top.size();
        b += p.branch_sum[si][di] / p.top.size();
        c += p.update[si][di] / p.top.size();
      }
      s += fmt::format("{:>6}{:>14.4g}{:>14.4g}{:>14.4g}\n", o.depths[di], a, b, c);
    }
    s += fmt::format("{:<22}{:<28}{}\n", "quantity", "measured slope", "predicted");
    s += fmt::format("{:<22}{:<28}{:.3f} at these depths (recursion, q0 = {:.3g}, Var phi = {:.3f})\n", "RMS(x_L) at init",
                     fit_text(p.top_slope), p.pred_top_finite, p.q0, p.c_phi);
    s += fmt::format("{:<22}{:<28}{} (depth_theory, rho = 1/2); {:.3f} at these depths\n", "RMS(x_L - x_0) init",
                     fit_text(p.branch_slope), format_fraction(p.pred_branch_asym), p.pred_branch_finite);
    s += fmt::format("{:<22}{:<28}{} (correlated layer gradients) or {} (uncorrelated)\n", "RMS(dx_L) one step",
                     fit_text(p.update_slope), format_fraction(p.pred_update_correlated),
                     format_fraction(p.pred_update_uncorrelated));
    auto verdict = [&](const Fit& f, double pred) {
      return f.contains(pred, p.tol) ? "matches" : "DEVIATES from";
    };
    s += fmt::format("verdicts (tolerance interval + {:.3f}): top at init {} the recursion; branch sum {} depth_theory; "
                     "update {} the correlated prediction\n",
                     p.tol, verdict(p.top_slope, p.pred_top_finite), verdict(p.branch_slope, p.pred_branch_asym),
                     verdict(p.update_slope, p.pred_update_correlated));
  }
  return s;
}

nlohmann::json depth_scaling_json(const DepthScalingResult& r) {
  const DepthScalingOptions& o = r.opts;
  nlohmann::json j;
  j["diagnostic"] = "depth-scaling";
  j["options"] = {{"params", o.params}, {"depths", o.depths}, {"width", o.width}, {"seeds", o.seeds},
                  {"batch", o.batch}, {"optimizer", o.optimizer}, {"lr", o.lr}, {"activation", o.activation},
                  {"pre_ln", o.pre_ln}, {"train_io", o.train_io}, {"branch_mult", o.branch_mult},
                  {"base_depth", o.base_depth}, {"data", o.data}, {"in_dim", o.in_dim}};
  j["params"] = nlohmann::json::array();
  for (const auto& p : r.params)
    j["params"].push_back({{"param", p.param},
                           {"alpha", p.alpha},
                           {"gamma", p.gamma},
                           {"top", p.top},
                           {"branch_sum", p.branch_sum},
                           {"update", p.update},
                           {"top_slope", fit_json(p.top_slope)},
                           {"branch_slope", fit_json(p.branch_slope)},
                           {"update_slope", fit_json(p.update_slope)},
                           {"pred_top_finite", p.pred_top_finite},
                           {"pred_branch_finite", p.pred_branch_finite},
                           {"pred_branch_asym", p.pred_branch_asym},
                           {"pred_update_correlated", p.pred_update_correlated},
                           {"pred_update_uncorrelated", p.pred_update_uncorrelated},
                           {"tol", p.tol},
                           {"q0", p.q0},
                           {"var_phi", p.c_phi}});
  return j;
}

}  // namespace scaleinv::diag
