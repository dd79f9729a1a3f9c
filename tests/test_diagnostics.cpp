// Diagnostics (src/engine/diagnostics/diagnostics.h): alignment exponents, post-LN transport, feature
// diversity, init statistics, depth scaling, and the `scaleinv diagnose` CLI. Miniature grids with
// fixed seeds; every tolerance is derived in a comment next to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "engine/diagnostics/diagnostics.h"
#include "brain/util/slope_fit.h"

using namespace scaleinv;
using namespace scaleinv::diag;

namespace {

// A relative O(x^-1/2) correction to a power law, c x^-1/2 with c = 1, bends the log-log slope
// fitted over [x_min, x_max] by at most ln(1 + x_min^-1/2) / ln(x_max / x_min): the finite-size
// allowance added to a seed interval (the same rule as the coordinate check's).
double finite_size(double x_min, double x_max) { return std::log1p(1.0 / std::sqrt(x_min)) / std::log(x_max / x_min); }

// [lo - tol, hi + tol] meets [a, b].
bool meets(const Fit& f, double a, double b, double tol) { return f.lo - tol <= b && f.hi + tol >= a; }

using scaleinv::testing::slurp;

}  // namespace

// ---- fits ------------------------------------------------------------------------------------

TEST(DiagFit, PowerLawsSeedIntervalsAndOneSeed) {
  const std::vector<double> x{64, 128, 256};
  // Exact power laws with per-seed prefactors: slope exactly 1/2, zero-width interval.
  Fit f = fit_slope(x, {{8, 8 * std::sqrt(2.0), 16}, {3, 3 * std::sqrt(2.0), 6}}, true, true);
  EXPECT_NEAR(f.slope, 0.5, 1e-12);
  EXPECT_NEAR(f.hi - f.lo, 0.0, 1e-9);
  // Two seeds with slopes 0.4 and 0.6: mean 0.5, se 0.1, half width t_1 * 0.1.
  auto pl = [&](double e) { return std::vector<double>{std::pow(64.0, e), std::pow(128.0, e), std::pow(256.0, e)}; };
  f = fit_slope(x, {pl(0.4), pl(0.6)}, true, true);
  EXPECT_NEAR(f.slope, 0.5, 1e-12);
  EXPECT_NEAR(f.se, 0.1, 1e-12);
  EXPECT_NEAR(f.half_width(), 12.706 * 0.1, 1e-9);
  EXPECT_TRUE(f.contains(0.5));
  // One seed: OLS and its residual standard error (exact line: zero).
  f = fit_slope({1, 2, 3, 4}, {{1, 3, 5, 7}}, false, false);
  EXPECT_NEAR(f.slope, 2.0, 1e-12);
  EXPECT_NEAR(f.se, 0.0, 1e-12);
  // A non-positive value under a log gives NaN, never a silent number.
  f = fit_slope(x, {{1, 0, 2}}, true, true);
  EXPECT_TRUE(std::isnan(f.slope));
  // The fits' t quantile is slope_fit.h's: the exact table to 30 dof, Cornish-Fisher beyond
  // (t_{0.975, 1000} = 1.9623, not the normal 1.96).
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.776, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 1000), 1.9623, 2e-4);
  const Fit m = fit_mean({0.3, 0.5, 0.7});
  EXPECT_NEAR(m.slope, 0.5, 1e-12);
  EXPECT_NEAR(m.se, 0.2 / std::sqrt(3.0), 1e-12);
}

// ---- post-LN transport -------------------------------------------------------------------------

TEST(DiagTransport, LinearShrinksExponentiallyAtAlphaOneAndStaysBoundedAtAlphaL) {
  TransportOptions o;
  o.width = 128;
  o.depths = {2, 4, 8, 16, 32};
  o.shortcuts = {0.0, 1.0};
  o.seeds = 2;
  o.batch = 8;
  o.show_progress = false;
  const TransportResult r = run_transport(o);
  ASSERT_EQ(r.series.size(), 2u);
  const double d = o.width;
  // Derived tolerance. For L < d the chain's norm is exactly prod_l alpha / RMS(o_l) (the LN
  // Jacobians are scaled projections with a common (d - L)-dimensional fixed space). With
  // o = alpha h + A h, RMS(h) = 1 and A ~ N(0, 1/d): RMS(o)^2 = alpha^2 + 1 + delta with
  // Var(delta) = Var(RMS(Ah)^2) + Var(2 h.Ah / d) = 2/d + 4/d. So one factor's log is
  // -1/2 log(1 + 1/alpha^2) - delta / (2 (alpha^2 + 1)) + O(delta^2): sd sigma_1 = sqrt(6/d) / (2 (alpha^2 + 1)),
  // and a bias of at most Var(delta) / (4 (alpha^2 + 1)^2) per factor. The log norm at depth L
  // sums L independent factors; the OLS slope over independent stacks per depth then has
  // sd sigma_1 sqrt(sum_i w_i^2 L_i), w_i = (L_i - mean L) / Sxx, divided by sqrt(seeds). 4 sd.
  auto slope_sd = [&](double sigma1) {
    double mean = 0, sxx = 0, acc = 0;
    for (int L : o.depths) mean += double(L) / o.depths.size();
    for (int L : o.depths) sxx += (L - mean) * (L - mean);
    for (int L : o.depths) acc += std::pow((L - mean) / sxx, 2) * L;
    return sigma1 * std::sqrt(acc) / std::sqrt(double(o.seeds));
  };
  const double sigma1 = std::sqrt(6.0 / d) / 4.0, bias1 = (6.0 / d) / 16.0;  // alpha = 1
  const TransportSeries& a1 = r.series[0];
  EXPECT_LT(a1.log_norm_slope.hi, 0.0) << "alpha = 1 must shrink exponentially";
  EXPECT_NEAR(a1.log_norm_slope.slope, -0.5 * std::log(2.0), 4 * slope_sd(sigma1) + bias1);
  EXPECT_NEAR(a1.bound_slope, -0.5 * std::log(2.0), 1e-12);
  // Each point follows the bound's trend: |log(norm / bound)| within 4 sd + bias at that depth.
  for (const auto& p : a1.points) {
    const double sd = sigma1 * std::sqrt(double(p.depth)) / std::sqrt(double(o.seeds));
    EXPECT_NEAR(std::log(p.norm_gmean() / p.bound), 0.0, 4 * sd + bias1 * p.depth) << "L = " << p.depth;
  }
  // alpha = L: bounded away from 0, equal to the bound within the same derivation at alpha = L.
  const TransportSeries& aL = r.series[1];
  for (const auto& p : aL.points) {
    const double s1 = std::sqrt(6.0 / d) / (2.0 * (p.alpha * p.alpha + 1.0));
    const double b1 = (6.0 / d) / (4.0 * std::pow(p.alpha * p.alpha + 1.0, 2));
    EXPECT_NEAR(std::log(p.norm_gmean() / p.bound), 0.0, 4 * s1 * std::sqrt(double(p.depth)) + b1 * p.depth)
        << "L = " << p.depth;
    EXPECT_GT(p.norm_gmean(), 0.5);
  }
  EXPECT_GE(aL.min_norm, 0.5);
  EXPECT_NE(r.verdict.find("alpha = 1: shrinks exponentially"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("alpha = L: bounded"), std::string::npos) << r.verdict;
}

TEST(DiagTransport, GptPostBlocksAtInit) {
  // The GPT's own post-LN blocks (two LNs each); run_transport checks its recomputation of every
  // LN input against the model's recorded block outputs. alpha = 1 must decay, alpha = L must not.
  TransportOptions o;
  o.model = "gpt";
  o.width = 64;
  o.depths = {2, 4, 8};
  o.seeds = 1;
  o.batch = 2;
  o.seq_len = 8;
  o.show_progress = false;
  const TransportResult r = run_transport(o);
  const TransportSeries& a1 = r.series[0];
  const TransportSeries& aL = r.series[1];
  EXPECT_LT(a1.log_norm_slope.slope, 0.0);
  EXPECT_LT(a1.points.back().norm_gmean(), 0.1 * a1.points.front().norm_gmean());
  // alpha = L: every factor alpha / RMS(o) -> 1 except the first LN's, whose input is the raw
  // embedding (RMS sqrt(2) for token + position): bounded below by about 1/sqrt(2) times the bound.
  for (const auto& p : aL.points) EXPECT_GT(p.norm_gmean(), 0.5 * p.bound) << "L = " << p.depth;
  EXPECT_GT(aL.points.back().norm_gmean(), 0.8 * aL.points.front().norm_gmean());
}

// ---- depth scaling -----------------------------------------------------------------------------

TEST(DiagDepthScaling, DepthMupFlatStandardGrowsLikeSqrtL) {
  DepthScalingOptions o;
  o.params = {"depth-mup", "standard"};
  o.depths = {4, 8, 16, 32, 64};
  o.width = 128;
  o.seeds = 3;
  o.batch = 32;
  o.show_progress = false;
  const DepthScalingResult r = run_depth_scaling(o);
  ASSERT_EQ(r.params.size(), 2u);
  const DepthScalingParam& mup = r.params[0];
  const DepthScalingParam& sp = r.params[1];
  // Tolerance: the seed interval plus the finite-width allowance sqrt(2/n)/ln(Lmax/Lmin) (a mean
  // square over n coordinates moves by sqrt(2/n) relative; see depth_scaling.cpp), p.tol.
  EXPECT_NEAR(mup.tol, std::sqrt(2.0 / 128) / std::log(16.0), 1e-12);
  EXPECT_TRUE(mup.top_slope.contains(0.0, mup.tol)) << fit_text(mup.top_slope);
  EXPECT_TRUE(mup.branch_slope.contains(0.0, mup.tol)) << fit_text(mup.branch_slope);
  EXPECT_TRUE(mup.update_slope.contains(0.0, mup.tol)) << fit_text(mup.update_slope);
  EXPECT_NEAR(mup.pred_branch_asym, 0.0, 1e-12);
  EXPECT_NEAR(mup.pred_update_correlated, 0.0, 1e-12);
  // standard: the branch sum (seed 000 eq. 29 with h_0 = 0) grows like sqrt(L) exactly under pre-LN;
  // x_L itself follows the recursion sqrt(q_0 + Var phi L) at these depths.
  EXPECT_NEAR(sp.pred_branch_asym, 0.5, 1e-12);
  EXPECT_NEAR(sp.pred_branch_finite, 0.5, 1e-9);
  EXPECT_TRUE(sp.branch_slope.contains(0.5, sp.tol)) << fit_text(sp.branch_slope);
  EXPECT_TRUE(sp.top_slope.contains(sp.pred_top_finite, sp.tol)) << fit_text(sp.top_slope);
  // The one-step update grows with depth under standard (the theory: L^1 correlated, L^1/2 not).
  EXPECT_GT(sp.update_slope.lo, sp.pred_update_uncorrelated);
  const std::string table = depth_scaling_table(r);
  EXPECT_NE(table.find("param depth-mup"), std::string::npos);
}

// ---- alignment ---------------------------------------------------------------------------------

TEST(DiagAlignment, HiddenExponentsInTheSeedRangeAndReadoutFindingReported) {
  AlignmentOptions o;
  o.params = {"mup", "sp"};
  o.widths = {64, 128, 256};
  o.seeds = 3;
  o.vocab = 32;
  o.batch = 8;
  o.seq_len = 16;
  o.show_progress = false;
  const AlignmentResult r = run_alignment(o);
  ASSERT_EQ(r.params.size(), 2u);
  EXPECT_GT(r.distinct_inputs, 1.0);
  EXPECT_LE(r.distinct_inputs, 32.0);
  const double fs = finite_size(64, 256);
  for (const auto& ap : r.params) {
    ASSERT_EQ(ap.layers.size(), 3u);  // W_1, W_2 hidden, W_3 readout
    for (const auto& al : ap.layers) {
      ASSERT_EQ(al.omega_ratio.size(), 3u);
      for (const auto& row : al.omega_ratio)
        for (double v : row) EXPECT_TRUE(std::isfinite(v) && v > 0);
      if (al.role != "hidden" || ap.param != "mup") continue;
      // seed 000 Appendix D: omega, alpha, u in [1/2, 1], here up to the interval and the finite-size allowance.
      EXPECT_TRUE(meets(al.omega, 0.5, 1.0, fs)) << "layer " << al.layer << " omega " << fit_text(al.omega);
      EXPECT_TRUE(meets(al.alpha, 0.5, 1.0, fs)) << "layer " << al.layer << " alpha " << fit_text(al.alpha);
      EXPECT_TRUE(meets(al.u, 0.5, 1.0, fs)) << "layer " << al.layer << " u " << fit_text(al.u);
      // eq. (26): hidden layers are not aligned with their input change, omega_hidden = 1/2.
      EXPECT_TRUE(al.omega.contains(0.5, fs)) << fit_text(al.omega);
    }
    EXPECT_EQ(ap.layers.back().role, "readout");
    EXPECT_TRUE(std::isfinite(ap.layers.back().omega.slope));
    EXPECT_TRUE(std::isfinite(ap.logit_update.slope));
    EXPECT_TRUE(std::isfinite(ap.logit_update_top.slope));
    EXPECT_TRUE(ap.has_theory);
    EXPECT_NE(ap.readout_finding.find("readout omega"), std::string::npos);
  }
  // width_theory's logit-update predictions: sp 1/2 (omega_readout = 1) or 0 (1/2); mup 0 either way.
  const AlignmentParam& mup = r.params[0];
  const AlignmentParam& sp = r.params[1];
  EXPECT_NEAR(sp.pred_logit_omega1, 0.5, 1e-12);
  EXPECT_NEAR(sp.pred_logit_omega_half, 0.0, 1e-12);
  EXPECT_NEAR(mup.pred_logit_omega1, 0.0, 1e-12);
  // The readout is aligned here (omega_readout above 1/2 beyond its interval and the finite-size
  // allowance), where those predictions put sp's logit update above mup's (by 1/2 at omega = 1; the
  // gap closes only at omega = 1/2). So the measured difference of the two slopes must exceed its
  // own interval, t_{2S-2} sqrt(se_sp^2 + se_mup^2), plus both slopes' finite-size allowance.
  EXPECT_GT(sp.layers.back().omega.lo - fs, 0.5) << fit_text(sp.layers.back().omega);
  const double gap = sp.logit_update.slope - mup.logit_update.slope;
  const double gap_half =
      student_t_quantile(0.975, 2 * o.seeds - 2) * std::hypot(sp.logit_update.se, mup.logit_update.se);
  EXPECT_GT(gap, gap_half + 2 * fs) << "sp " << fit_text(sp.logit_update) << " mup " << fit_text(mup.logit_update);
  const std::string table = alignment_table(r);
  EXPECT_NE(table.find("finding: readout omega"), std::string::npos);
  const nlohmann::json j = alignment_json(r);
  EXPECT_EQ(j["params"][1]["param"], "sp");
  EXPECT_TRUE(j["params"][1]["layers"][2].contains("omega_top"));
}

TEST(DiagAlignment, GptReadoutMachinery) {
  AlignmentOptions o;
  o.model = "gpt";
  o.params = {"mup"};
  o.widths = {32, 64};
  o.depth = 1;
  o.seeds = 1;
  o.batch = 2;
  o.seq_len = 8;
  o.vocab = 16;
  o.show_progress = false;
  const AlignmentResult r = run_alignment(o);
  ASSERT_EQ(r.params[0].layers.size(), 1u);
  EXPECT_EQ(r.params[0].layers[0].role, "readout");
  EXPECT_TRUE(std::isfinite(r.params[0].layers[0].omega.slope));
  EXPECT_FALSE(r.params[0].has_theory);
}

// ---- init statistics ---------------------------------------------------------------------------

TEST(DiagInitStats, LogitVarianceWidthFreeAndProportionalToCqCkStreamGrows) {
  InitStatsOptions o;
  o.models = {"gpt", "vit"};
  o.widths = {32, 64, 128};
  o.depth = 1;
  o.init_scales = {0.5, 1.0, 2.0};
  o.stream_depth = 12;
  o.stream_width = 64;
  o.seeds = 3;
  o.batch = 2;
  o.seq_len = 16;
  o.show_progress = false;
  const InitStatsResult r = run_init_stats(o);
  ASSERT_EQ(r.models.size(), 2u);
  const double fs_w = finite_size(32, 128);
  for (const auto& m : r.models) {
    // seed 002 eq. (1.61): Var ~ C_Q C_K, independent of width (fixed head_dim: the prediction is flat).
    // The prediction uses the drawn RMS(W_Q)^2 RMS(W_K)^2: relative sd 2/d (sqrt(2)/d per d x d matrix),
    // over S seeds 2/(d sqrt(S)); at the smallest width that tilts the slope by that over ln(w_max/w_min). 4 sd.
    EXPECT_NEAR(m.pred_width_slope, 0.0, 4 * (2.0 / 32) / std::sqrt(double(o.seeds)) / std::log(128.0 / 32)) << m.model;
    EXPECT_TRUE(m.width_slope.contains(m.pred_width_slope, fs_w)) << m.model << " " << fit_text(m.width_slope);
    // C_Q C_K ~ init_scale^2 init_scale^2. With one block the attention input LN(embedding) does not
    // depend on init_scale (the embedding is homogeneous in it; LN's eps moves F by eps / G < 1e-4), and
    // one seed draws the same normals at every scale: the slope is 4 up to that, per seed.
    EXPECT_NEAR(m.pred_scale_slope, 4.0, 1e-3) << m.model;
    EXPECT_TRUE(m.scale_slope.contains(4.0, 1e-3)) << m.model << " " << fit_text(m.scale_slope);
    // Pre-LN: the stream's mean square grows with depth, every seed.
    for (double s : m.stream_linear_slope.per_seed) EXPECT_GT(s, 0.0) << m.model;
    for (const auto& g : m.stream) EXPECT_GT(g.back(), 2.0 * g.front()) << m.model;
    EXPECT_GT(m.stream_r2, 0.9) << m.model;
    // Linear in depth: log-log slope of G(l) - G(0) near 1 (interval plus the finite-size allowance over l = 2..12).
    EXPECT_TRUE(m.stream_loglog_slope.contains(1.0, finite_size(2, 12))) << m.model << " "
                                                                          << fit_text(m.stream_loglog_slope);
  }
}

// ---- feature diversity -------------------------------------------------------------------------

TEST(DiagDiversity, DepthMupKeepsMoreDiversityThanTheOdeLimit) {
  DiversityOptions o;
  o.params = {"depth-mup", "ode"};
  o.width = 64;
  o.depth = 32;
  o.steps = 80;
  o.batch = 32;
  o.data = "gaussian";
  o.in_dim = 64;
  o.eval_batch = 64;
  o.seeds = 3;
  o.show_progress = false;
  const DiversityResult r = run_diversity(o);
  ASSERT_EQ(r.params.size(), 2u);
  const DiversityParam& mup = r.params[0];
  const DiversityParam& ode = r.params[1];
  EXPECT_EQ(mup.predicted, "1/2");
  EXPECT_EQ(ode.predicted, "0");
  EXPECT_NEAR(ode.alpha, 1.0, 1e-12);
  EXPECT_NEAR(ode.gamma, 0.0, 1e-12);
  EXPECT_EQ(mup.eps_blocks, (std::vector<int>{1, 2, 4, 8}));
  // At init every alpha adds independent blocks: a random walk in depth, kappa = 1/2. Allowance: the
  // increments' variance grows by (1 + Var phi / L) per block under depth-mup (no LN), so over the
  // largest window (L/4 blocks) the step size changes by at most e^(Var phi / 8) and the slope by
  // (Var phi / 8) / ln(k_max / k_min), Var phi = 0.341 (ReLU).
  const double allow = (0.341 / 8) / std::log(8.0);
  EXPECT_TRUE(mup.kappa_init.contains(0.5, allow)) << fit_text(mup.kappa_init);
  EXPECT_TRUE(ode.kappa_init.contains(0.5, allow)) << fit_text(ode.kappa_init);
  // After training, seed 004 Figs. 18-19: Depth-muP keeps more diversity than the ODE limit. The
  // difference of the means must exceed its own interval, t_{2S-2} sqrt(se_1^2 + se_2^2).
  const double diff = mup.kappa.slope - ode.kappa.slope;
  const double half = student_t_quantile(0.975, 2 * o.seeds - 2) * std::sqrt(std::pow(mup.kappa.se, 2) + std::pow(ode.kappa.se, 2));
  EXPECT_GT(diff, half) << "depth-mup " << fit_text(mup.kappa) << " ode " << fit_text(ode.kappa);
  // And training made the ODE smoother than at init (kappa towards 0).
  EXPECT_LT(ode.kappa.hi, ode.kappa_init.lo);
}

// ---- CLI -----------------------------------------------------------------------------------------

TEST(DiagCli, TransportWritesTableAndJson) {
  const std::string dir = scaleinv::testing::temp_dir("diag_cli");
  const std::string json = dir + "/t.json";
  const auto r = scaleinv::testing::run_cli("--threads 1 diagnose transport --depths 2,4,8 --width 32 --seeds 1 "
                                            "--batch 2 --quiet --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["diagnostic"], "transport");
  ASSERT_EQ(j["series"].size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(json + ".tmp"));
  // What seed 000 eqs. 33-35 (Lemma E.5) predict for the linear chain: alpha = L^shortcut, and per RMS
  // LN a factor (1 + 1/alpha^2)^(-1/2), so the bound (1 + 1/alpha^2)^(-L/2). Each LN's measured factor
  // is off the lemma's by O(d^-1/2) (A h is orthogonal to h and as large only up to that), and n LNs
  // add those as a random walk: |ln(norm / bound)| <= 2 sqrt(n / d).
  const double d = 32;
  for (const auto& ser : j["series"]) {
    const double sc = ser["shortcut"];
    for (const auto& p : ser["points"]) {
      const double L = p["depth"], alpha = p["alpha"], n = p["n_ln"];
      EXPECT_DOUBLE_EQ(alpha, std::pow(L, sc));
      EXPECT_EQ(n, L);
      EXPECT_NEAR(double(p["bound"]), std::pow(1 + 1 / (alpha * alpha), -L / 2), 1e-12);
      EXPECT_LE(std::abs(std::log(double(p["norm_gmean"]) / double(p["bound"]))), 2 * std::sqrt(n / d))
          << "shortcut " << sc << " depth " << L;
    }
  }
  // alpha = 1 shrinks by 2^(-1/2) per block (log slope -ln 2 / 2) and the fit's interval holds it;
  // alpha = L keeps the chain's norm near 1 (bound's smallest 0.8, at L = 2).
  const auto& one = j["series"][0];
  const auto& big = j["series"][1];
  EXPECT_NEAR(double(one["bound_slope"]), -std::log(2.0) / 2, 1e-12);
  EXPECT_LT(double(one["log_norm_slope"]["hi"]), 0);
  EXPECT_LE(double(one["log_norm_slope"]["lo"]), double(one["bound_slope"]));
  EXPECT_GE(double(one["log_norm_slope"]["hi"]), double(one["bound_slope"]));
  EXPECT_GE(double(big["min_norm"]), 0.8 * std::exp(-2 * std::sqrt(2 / d)));
  EXPECT_NE(r.out.find("verdict: alpha = 1: shrinks exponentially"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alpha = L: bounded, smallest norm"), std::string::npos) << r.out;
}

TEST(DiagCli, BadInputIsOneLineExit2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"diagnose alignment --widths 64 --quiet", "--widths"},
      {"diagnose transport --shortcuts=-1 --quiet", "--shortcuts"},
      {"diagnose depth-scaling --param nosuch --depths 4,8 --quiet", "nosuch"},
      {"diagnose init-stats --widths 60,64 --quiet", "head_dim"},
      {"diagnose diversity --depth 4 --quiet", "--depth"},
      {"diagnose alignment --model vit --quiet", "--model"},
      {"diagnose nosuch", "A subcommand is required"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = scaleinv::testing::run_cli(args);
    EXPECT_EQ(r.code, UserError::kExitCode) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
}
