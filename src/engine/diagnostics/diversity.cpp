// Feature diversity (seed 004 Def. 5.6; docs/design.md "Depth theory as implemented";
// src/engine/diagnostics/diagnostics.h).
//
//   d(eps) = n^-1/2 |x^floor((lambda+eps)L) - x^floor(lambda L)|   (mean over an evaluation batch)
//
// for lambda in `lambdas` and eps = k / L, k = 1, 2, 4, ... up to L/4. kappa is the largest value
// with d = Omega(eps^(1 - kappa)): we fit the slope s of log d against log eps and report
// kappa = 1 - s, averaged over lambda, with its interval over seeds. Depth-muP (alpha = 1/2) adds
// independent Theta(L^-1/2) blocks, a Brownian path in depth: s = 1/2, kappa = 1/2 (Claim 5.5).
// alpha in (1/2, 1] gives the ODE limit, smooth in depth once trained: s = 1, kappa = 0 (Claim 5.4).
//
// The residual MLP of seed 004 (block depth 1, mean subtraction, no LN) is trained for `steps`
// steps; by default only the W_l train (seed 004: U and V frozen). kappa is measured at init too:
// there every alpha gives independent blocks (s = 1/2), so the ODE's smoothness is a training effect.
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/fraction.h"
#include "engine/diagnostics/diag_detail.h"
#include "engine/diagnostics/diagnostics.h"
#include "brain/util/slope_fit.h"
#include "brain/theory/depth_theory.h"

namespace scaleinv::diag {

namespace {

void validate(const DiversityOptions& o) {
  using detail::require;
  using detail::require_lr;
  require(!o.params.empty(), "--param", "no parameterization given", "e.g. --param depth-mup,ode");
  require(o.width >= 2, "--width", fmt::format("width {} < 2", o.width), "e.g. --width 256");
  require(o.depth >= 8, "--depth", fmt::format("depth {} < 8", o.depth),
          "give L >= 8 so that eps = k/L spans at least two values up to 1/4");
  require(o.steps >= 0, "--steps", fmt::format("steps {} < 0", o.steps), "e.g. --steps 300");
  require(o.batch >= 1, "--batch", fmt::format("batch {} < 1", o.batch), "e.g. --batch 64");
  require(o.eval_batch >= 1, "--eval-batch", fmt::format("eval batch {} < 1", o.eval_batch), "e.g. --eval-batch 256");
  require(o.seeds >= 1, "--seeds", fmt::format("seeds {} < 1", o.seeds), "give at least 1 seed");
  detail::require_optimizer(o.optimizer);
  detail::require_activation(o.activation);
  require_lr(o.lr, "--lr 0.01");
  require(std::isfinite(o.branch_mult) && o.branch_mult > 0, "--branch-mult", "must be positive", "e.g. 2");
  require(o.base_depth >= 1, "--base-depth", "must be positive", "e.g. 8 (seed 004 L.2)");
  require(!o.lambdas.empty(), "--lambdas", "no relative depth given", "e.g. 0.25,0.5");
  for (double l : o.lambdas)
    require(l > 0 && l <= 0.75, "--lambdas", fmt::format("lambda {} is outside (0, 3/4]", l),
            "give relative depths with room for eps up to 1/4, e.g. 0.25,0.5");
  require(o.data == "fashion_mnist" || o.data == "gaussian", "--data", fmt::format("unknown data '{}'", o.data),
          "use fashion_mnist or gaussian");
  require(o.in_dim >= 1, "--in-dim", "must be positive", "e.g. 64");
}

// d[lambda][k] from the recorded x_0..x_L of one evaluation forward.
std::vector<std::vector<double>> measure(Model& m, const torch::Tensor& x, int L, const std::vector<double>& lambdas,
                                         const std::vector<int>& ks) {
  torch::NoGradGuard ng;
  m.set_recording(true);
  m.forward(x);
  std::map<std::string, torch::Tensor> rec;
  for (const auto& [name, t] : m.recorded()) rec[name] = t.detach().to(torch::kDouble);
  m.set_recording(false);
  std::vector<std::vector<double>> out;
  for (double lam : lambdas) {
    const int i0 = static_cast<int>(std::floor(lam * L));
    const torch::Tensor& a = rec.at(fmt::format("x{}", i0));
    const double n = static_cast<double>(a.size(1));
    std::vector<double> row;
    for (int k : ks) {
      const torch::Tensor& b = rec.at(fmt::format("x{}", i0 + k));
      row.push_back((b - a).norm(2, 1).mean().item<double>() / std::sqrt(n));
    }
    out.push_back(row);
  }
  return out;
}

// kappa = 1 - slope(log d, log eps), averaged over lambda.
double kappa_of(const std::vector<std::vector<double>>& d, const std::vector<int>& ks, int L) {
  std::vector<double> le;
  for (int k : ks) le.push_back(std::log(static_cast<double>(k) / L));
  double acc = 0;
  for (const auto& row : d) {
    std::vector<double> ld;
    for (double v : row) ld.push_back(std::log(std::max(v, 1e-300)));
    acc += 1.0 - ols_fit(le, ld).slope;
  }
  return acc / static_cast<double>(d.size());
}

}  // namespace

DiversityResult run_diversity(const DiversityOptions& o) {
  validate(o);
  const OptFamily family = optimizer_family(o.optimizer);
  std::vector<int> ks;
  for (int k = 1; 4 * k <= o.depth; k *= 2) ks.push_back(k);
  const int in_dim = o.data == "fashion_mnist" ? 784 : o.in_dim;
  std::vector<std::unique_ptr<DataSource>> sources;
  if (o.data == "fashion_mnist") {
    for (int s = 0; s < o.seeds; ++s) {
      DataConfig dc;
      dc.source = "fashion_mnist";
      dc.flatten = true;
      dc.fashion_dir = o.fashion_dir;
      dc.seed = s;
      sources.push_back(make_data(dc));
    }
  }
  auto train_batch = [&](int s, int64_t step) {
    if (o.data == "fashion_mnist") return sources[s]->batch(Split::Train, step, o.batch);
    return detail::gaussian_batch(uint64_t(s) * 1000003ULL + uint64_t(step) + 1, uint64_t(s) + 999, o.batch, in_dim, 10);
  };
  auto eval_batch = [&](int s) {
    if (o.data == "fashion_mnist") return sources[s]->batch(Split::Val, 0, o.eval_batch);
    return detail::gaussian_batch(uint64_t(s) * 7919ULL + 424242ULL, uint64_t(s) + 999, o.eval_batch, in_dim, 10);
  };

  DiversityResult r;
  r.opts = o;
  detail::Bar bar(o.show_progress, long(o.params.size() * o.seeds), "diversity");
  for (const auto& name : o.params) {
    ParamTable table = detail::load_diag_param(name);
    table.base_depth = o.base_depth;
    const DepthTheory dt = depth_theory(table, family);
    DiversityParam dp;
    dp.param = name;
    dp.alpha = dt.alpha;
    dp.gamma = dt.gamma;
    dp.predicted = dt.kappa ? format_fraction(*dt.kappa) : "-";
    dp.eps_blocks = ks;
    std::vector<double> k_init, k_trained;
    for (int s = 0; s < o.seeds; ++s) {
      ModelConfig mc;
      mc.kind = "resmlp";
      mc.width = o.width;
      mc.depth = o.depth;
      mc.in_dim = in_dim;
      mc.n_classes = 10;
      mc.activation = o.activation;
      mc.mean_subtract = true;
      mc.pre_ln = false;
      Hyper hp;
      hp.branch_mult = o.branch_mult;
      ScaleContext ctx{table, family, mc.width, mc.depth};
      torch::manual_seed(static_cast<uint64_t>(s));
      auto model = build_model(mc, ctx, hp);
      auto opt = detail::make_diag_optimizer(*model, o.optimizer, o.lr, 0.9, o.train_io);
      const Batch ev = eval_batch(s);
      dp.d_init.push_back(measure(*model, ev.x, o.depth, o.lambdas, ks));
      const std::vector<double> losses = detail::train_steps(
          *model, *opt, o.steps, [&](int64_t t) { return train_batch(s, t); },
          [&](int64_t done, double loss) {
            if (done % 50 == 0) bar.status(fmt::format("{} seed {} step {} loss {:.3f}", name, s, done, loss));
          });
      dp.d_trained.push_back(measure(*model, ev.x, o.depth, o.lambdas, ks));
      double tail = 0;
      const size_t n_tail = std::max<size_t>(1, losses.size() / 10);
      for (size_t i = losses.size() - std::min(n_tail, losses.size()); i < losses.size(); ++i) tail += losses[i];
      dp.final_loss.push_back(losses.empty() ? std::nan("") : tail / static_cast<double>(n_tail));
      k_init.push_back(kappa_of(dp.d_init.back(), ks, o.depth));
      k_trained.push_back(kappa_of(dp.d_trained.back(), ks, o.depth));
      bar.tick(fmt::format("{} seed {} kappa {:.3f}", name, s, k_trained.back()));
    }
    dp.kappa_init = fit_mean(k_init);
    dp.kappa = fit_mean(k_trained);
    r.params.push_back(std::move(dp));
  }
  bar.finish();
  return r;
}

std::string diversity_table(const DiversityResult& r) {
  const DiversityOptions& o = r.opts;
  std::string s = fmt::format(
      "feature diversity (seed 004 Def. 5.6): resmlp width {}, depth {} (base depth {}), {}, branch a = {}, {} lr {}, "
      "{} steps of batch {} on {}{}, {} seed(s)\n",
      o.width, o.depth, o.base_depth, o.activation, o.branch_mult, o.optimizer, o.lr, o.steps, o.batch, o.data,
      o.train_io ? "" : " (only W_l train)", o.seeds);
  s += fmt::format("d(eps) = n^-1/2 |x^floor((lambda+eps)L) - x^floor(lambda L)|, lambda in {{{}}}, eps = k/L; "
                   "kappa = 1 - slope(log d, log eps) [95% interval over seeds]\n\n",
                   fmt::join(o.lambdas, ", "));
  s += fmt::format("{:<12}{:>7}{:>7}{:>10}{:>28}{:>28}{:>12}\n", "param", "alpha", "gamma", "theory", "kappa at init",
                   "kappa trained", "final loss");
  for (const auto& p : r.params) {
    double fl = 0;
    for (double v : p.final_loss) fl += v / p.final_loss.size();
    s += fmt::format("{:<12}{:>7.3g}{:>7.3g}{:>10}{:>28}{:>28}{:>12.4f}\n", p.param, p.alpha, p.gamma, p.predicted,
                     fit_text(p.kappa_init), fit_text(p.kappa), fl);
  }
  for (const auto& p : r.params) {
    s += fmt::format("\n{}: d(eps) / sqrt(eps) (flat: kappa = 1/2; rising like sqrt(eps): kappa = 0), mean over seeds\n",
                     p.param);
    s += fmt::format("{:>8}{:>8}", "lambda", "eps");
    s += fmt::format("{:>14}{:>14}\n", "init", "trained");
    for (size_t li = 0; li < o.lambdas.size(); ++li)
      for (size_t ki = 0; ki < p.eps_blocks.size(); ++ki) {
        const double eps = double(p.eps_blocks[ki]) / o.depth;
        double a = 0, b = 0;
        for (size_t si = 0; si < p.d_init.size(); ++si) {
          a += p.d_init[si][li][ki] / p.d_init.size();
          b += p.d_trained[si][li][ki] / p.d_trained.size();
        }
        s += fmt::format("{:>8.3g}{:>8.4g}{:>14.4g}{:>14.4g}\n", o.lambdas[li], eps, a / std::sqrt(eps), b / std::sqrt(eps));
      }
  }
  return s;
}

nlohmann::json diversity_json(const DiversityResult& r) {
  const DiversityOptions& o = r.opts;
  nlohmann::json j;
  j["diagnostic"] = "diversity";
  j["options"] = {{"params", o.params}, {"width", o.width}, {"depth", o.depth}, {"steps", o.steps},
                  {"batch", o.batch}, {"optimizer", o.optimizer}, {"lr", o.lr}, {"branch_mult", o.branch_mult},
                  {"base_depth", o.base_depth}, {"activation", o.activation}, {"train_io", o.train_io},
                  {"lambdas", o.lambdas}, {"data", o.data}, {"eval_batch", o.eval_batch}, {"seeds", o.seeds}};
  j["params"] = nlohmann::json::array();
  for (const auto& p : r.params)
    j["params"].push_back({{"param", p.param},
                           {"alpha", p.alpha},
                           {"gamma", p.gamma},
                           {"predicted_kappa", p.predicted},
                           {"eps_blocks", p.eps_blocks},
                           {"d_init", p.d_init},
                           {"d_trained", p.d_trained},
                           {"kappa_init", fit_json(p.kappa_init)},
                           {"kappa", fit_json(p.kappa)},
                           {"final_loss", p.final_loss}});
  return j;
}

}  // namespace scaleinv::diag
