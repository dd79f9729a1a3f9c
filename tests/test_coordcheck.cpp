// Coordinate checks judged against the theory (issue 5): the slope fitter, the verdicts for
// parameterizations that must pass (mup, mf), one that must fail where the theory says it is
// unstable (standard), a deliberately broken model, plots, JSON and the CLI's exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "coord_util.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "engine/coordcheck/coord_recorder.h"
#include "engine/coordcheck/coordcheck.h"
#include "brain/util/slope_fit.h"
#include "brain/param/table.h"
#include "brain/util/gnuplot.h"
#include "brain/train/config.h"

using namespace scaleinv;
using scaleinv::testing::failures_text;
using scaleinv::testing::has_failure;
using scaleinv::testing::run_cli;
using scaleinv::testing::temp_dir;

namespace {

// Small probe (2 x 8 tokens of a 32-token Markov chain), as the CLI's defaults.
CoordCheckConfig small_check(const std::string& kind, const std::string& param, const std::string& optimizer = "adam") {
  const std::string toml = fmt::format(R"(
[model]
kind = "{}"
depth = 2
seq_len = 8
head_dim = 16
[param]
name = "{}"
[optim]
kind = "{}"
lr = 0.001
[data]
source = "markov"
vocab = 32
markov_length = 20000
[train]
batch_size = 2
steps = 3
)",
                                       kind, param, optimizer);
  CoordCheckConfig cc;
  cc.train = train_config_from_toml_text(toml, "test");
  cc.widths = {64, 128, 256};
  cc.steps = 3;
  cc.seeds = {0, 1, 2};
  cc.show_progress = false;
  return cc;
}

int predicted_rows(const CoordCheckResult& r) {
  int n = 0;
  for (const auto& row : r.rows) n += row.predicted.has_value();
  return n;
}

}  // namespace

// ---- the slope fitter ------------------------------------------------------------------------

TEST(CoordSlopeFit, StudentQuantiles) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.303, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 40), 2.021, 2e-3);   // expansion branch
  EXPECT_NEAR(student_t_quantile(0.975, 120), 1.980, 2e-3);
  EXPECT_NEAR(student_t_quantile(0.95, 10), 1.812, 5e-3);
}

TEST(CoordSlopeFit, RecoversKnownSlopeWithinInterval) {
  // y = A x^s exp(noise): 5 seeds of widths 64..1024; the slope must lie in the interval, and
  // over many trials the 95% interval must cover the truth about 95% of the time.
  const std::vector<double> x = {64, 128, 256, 512, 1024};
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.05);
  int covered = 0;
  const int trials = 400;
  // Per seed, the OLS slope's sd is 0.05 / sqrt(Sxx), Sxx = sum (ln x - mean)^2 = 10 (ln 2)^2 over
  // these 5 log-spaced widths; the fit's slope averages 5 seeds' (sd / sqrt 5 = 0.0102). Five of
  // those is the tolerance: a fitter biased by 0.05 or more fails.
  const double slope_sd = 0.05 / std::sqrt(10 * std::pow(std::log(2.0), 2)) / std::sqrt(5.0);
  for (int trial = 0; trial < trials; ++trial) {
    const double s = -1.0 + 0.5 * (trial % 5);  // -1, -1/2, 0, 1/2, 1
    std::vector<std::vector<double>> y;
    for (int seed = 0; seed < 5; ++seed) {
      const double seed_offset = noise(rng) * 4;  // per-seed level: does not bias the slope
      std::vector<double> row;
      for (double xi : x) row.push_back(3.0 * std::pow(xi, s) * std::exp(seed_offset + noise(rng)));
      y.push_back(row);
    }
    const SlopeFit f = fit_loglog_slope(x, y);
    ASSERT_TRUE(f.valid);
    EXPECT_EQ(f.method, "seeds");
    EXPECT_EQ(f.dof, 4);
    EXPECT_NEAR(f.slope, s, 5 * slope_sd);
    covered += std::fabs(f.slope - s) <= f.half_width;
  }
  // A 95% interval covers binomially: mean 0.95 x 400 = 380, sd sqrt(400 x 0.95 x 0.05) = 4.36;
  // within 4 sd of the mean (a 90% interval, 360, would fail it).
  const double cover_sd = std::sqrt(trials * 0.95 * 0.05);
  EXPECT_GE(covered, 0.95 * trials - 4 * cover_sd);
  EXPECT_LE(covered, 0.95 * trials + 4 * cover_sd);
}

TEST(CoordSlopeFit, ExactPowerLawAndEdgeCases) {
  const std::vector<double> x = {64, 128, 256};
  const SlopeFit f = fit_loglog_slope(x, {{1, 2, 4}, {2, 4, 8}});
  ASSERT_TRUE(f.valid);
  EXPECT_NEAR(f.slope, std::log(2) / std::log(2), 1e-12);
  EXPECT_NEAR(f.half_width, 0, 1e-12);
  // One seed: the OLS error of that fit (n - 2 = 1 degree of freedom).
  const SlopeFit one = fit_loglog_slope(x, {{1, 2.2, 4}});
  EXPECT_EQ(one.method, "ols");
  EXPECT_EQ(one.dof, 1);
  EXPECT_GT(one.half_width, 0);
  // Zero or non-finite values cannot be fitted on log axes.
  EXPECT_FALSE(fit_loglog_slope(x, {{1, 0, 4}}).valid);
  EXPECT_FALSE(fit_loglog_slope(x, {{1, NAN, 4}}).valid);
  EXPECT_FALSE(fit_loglog_slope({64, 64}, {{1, 2}}).valid);
  EXPECT_THROW(fit_loglog_slope(x, {{1, 2}}), std::invalid_argument);
}

TEST(CoordSlopeFit, FiniteSizeTerm) {
  // The generic O(x^-1/2) correction (depth), and the incoherent-remainder term (width).
  EXPECT_NEAR(finite_size_term(64, 256), std::log(1.125) / std::log(4.0), 1e-12);
  EXPECT_NEAR(finite_size_term(64, 256, 48), 0.5 * (std::log(1 + 48.0 / 64) - std::log(1 + 48.0 / 256)) / std::log(4.0),
              1e-12);
  // It bounds the bias of an O(x^-1/2) correction, A x^e (1 + x^-1/2): fit such data exactly.
  {
    std::vector<double> y;
    for (double d : {64.0, 128.0, 256.0}) y.push_back(std::pow(d, 0.5) * (1 + 1 / std::sqrt(d)));
    const SlopeFit f = fit_loglog_slope({64, 128, 256}, {y});
    EXPECT_LE(std::fabs(f.slope - 0.5), finite_size_term(64, 256) + 1e-12);
    EXPECT_GT(std::fabs(f.slope - 0.5), 0.01);  // (the data do carry a bias for it to bound)
  }
  // A wider range and a smaller probe tighten it.
  EXPECT_LT(finite_size_term(64, 1024, 48), finite_size_term(64, 256, 48));
  EXPECT_LT(finite_size_term(64, 256, 16), finite_size_term(64, 256, 48));
  // It bounds the bias of A d^e sqrt(1 + n/d): fit such data exactly.
  const std::vector<double> x = {64, 128, 256};
  std::vector<double> y;
  for (double d : x) y.push_back(std::pow(d, 0.5) * std::sqrt(1 + 48 / d));
  const SlopeFit f = fit_loglog_slope(x, {y});
  EXPECT_LE(std::fabs(f.slope - 0.5), finite_size_term(64, 256, 48) + 1e-12);
}

TEST(CoordSlopeFit, InverseWidthFitRecoversThePlantedExponentPastA1OverDTerm) {
  // ln y = a_s + e ln d + c/d + noise (slope_fit.h fit_inverse_width): e and c are recovered and
  // their 95% intervals cover the truth at the binomial rate.
  const std::vector<double> x = {64, 128, 256, 512, 1024};
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.02);
  const int trials = 400;
  int covered_e = 0, covered_c = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const double e = -1.0 + 0.5 * (trial % 3), c = trial % 2 ? 60.0 : -40.0;
    std::vector<std::vector<double>> y;
    for (int seed = 0; seed < 6; ++seed) {
      const double level = noise(rng) * 10;  // a per-seed level: must not bias e
      std::vector<double> row;
      for (double d : x) row.push_back(std::exp(level + e * std::log(d) + c / d + noise(rng)));
      y.push_back(row);
    }
    const InverseWidthFit f = fit_inverse_width(x, y);
    ASSERT_TRUE(f.valid);
    EXPECT_EQ(f.e.dof, 5);
    covered_e += std::fabs(f.e.mean - e) <= f.e.half_width;
    covered_c += std::fabs(f.c.mean - c) <= f.c.half_width;
  }
  const double cover_sd = std::sqrt(trials * 0.95 * 0.05);  // as in the slope fit's coverage test
  for (int covered : {covered_e, covered_c}) {
    EXPECT_GE(covered, 0.95 * trials - 4 * cover_sd);
    EXPECT_LE(covered, 0.95 * trials + 4 * cover_sd);
  }
  // Exact data: exact answers.
  std::vector<double> exact;
  for (double d : x) exact.push_back(2.0 * std::pow(d, -0.5) * std::exp(30.0 / d));
  const InverseWidthFit f = fit_inverse_width(x, {exact, exact});
  ASSERT_TRUE(f.valid);
  EXPECT_NEAR(f.e.mean, -0.5, 1e-9);
  EXPECT_NEAR(f.c.mean, 30.0, 1e-6);
  // What it cannot fit: 3 widths (no residual), one seed, a value <= 0.
  EXPECT_FALSE(fit_inverse_width({64, 128, 256}, {{1, 2, 3}, {1, 2, 3}}).valid);
  EXPECT_FALSE(fit_inverse_width(x, {exact}).valid);
  std::vector<double> bad = exact;
  bad[2] = 0;
  EXPECT_FALSE(fit_inverse_width(x, {exact, bad}).valid);
}

namespace {

// A user's chain of two hidden matrices under mup / Adam, judged from planted series
// (judge_own_coordcheck): W' of "curved" is d^-1 (1 + 60/d) at steps 2 and 3 (a finite-width
// term that shrinks as 1/d, the theory's exponent -1 past it), W' of "wrong" d^-1/2 (another
// exponent, with no curvature to explain it).
// The planted checks' input: hidden matrices `names` under mup / Adam, 4 seeds, a probe of 8 + 8.
OwnCoordInput mup_adam_hidden(int steps, const std::vector<std::string>& names) {
  OwnCoordInput in;
  in.table = preset("mup");
  in.optimizer = "adam";
  in.seeds = {0, 1, 2, 3};
  in.steps = steps;
  in.n_probe = 8;
  in.n_out = 8;
  for (const std::string& n : names) in.layers.push_back({n, true, Role::Hidden, false, false});
  return in;
}

CoordCheckResult planted_own_check(const std::vector<int>& widths) {
  OwnCoordInput in = mup_adam_hidden(3, {"curved", "wrong"});
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (int w : widths)
    for (int64_t s : in.seeds) {
      CoordRun run;
      run.width = w;
      run.seed = s;
      run.loss = {1, 1, 1, 1};
      CoordSeries curved{CoordQuantity::WGrad, "curved", {}, {w, w}}, wrong{CoordQuantity::WGrad, "wrong", {}, {w, w}};
      for (int t = 0; t <= 3; ++t) {
        const double finite = t >= 2 ? 1 + 60.0 / w : 1.0;
        curved.rms.push_back(finite / w * std::exp(noise(rng)));
        wrong.rms.push_back(std::pow(w, -0.5) * std::exp(noise(rng)));
      }
      run.series = {curved, wrong};
      in.runs.push_back(run);
    }
  return judge_own_coordcheck(in);
}

const CoordRow& row_of(const CoordCheckResult& r, const std::string& layer, int step) {
  for (const CoordRow& row : r.rows)
    if (row.layer == layer && row.step == step && row.q == CoordQuantity::WGrad) return row;
  throw std::runtime_error("no row " + layer);
}

}  // namespace

TEST(CoordCheck, AMissThatShrinksAs1OverDMatchesPastTheFiniteWidthTerm) {
  const CoordCheckResult r = planted_own_check({64, 128, 256, 512, 1024});
  for (int t : {0, 1}) {  // no finite-width term planted: matches as before, no second look
    EXPECT_TRUE(*row_of(r, "curved", t).matches);
    EXPECT_FALSE(row_of(r, "curved", t).matches_past_finite_width);
  }
  for (int t : {2, 3}) {
    const CoordRow& row = row_of(r, "curved", t);
    ASSERT_EQ(*row.predicted, -1.0);
    EXPECT_GT(std::fabs(row.fit.slope + 1), row.tolerance);  // the plain slope misses ...
    EXPECT_TRUE(*row.matches);                               // ... and the exponent past 1/d matches
    EXPECT_TRUE(row.matches_past_finite_width);
    // (1 + 60/d) is not exp(c/d): its d^-2 term biases e by up to next_order, which is allowed.
    EXPECT_LE(std::fabs(row.past_finite_width.e.mean + 1), row.past_finite_width.e.half_width +
                                                               row.past_finite_width.next_order);
    // Another exponent is not explained away: no resolved 1/d term, e stays -1/2.
    const CoordRow& other = row_of(r, "wrong", t);
    EXPECT_FALSE(*other.matches);
    EXPECT_FALSE(other.matches_past_finite_width);
  }
  const std::string text = render_coordcheck(r);
  EXPECT_NE(text.find("(2 past the 1/d term: yes*)"), std::string::npos) << text;
  EXPECT_NE(text.find("W' curved step 3: slope"), std::string::npos) << text;
  const nlohmann::json j = coordcheck_to_json(r);
  bool seen = false;
  for (const auto& jr : j["rows"])
    if (jr["layer"] == "curved" && jr["step"] == 3 && jr.contains("past_finite_width"))
      seen = jr["past_finite_width"]["matches"].get<bool>();
  EXPECT_TRUE(seen) << j["rows"].dump();
  EXPECT_FALSE(r.pass());  // "wrong" still fails the check
  // Three widths leave no residual to resolve the term: no second look, the miss stands.
  const CoordCheckResult three = planted_own_check({64, 128, 256});
  EXPECT_FALSE(*row_of(three, "curved", 3).matches);
  EXPECT_FALSE(row_of(three, "curved", 3).past_finite_width.valid);
}

namespace {

// Judges W' series of hidden matrices under mup / Adam (predicted d^-1 at every step), widths
// 64..1024, 4 seeds, 1 step; values[layer][width index][seed] is the RMS at both steps. Fixed
// numbers, not a generator: the fixtures below were drawn once (d^-p (1 + a/d) e^N(0, sd)) and kept,
// so they are the same on every standard library.
CoordCheckResult judge_fixed(const std::vector<std::pair<std::string, std::vector<std::vector<double>>>>& values) {
  std::vector<std::string> names;
  for (const auto& [name, v] : values) names.push_back(name);
  OwnCoordInput in = mup_adam_hidden(1, names);
  const std::vector<int> widths = {64, 128, 256, 512, 1024};
  for (size_t i = 0; i < widths.size(); ++i)
    for (int64_t s : in.seeds) {
      CoordRun run;
      run.width = widths[i];
      run.seed = s;
      run.loss = {1, 1};
      for (const auto& [name, v] : values) {
        const double y = v[i][static_cast<size_t>(s)];
        run.series.push_back({CoordQuantity::WGrad, name, {y, y}, {widths[i], widths[i]}});
      }
      in.runs.push_back(run);
    }
  return judge_own_coordcheck(in);
}

std::vector<std::vector<double>> exact(double p) {  // d^-p at every seed
  std::vector<std::vector<double>> v;
  for (int w : {64, 128, 256, 512, 1024}) v.push_back(std::vector<double>(4, std::pow(w, -p)));
  return v;
}

}  // namespace

// Zero at every width and seed is a state (a frozen tensor), reported and not judged; zero at one
// width only is a measurement the fit cannot take, and fails. (Issue 63: judging the second as the
// first, a state, left every coordinate-check test green.)
TEST(CoordCheck, ZeroAtOneWidthIsAFailureNotTheZeroState) {
  std::vector<std::vector<double>> gap = exact(1.0);
  gap[0] = {0, 0, 0, 0};  // width 64 only
  const CoordCheckResult r = judge_fixed({{"gap", gap}, {"frozen", std::vector<std::vector<double>>(5, {0, 0, 0, 0})},
                                          {"fine", exact(1.0)}});
  for (int t : {0, 1}) {
    EXPECT_FALSE(row_of(r, "gap", t).zero) << "zero at one width judged zero at every width";
    EXPECT_FALSE(row_of(r, "gap", t).matches.value_or(false));
    EXPECT_TRUE(row_of(r, "frozen", t).zero);
    EXPECT_FALSE(row_of(r, "frozen", t).predicted.has_value());
    EXPECT_TRUE(*row_of(r, "fine", t).matches);
  }
  EXPECT_FALSE(r.pass());
  ASSERT_EQ(r.failures.size(), 1u) << render_coordcheck(r);
  EXPECT_NE(r.failures[0].find("gap"), std::string::npos) << r.failures[0];
  // The frozen tensor alone is no failure.
  EXPECT_TRUE(judge_fixed({{"frozen", std::vector<std::vector<double>>(5, {0, 0, 0, 0})}, {"fine", exact(1.0)}}).pass());
}

// The second look past the 1/d term has two guards, each held by a row only it rejects (issue 63:
// dropping either changed no test). "unresolved" misses d^-1 by its plain slope (-1.08, tolerance
// 0.07) and its exponent past a 1/d term (-1.04 +- 0.07) would match, but the term itself is not
// resolved (c = +9 +- 14): not a match, and the line says the term is unresolved. "other_exponent"
// (d^-0.7 (1 + 60/d)) has a resolved term, and past it an exponent of -0.75 +- 0.01: 0.25 from the
// prediction, inside ten times the allowed miss but not inside it.
TEST(CoordCheck, TheSecondLookNeedsAResolvedTermAndItsOwnTolerance) {
  const std::vector<std::vector<double>> unresolved = {
      {0.020628358781942271, 0.019900552695691309, 0.020273896255833101, 0.018045451591439079},
      {0.0091307034448728092, 0.0091026972249706097, 0.0089588663287757993, 0.0092093778550951504},
      {0.0041175511458005302, 0.0038617422919554698, 0.0046057051947513998, 0.0039528202507810896},
      {0.00204103238636048, 0.00216743490801423, 0.0019554448439233901, 0.00210147060400703},
      {0.00097858009898401993, 0.00097927159267116007, 0.00095337970685211999, 0.00098872560652607001}};
  const std::vector<std::vector<double>> other_exponent = {
      {0.1046153370255907, 0.10391438182747235, 0.10445912989676523, 0.10598690774691977},
      {0.049121595749449028, 0.04901323435331733, 0.049255966901267503, 0.049548424748353102},
      {0.02550094416492921, 0.025322556284014971, 0.02560761037488736, 0.025346074583180521},
      {0.01435804800011669, 0.014172447508026169, 0.01403920879735529, 0.013976921808063789},
      {0.0082626687088085404, 0.0082715751736397499, 0.0082585767328929496, 0.0082669654195849894}};
  const CoordCheckResult r = judge_fixed({{"unresolved", unresolved}, {"other_exponent", other_exponent}});
  for (int t : {0, 1}) {
    const CoordRow& u = row_of(r, "unresolved", t);
    ASSERT_TRUE(u.past_finite_width.valid);
    const InverseWidthFit& f = u.past_finite_width;
    EXPECT_GT(std::fabs(u.fit.slope + 1), u.tolerance);                     // the plain slope misses
    EXPECT_LE(std::fabs(f.c.mean), f.c.half_width);                          // the term is not resolved
    EXPECT_LE(std::fabs(f.e.mean + 1), f.e.half_width + f.next_order);       // though e past it would match
    EXPECT_FALSE(*u.matches);
    EXPECT_FALSE(u.matches_past_finite_width);
    const CoordRow& o = row_of(r, "other_exponent", t);
    const InverseWidthFit& g = o.past_finite_width;
    ASSERT_TRUE(g.valid);
    EXPECT_GT(std::fabs(g.c.mean), g.c.half_width);                          // a resolved term
    const double miss = std::fabs(g.e.mean + 1);
    EXPECT_GT(miss, g.e.half_width + g.next_order);                          // outside the allowed miss
    EXPECT_LT(miss, 10 * (g.e.half_width + g.next_order));                   // inside ten times it
    EXPECT_FALSE(*o.matches);
    EXPECT_FALSE(o.matches_past_finite_width);
  }
  const std::string text = render_coordcheck(r);
  EXPECT_NE(text.find("the term unresolved (c = +9 +- 14)"), std::string::npos) << text;
  EXPECT_NE(text.find("past the 1/d term e = -0.75 +- 0.01 still misses"), std::string::npos) << text;
}

// The readout's init term (coord_judge.cpp readout_init_bound; docs/coordcheck.md). A two-layer
// own model: "hid" (a hidden activation, h_0 = 1, dh_1 = 0.25 at every width) feeds the readout
// "head", whose init logits are 4 d^-1/2 (0.5 at width 64). The planted change of the logits is
// sqrt(K^2 + I^2), I = h_0(head) dh(hid) / h_0(hid) = d^-1/2 the init readout times the features'
// change: half the power at 64, a fifth at 256. Over 64..256 a flat K = 0.125 gives a total slope of
// -0.17, which missed 0 (tolerance 0.06); the bound allows -(1/2) ln(1 - 1/2) / ln 4 = 0.25 more
// below, so it matches. "decaying" (K = 0.125 (64/d)^1/2, a real d^-1/2: the total falls -0.5)
// still misses, and "rising" (K ~ d^+1/2) is unstable as before: nothing is allowed above.
namespace {
// A planted two-layer own model ("hid" feeds the readout "head"), one step, judged at widths 64,
// 128, 256 over `seeds`: series(w, s) gives each run's series.
CoordCheckResult planted_readout_check(const std::vector<int64_t>& seeds,
                                       const std::function<std::vector<CoordSeries>(int, int64_t)>& series) {
  OwnCoordInput in;
  in.table = preset("mup");
  in.optimizer = "adam";
  in.seeds = seeds;
  in.steps = 1;
  in.n_probe = 8;
  in.n_out = 8;
  in.layers = {{"hid", false, Role::Hidden, false, false}, {"head", false, Role::Readout, false, false}};
  for (int w : {64, 128, 256})
    for (int64_t s : in.seeds) {
      CoordRun run;
      run.width = w;
      run.seed = s;
      run.loss = {1, 1};
      run.series = series(w, s);
      in.runs.push_back(run);
    }
  return judge_own_coordcheck(in);
}

// The judged dh row of the readout at step 1, or nullptr.
const CoordRow* readout_dh(const CoordCheckResult& r) {
  for (const CoordRow& row : r.rows)
    if (row.q == CoordQuantity::DH && row.layer == "head" && row.step == 1) return &row;
  return nullptr;
}
}  // namespace

TEST(CoordCheck, TheReadoutsInitTermBoundsTheSlopeBelowOnly) {
  for (const double k_exp : {0.0, -0.5, 0.5}) {
    SCOPED_TRACE(k_exp);
    const CoordCheckResult r = planted_readout_check({0, 1, 2}, [k_exp](int w, int64_t s) {
      const double jitter = 1 + 0.002 * static_cast<double>(s);  // seeds differ a little: a finite SE
      const double h0 = 4 / std::sqrt(double(w)), dx = 0.25, init = h0 * dx;
      const double k = 0.125 * std::pow(w / 64.0, k_exp) * jitter;
      return std::vector<CoordSeries>{{CoordQuantity::H, "hid", {1, 1}, {w}},
                                      {CoordQuantity::DH, "hid", {0, dx}, {w}},
                                      {CoordQuantity::H, "head", {h0, std::sqrt(h0 * h0 + k * k)}, {8}},
                                      {CoordQuantity::DH, "head", {0, std::sqrt(k * k + init * init)}, {8}}};
    });
    const CoordRow* dh = readout_dh(r);
    ASSERT_NE(dh, nullptr);
    ASSERT_TRUE(dh->predicted.has_value());
    EXPECT_EQ(*dh->predicted, 0.0);
    EXPECT_NEAR(dh->below, 0.25, 1e-9);  // K = I at width 64 in every case
    EXPECT_NE(dh->maps_to.find("; below it up to 0.25 more: W_0 dx's part independent of W_0 (at most 50% of the "
                               "power at width 64, measured through hid)"),
              std::string::npos)
        << dh->maps_to;
    if (k_exp == 0.0) {
      EXPECT_NEAR(dh->fit.slope, -0.1695, 0.001);
      EXPECT_GT(-dh->fit.slope, dh->tolerance);  // a miss without the bound
      EXPECT_TRUE(*dh->matches) << render_coordcheck(r);
      EXPECT_TRUE(*dh->stable);
    } else if (k_exp < 0) {
      EXPECT_NEAR(dh->fit.slope, -0.5, 0.001);
      EXPECT_FALSE(*dh->matches) << render_coordcheck(r);
    } else {
      EXPECT_GT(dh->fit.slope, dh->tolerance);
      EXPECT_FALSE(*dh->matches);
      EXPECT_FALSE(*dh->stable);
    }
  }
  // No allowance, each for its own reason: the feeding activation's dh not measured, or the bound
  // at least the whole change at the smallest width (it then says nothing).
  for (const bool measured : {false, true}) {
    SCOPED_TRACE(measured);
    const CoordCheckResult r = planted_readout_check({0, 1}, [measured](int w, int64_t s) {
      const double h0 = 4 / std::sqrt(double(w)), dx = 0.25, init = h0 * dx, jitter = 1 + 0.002 * double(s);
      std::vector<CoordSeries> series{{CoordQuantity::H, "hid", {1, 1}, {w}}, {CoordQuantity::H, "head", {h0, h0}, {8}},
                                      {CoordQuantity::DH, "head", {0, 0.5 * init * jitter}, {8}}};  // below I: F >= 1
      if (measured) series.push_back({CoordQuantity::DH, "hid", {0, dx}, {w}});
      return series;
    });
    const CoordRow* dh = readout_dh(r);
    ASSERT_NE(dh, nullptr);
    EXPECT_EQ(dh->below, 0.0);
    EXPECT_NE(dh->maps_to.find(measured ? "may be the whole change at width 64: no allowance"
                                        : "h and dh of hid (what feeds the readout) were not measured"),
              std::string::npos)
        << dh->maps_to;
  }
}

// ---- the checks --------------------------------------------------------------------------------

TEST(CoordCheck, MupAndMfPassOnBigram) {
  for (const char* param : {"mup", "mf"}) {
    SCOPED_TRACE(param);
    const CoordCheckResult r = run_coordcheck(small_check("bigram", param));
    EXPECT_TRUE(r.pass()) << failures_text(r);
    // Every layer of the bigram maps onto the theory. Its 4 matrices (emb, layers.0, layers.1,
    // readout) have W' and ||W|| at steps 0..3 (4 x 4 each) and dW and ||dW|| at steps 1..3 (4 x 3
    // each); its 4 activations (h1, h2, h3, logits) h' at steps 0..3 (16), dh at 1..3 (12) and h at
    // 0..3 (16) but for the logits' h at steps 1..3, which mixes h_0 ~ d^-1/2 with dh ~ d^0 (13):
    // 16 + 16 + 12 + 12 + 16 + 12 + 13 = 97 rows.
    EXPECT_EQ(predicted_rows(r), 97);
    for (const auto& row : r.rows)
      if (row.predicted) {
        EXPECT_TRUE(row.matches.value_or(false)) << row.layer << " " << coord_quantity_name(row.q);
      }
  }
}

TEST(CoordCheck, MupAndMfPassOnGpt) {
  for (const char* param : {"mup", "mf"}) {
    SCOPED_TRACE(param);
    const CoordCheckResult r = run_coordcheck(small_check("gpt", param));
    EXPECT_TRUE(r.pass()) << failures_text(r);
    // The residual stream has predictions (h and dh at every step) and they hold.
    int stream = 0;
    for (const auto& row : r.rows)
      if ((row.layer == "block1" || row.layer == "block2") &&
          (row.q == CoordQuantity::H || row.q == CoordQuantity::DH)) {
        ASSERT_TRUE(row.predicted.has_value()) << row.layer << " step " << row.step;
        EXPECT_TRUE(row.matches.value_or(false));
        ++stream;
      }
    EXPECT_EQ(stream, 2 * (4 + 3));
  }
}

// The Llama decoder (engine/models/llama.cpp): RMSNorm, SwiGLU, rotary, grouped-query attention. Under mup
// every predicted row holds; under standard the updates grow with width and the check names the
// stream and the logits. Also with 2 key/value heads (GQA) and QK-norm. (completep on this grid,
// widths 64..256 at depth 2 of base 4: one row, ||dW|| of block 0's W_q at step 1, measures -0.20
// against 0 with tolerance 0.15; the GPT passes there. Not yet explained: not asserted either way.)
TEST(CoordCheck, LlamaPassesUnderMupAndFailsUnderStandard) {
  {
    const CoordCheckResult r = run_coordcheck(small_check("llama", "mup"));
    EXPECT_TRUE(r.pass()) << failures_text(r);
    EXPECT_GT(predicted_rows(r), 200);
  }
  CoordCheckConfig gqa = small_check("llama", "mup");
  gqa.train.model.kv_heads = 2;
  gqa.train.model.qk_norm = true;
  const CoordCheckResult g = run_coordcheck(gqa);
  EXPECT_TRUE(g.pass()) << failures_text(g);
  const CoordCheckResult r = run_coordcheck(small_check("llama", "standard"));
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(has_failure(r, "dh block1 ", "unstable")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "dh logits ", "unstable")) << failures_text(r);
}

// The mixture of experts (docs/moe.md): under mup-moe and completep-moe its stream, experts and
// router follow the theory (the router as a readout of the normalised stream, its update
// noise-like: dz ~ d^-1/2); under standard the router's logits and the stream move like d^1 after
// one Adam step, and the check names them. (Under `scaleinv coordcheck`'s default probe the logits'
// dh measures -0.27 at widths 64..256 against 0, a shortfall the dense Llama shows too, smaller:
// docs/moe.md "What is checked". Here it passes; no other row may fail.)
TEST(CoordCheck, MoePassesUnderMupMoeAndNamesTheRouterUnderStandard) {
  for (const char* param : {"mup-moe", "completep-moe"}) {
    CoordCheckConfig cc = small_check("moe", param);
    cc.train.model.experts = 4;
    const CoordCheckResult r = run_coordcheck(cc);
    EXPECT_TRUE(r.pass()) << param << "\n" << failures_text(r);
    int router_rows = 0, expert_rows = 0;
    for (const auto& row : r.rows) {
      if (!row.predicted) continue;
      router_rows += row.layer.find("router") != std::string::npos;
      expert_rows += row.layer.find("mlp.gate") != std::string::npos;
      if (row.layer.find("router") != std::string::npos || row.layer.find("mlp.") != std::string::npos) {
        EXPECT_TRUE(row.matches.value_or(false)) << param << " " << row.layer << " " << coord_quantity_name(row.q);
      }
    }
    EXPECT_GT(router_rows, 20) << param;  // router1/2 h, dh; W_r dW, ||W||, ||dW||
    EXPECT_GT(expert_rows, 10) << param;  // the stacked experts' W', dW, ||W||, ||dW||
  }
  CoordCheckConfig cc = small_check("moe", "standard");
  cc.train.model.experts = 4;
  const CoordCheckResult r = run_coordcheck(cc);
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(has_failure(r, "dh router1 ", "unstable")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "dh block1 ", "unstable")) << failures_text(r);
}

// Issue 59's command as a new user ran it: `coordcheck --model moe --param mup-moe --optimizer adam
// --widths 64,128,256 --steps 3 --seeds 2 --strict` (8 experts, the defaults) exited 1 on two rows:
// dh logits at step 1 (-0.29, tolerance 0.19) and ||dW|| of block 1's W_k at step 2 (-0.19, 0.18).
// The first is the readout's init term, now bounded from the same runs (an allowance below 0 only);
// the second counts W_k's gradient terms per attended pair, 2 x 8 x 9 / 2 = 72, not per position.
TEST(CoordCheck, TheIssuesMoeCommandPassesUnderMupMoeAndFailsUnderStandard) {
  CoordCheckConfig cc = small_check("moe", "mup-moe");
  cc.seeds = {0, 1};
  const CoordCheckResult r = run_coordcheck(cc);
  EXPECT_TRUE(r.pass()) << failures_text(r);
  EXPECT_EQ(r.n_pairs, 72);
  bool saw_logits = false, saw_k = false;
  for (const auto& row : r.rows) {
    if (row.q == CoordQuantity::DH && row.layer == "logits" && row.step == 1) {
      saw_logits = true;
      EXPECT_GT(row.below, 0.2) << row.maps_to;  // about half the power at width 64
      EXPECT_LT(row.fit.slope, -row.tolerance);  // a miss without the allowance
    }
    if (row.q == CoordQuantity::DWSpec && row.layer == "blocks.1.attn.k.weight" && row.step == 2) {
      saw_k = true;
      EXPECT_NEAR(row.finite_term, finite_size_term(64, 256, 72 + 32), 1e-12);
    }
    if (row.q == CoordQuantity::DWSpec && row.layer == "blocks.1.attn.v.weight") {
      EXPECT_NEAR(row.finite_term, finite_size_term(64, 256, 16 + 32), 1e-12);
    }
  }
  EXPECT_TRUE(saw_logits && saw_k);
  const CoordCheckResult st = run_coordcheck(small_check("moe", "standard"));
  EXPECT_FALSE(st.pass());
  EXPECT_TRUE(has_failure(st, "dh logits ", "unstable")) << failures_text(st);
}

// The expert-count axis (--experts; coord_result.h "Along the expert count E"): under mup-moe (Adam,
// experts_lr 0) every predicted row matches, among them the routed tensors' W' at init (E^-1/2) and
// their first update (E^0); with the LR of router and experts growing like E (experts_lr.adam = -1)
// the stream's and the router's dh grow with E and the check says so.
TEST(CoordCheck, MoeExpertAxisPassesUnderMupMoeAndFailsWhenTheLrGrowsWithE) {
  CoordCheckConfig cc = small_check("moe", "mup-moe");
  cc.widths = {64};
  cc.experts = {4, 8, 16, 32};
  const CoordCheckResult good = run_coordcheck(cc);
  EXPECT_TRUE(good.pass()) << failures_text(good);
  EXPECT_EQ(good.n_assign, 2 * 8 * 2);  // batch 2 x 8 positions, top-2
  int routed_w = 0, routed_dw = 0;
  for (const auto& row : good.rows) {
    ASSERT_EQ(row.axis, "experts");
    const bool routed = row.layer.find("router.weight") != std::string::npos || row.layer.find("mlp.gate") != std::string::npos;
    if (routed && row.q == CoordQuantity::WGrad && row.step == 0) {
      EXPECT_EQ(row.predicted.value_or(9), -0.5) << row.layer;
      EXPECT_TRUE(row.matches.value_or(false)) << row.layer;
      ++routed_w;
    }
    if (routed && row.q == CoordQuantity::DW && row.step == 1) {
      EXPECT_EQ(row.predicted.value_or(9), 0.0) << row.layer;
      EXPECT_TRUE(row.matches.value_or(false)) << row.layer;
      ++routed_dw;
    }
  }
  EXPECT_EQ(routed_w, 4);   // two routers, two blocks' gate stacks
  EXPECT_EQ(routed_dw, 4);

  ParamTable bad = preset("mup-moe");
  bad.name = "lr-grows-with-E";
  bad.row(Role::Router).experts_lr[static_cast<int>(OptFamily::Adam)] = -1;
  bad.row(Role::Expert).experts_lr[static_cast<int>(OptFamily::Adam)] = -1;
  const std::string file = scaleinv::testing::temp_dir("coordcheck_experts") + "/bad.toml";
  write_file_atomic(file, param_to_toml(bad));
  cc.train.param = file;
  const CoordCheckResult r = run_coordcheck(cc);
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(has_failure(r, "dh block1 (experts", "unstable")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "dh router2 (experts", "")) << failures_text(r);
}

// --experts belongs to a mixture, and every count must hold top_k.
TEST(CoordCheck, ExpertAxisBadInput) {
  CoordCheckConfig dense = small_check("gpt", "mup");
  dense.experts = {4, 8};
  CoordCheckConfig moe = small_check("moe", "mup-moe");
  moe.experts = {1, 8};  // top_k = 2
  for (const CoordCheckConfig& cc : {dense, moe}) {
    try {
      run_coordcheck(cc);
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--experts"), std::string::npos) << e.what();
    }
  }
}

// A tied readout (model.tied) has no predicted exponent for the logits at init (seed 002 footnote
// 19: the own token's contact term); from the first update on, the untied predictions are judged.
TEST(CoordCheck, TiedReadoutLogitsAtInitAreNotPredicted) {
  CoordCheckConfig cc = small_check("gpt", "mup");
  cc.train.model.tied = true;
  const CoordCheckResult r = run_coordcheck(cc);
  EXPECT_TRUE(r.pass()) << failures_text(r);
  int judged_later = 0;
  for (const auto& row : r.rows) {
    if (row.layer == "logits" && row.q == CoordQuantity::H && row.step == 0) {
      EXPECT_FALSE(row.predicted.has_value());
      EXPECT_NE(row.maps_to.find("footnote 19"), std::string::npos) << row.maps_to;
    }
    if (row.layer == "logits" && row.q == CoordQuantity::DH && row.step >= 1 && row.predicted) {
      EXPECT_TRUE(row.matches.value_or(false)) << "step " << row.step;
      ++judged_later;
    }
  }
  EXPECT_EQ(judged_later, 3);  // dh of the logits at steps 1..3, predicted as untied (d^0)
}

TEST(CoordCheck, StandardMatchesTheoryButIsUnstable) {
  const CoordCheckResult r = run_coordcheck(small_check("bigram", "standard"));
  EXPECT_FALSE(r.pass());
  // Everything the theory predicts is measured (the theory predicts the growth). For an unstable
  // parameterization it predicts steps 0 and 1 (init and one update) and no row fed by an update
  // that already grows (those compound only once eta*d >> 1). Step 0: W' and ||W|| of the 4
  // matrices, h and h' of the 4 activations (16). Step 1: dW and ||dW|| of the 4 matrices (8), dh
  // of h1 and h2 (h3 and the logits are fed by growth), and h of h1, whose h_0 and dh share one
  // exponent (h2's mix two): 27 rows.
  EXPECT_EQ(predicted_rows(r), 27);
  for (const auto& row : r.rows)
    if (row.predicted) {
      EXPECT_TRUE(row.matches.value_or(false)) << row.layer << " " << coord_quantity_name(row.q) << " step " << row.step;
    }
  for (const auto& f : r.failures) EXPECT_EQ(f.find("deviates"), std::string::npos) << f;
  // ...and the updates that grow with width are named unstable: the first hidden layer's output
  // (eq. 25: a+c = 0 < alpha = 1, dh_2 ~ d) and everything downstream, the logits included.
  EXPECT_TRUE(has_failure(r, "dh h2 ", "unstable")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "dh h3 ", "unstable")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "dh logits ", "unstable")) << failures_text(r);
  for (const auto& row : r.rows)
    if (row.q == CoordQuantity::DH && row.layer == "h2" && row.step == 1) {
      ASSERT_TRUE(row.predicted.has_value());
      EXPECT_DOUBLE_EQ(*row.predicted, 1.0);
      EXPECT_TRUE(row.matches.value_or(false));
      EXPECT_FALSE(row.stable.value_or(true));
    }
}

TEST(CoordCheck, BrokenReadoutDeviatesAndIsNamed) {
  CoordCheckConfig cc = small_check("bigram", "mup");
  cc.break_mode = "readout-multiplier";
  const CoordCheckResult r = run_coordcheck(cc);
  EXPECT_FALSE(r.pass());
  // Without the readout's d^-1/2 the logits start Theta(1) instead of d^-1/2 and the readout's
  // gradient (and every gradient below it) is d^1/2 too large. (The logits' update grows like
  // d^1/2 too; over widths 64..256 its measured slope, +0.3, is within the tolerance of both 0
  // and 1/2, so it is told apart only over a wider range: see docs/coordcheck.md's 64..1024 run.)
  EXPECT_TRUE(has_failure(r, "h logits ", "deviates")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "W' readout.weight ", "deviates")) << failures_text(r);
  EXPECT_TRUE(has_failure(r, "h' h3 ", "deviates")) << failures_text(r);
  // The hidden activations and their updates are untouched (Adam's update ignores the gradient scale).
  EXPECT_FALSE(has_failure(r, "dh h2 ", "")) << failures_text(r);
  EXPECT_FALSE(has_failure(r, "h h1 ", "")) << failures_text(r);
}

TEST(CoordCheck, Table2InitExponentsWithAndWithoutRmsNorm) {
  // seed 000 Table 2: the init exponents of h, h', W' for (sigma_0^2, sigma_L+1^2) in
  // {(1, 1/d), (1/d, 1/d), (1, 1)}, with and without RMSNorm between layers, measured at step 0.
  const std::string dir = temp_dir("coordtable2");
  const double rows[3][2] = {{0.0, 0.5}, {0.5, 0.5}, {0.0, 0.0}};  // (b_0, b_L+1)
  for (bool rmsnorm : {false, true})
    for (const auto& row : rows) {
      SCOPED_TRACE(fmt::format("rmsnorm {} b0 {} bR {}", rmsnorm, row[0], row[1]));
      ParamTable t = preset("sp");
      t.name = "table2";
      t.row(Role::Embedding).b = row[0];
      t.row(Role::Readout).b = row[1];
      const std::string path = dir + "/table2.toml";
      write_file_atomic(path, param_to_toml(t));
      CoordCheckConfig cc = small_check("bigram", path);
      cc.train.model.rmsnorm = rmsnorm;
      cc.steps = 1;
      const CoordCheckResult r = run_coordcheck(cc);
      int judged = 0;
      for (const auto& rr : r.rows)
        if (rr.step == 0 && rr.q != CoordQuantity::DW && rr.q != CoordQuantity::DH && rr.q != CoordQuantity::DWSpec) {
          ASSERT_TRUE(rr.predicted.has_value()) << rr.layer;
          EXPECT_TRUE(rr.matches.value_or(false))
              << coord_quantity_name(rr.q) << " " << rr.layer << ": " << rr.fit.slope << " vs " << *rr.predicted;
          ++judged;
        }
      // h of h1..h3 and logits; h' of the same; W' and ||W|| of the 4 matrices
      EXPECT_EQ(judged, 4 + 4 + 4 + 4);
    }
  scaleinv::remove_tree(dir);
}

TEST(CoordCheck, ResMlpAcrossDepth) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto check = [](const std::string& param) {
    CoordCheckConfig cc = small_check("resmlp", param);
    cc.train = train_config_from_toml_text(fmt::format(R"(
[model]
kind = "resmlp"
width = 128
in_dim = 784
activation = "relu"
pre_ln = true
[param]
name = "{}"
[optim]
kind = "adam"
[data]
source = "fashion_mnist"
flatten = true
[train]
batch_size = 32
)",
                                                       param),
                                           "test");
    cc.widths = {};
    cc.depths = {4, 8, 16, 32};
    cc.steps = 1;
    return run_coordcheck(cc);
  };
  // depth-mup (seed 004 Claim 5.5): the top of the stream and its one-step update are flat in depth.
  const CoordCheckResult mup = check("depth-mup");
  EXPECT_TRUE(mup.pass()) << failures_text(mup);
  int predicted = 0;
  for (const auto& row : mup.rows)
    if (row.predicted) {
      EXPECT_EQ(row.axis, "depth");
      EXPECT_DOUBLE_EQ(*row.predicted, 0.0);
      ++predicted;
    }
  EXPECT_EQ(predicted, 2 * 3);  // h of top and logits at steps 0 and 1, dh of both at step 1
  // standard (no branch multiplier): the top grows like sqrt(L) at init, as predicted, and is unstable.
  const CoordCheckResult std_ = check("standard");
  EXPECT_FALSE(std_.pass());
  for (const auto& row : std_.rows)
    if (row.layer == "top" && row.q == CoordQuantity::H && row.step == 0) {
      ASSERT_TRUE(row.predicted.has_value());
      EXPECT_DOUBLE_EQ(*row.predicted, 0.5);
      EXPECT_TRUE(row.matches.value_or(false)) << row.fit.slope;
      EXPECT_FALSE(row.stable.value_or(true));
    }
  EXPECT_TRUE(has_failure(std_, "h top (depth", "unstable")) << failures_text(std_);
}

TEST(CoordCheck, BadInputIsAUserError) {
  CoordCheckConfig cc = small_check("bigram", "mup");
  cc.widths = {64};
  EXPECT_THROW(run_coordcheck(cc), UserError);  // a slope needs two widths
  cc = small_check("gpt", "mup");
  cc.widths = {64, 72};  // 72 is not a multiple of head_dim 16
  EXPECT_THROW(run_coordcheck(cc), UserError);
  cc = small_check("bigram", "mup");
  cc.break_mode = "nonsense";
  EXPECT_THROW(run_coordcheck(cc), UserError);
  cc = small_check("bigram", "mup");
  cc.seeds.clear();
  EXPECT_THROW(run_coordcheck(cc), UserError);
  cc = small_check("mlp", "mup");
  EXPECT_THROW(run_coordcheck(cc), UserError);
  cc = small_check("bigram", "no-such-preset");
  EXPECT_THROW(run_coordcheck(cc), UserError);
}

TEST(CoordCheck, JsonAndPlots) {
  CoordCheckConfig cc = small_check("bigram", "mup");
  cc.widths = {64, 128};
  cc.seeds = {0, 1};
  cc.steps = 1;
  const CoordCheckResult r = run_coordcheck(cc);
  const nlohmann::json j = coordcheck_to_json(r);
  EXPECT_EQ(j.at("runs").size(), 4u);
  EXPECT_EQ(j.at("widths"), nlohmann::json({64, 128}));
  EXPECT_FALSE(j.at("rows").empty());
  EXPECT_TRUE(j.at("tolerance").contains("width_finite_term"));
  // Raw values: every run has h of the logits at steps 0 and 1.
  bool found = false;
  for (const auto& s : j.at("runs")[0].at("series"))
    if (s.at("quantity") == "h" && s.at("layer") == "logits") found = s.at("rms").size() == 2;
  EXPECT_TRUE(found);
  const std::string text = render_coordcheck(r);
  EXPECT_NE(text.find("tolerance = t_{0.975,S-1} * SE"), std::string::npos);
  EXPECT_NE(text.find("n = 16 + 32 = 48"), std::string::npos);
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = temp_dir("coordplot");
  const auto stems = plot_coordcheck(r, dir);
  ASSERT_EQ(stems.size(), 7u);  // h, dh, h', W', dW, ||W||, ||dW||
  const std::vector<std::string> suffixes = {"h", "dh", "hgrad", "wgrad", "dw", "wspec", "dwspec"};
  for (size_t i = 0; i < stems.size(); ++i) EXPECT_EQ(stems[i], dir + "/width_L2_" + suffixes[i]);
  for (const auto& stem : stems) {
    EXPECT_GT(std::filesystem::file_size(stem + ".svg"), 1000u) << stem;
    EXPECT_GT(std::filesystem::file_size(stem + ".png"), 1000u) << stem;
  }
  const std::string svg = read_file(dir + "/width_L2_dh.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  scaleinv::remove_tree(dir);
}

// ---- the CLI -----------------------------------------------------------------------------------

TEST(CoordCli, ExitCodes) {
  const std::string base = "coordcheck --model bigram --optimizer adam --widths 64,128,256 --steps 2 --seeds 3 --quiet";
  const auto pass = run_cli(base + " --param mup --strict");
  EXPECT_EQ(pass.code, 0) << pass.out << pass.err;
  EXPECT_NE(pass.out.find("PASS"), std::string::npos);

  const std::string dir = temp_dir("coordcli");
  const auto fail = run_cli(base + " --param standard --strict --json " + dir + "/cc.json");
  EXPECT_EQ(fail.code, 1) << fail.out << fail.err;
  // The last lines name each failed quantity and the verdict it failed.
  const std::string tail = fail.out.substr(fail.out.rfind("strict:"));
  EXPECT_NE(tail.find("FAILED dh h2 (width, depth 2): unstable"), std::string::npos) << tail;
  EXPECT_NE(tail.find("FAILED dh logits (width, depth 2): unstable"), std::string::npos) << tail;
  const nlohmann::json j = nlohmann::json::parse(read_file(dir + "/cc.json"));
  EXPECT_FALSE(j.at("pass").get<bool>());
  scaleinv::remove_tree(dir);

  // Without --strict the verdicts are reported but the exit code is 0.
  EXPECT_EQ(run_cli(base + " --param standard").code, 0);

  // Bad input: exit 2 with one line on stderr.
  for (const std::string& bad :
       {std::string("coordcheck --model bigram --widths ''"), std::string("coordcheck --model nope --widths 64,128"),
        std::string("coordcheck --model bigram --param nope --widths 64,128"),
        std::string("coordcheck --model bigram --optimizer nope --widths 64,128"),
        std::string("coordcheck --model gpt --widths 64,72"), std::string("coordcheck --model bigram --widths 64,x"),
        std::string("coordcheck --model bigram --widths 64,128 --break nope")}) {
    const auto r = run_cli(bad + " --quiet");
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << "\n" << r.err;
  }
}

// The muP paper's MLP (engine/models/mlp.cpp: 784 -> w -> w -> 10, ReLU, no bias) on Fashion-MNIST, the
// model microsoft/mup's coordinate check uses: mup passes, standard fails on the hidden layer's and
// the logits' change (seed 000: under standard Adam both grow with width).
TEST(CoordCli, MupPaperMlp) {
  const std::string base = "coordcheck --model mlp --optimizer adam --lr 0.01 --widths 128,256,512,1024 --steps 2 "
                           "--seeds 3 --quiet --strict";
  const auto pass = run_cli(base + " --param mup");
  EXPECT_EQ(pass.code, 0) << pass.out << pass.err;
  EXPECT_NE(pass.out.find("mlp: rows of width_theory(L = 1) one to one"), std::string::npos) << pass.out;
  const auto fail = run_cli(base + " --param standard");
  EXPECT_EQ(fail.code, 1) << fail.out << fail.err;
  const std::string tail = fail.out.substr(fail.out.rfind("strict:"));
  EXPECT_NE(tail.find("FAILED dh h2 (width, depth 1): unstable"), std::string::npos) << tail;
  EXPECT_NE(tail.find("FAILED dh logits (width, depth 1): unstable"), std::string::npos) << tail;
}

// spectral_norm (Lanczos on m^T m, stopped by its own convergence): a lower bound on the largest
// singular value, within 1% on an iid matrix (the slow case: its top singular values crowd
// together), exact when the rank is below the step count, NaN where undefined.
TEST(CoordCheck, SpectralNormIsALanczosLowerBoundExactAtLowRank) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({512, 256});
  const double exact = torch::linalg_svdvals(w.to(torch::kDouble))[0].item<double>();
  const double est = spectral_norm(w);
  EXPECT_LE(est, exact * (1 + 1e-5));
  EXPECT_GE(est, exact * (1 - 0.01)) << est << " vs " << exact;
  const torch::Tensor low = torch::randn({300, 3}).mm(torch::randn({3, 200}));
  EXPECT_NEAR(spectral_norm(low) / torch::linalg_svdvals(low.to(torch::kDouble))[0].item<double>(), 1.0, 1e-5);
  const torch::Tensor conv = torch::randn({8, 4, 3, 3});  // trailing dims flattened: [8, 36]
  EXPECT_NEAR(spectral_norm(conv) / torch::linalg_svdvals(conv.reshape({8, 36}).to(torch::kDouble))[0].item<double>(),
              1.0, 1e-5);
  EXPECT_EQ(spectral_norm(torch::zeros({16, 16})), 0.0);
  EXPECT_TRUE(std::isnan(spectral_norm(torch::full({4, 4}, NAN))));
  EXPECT_TRUE(std::isnan(spectral_norm(torch::ones({5}))));
}

// spectral_norm against torch::linalg_matrix_norm(ord 2) on the matrices the check meets: iid
// Gaussian (the slow case; measured 0.07% low at 128, 0.15% at 512, 0.65% at 2048), low rank plus
// noise (a clear gap: ~1e-8), sign-like updates as Adam's first steps make them (measured 1e-5 at
// 128..512, 0.2% at 2048), odd shapes, double, and a strided view, which takes the two-product
// path instead of the fused block-by-block product m^T (m x): the same estimate to rounding.
TEST(CoordCheck, SpectralNormMatchesMatrixNormOrd2) {
  torch::manual_seed(11);
  auto exact = [](const torch::Tensor& w) {
    return torch::linalg_matrix_norm(w.reshape({w.size(0), -1}).to(torch::kDouble), 2).item<double>();
  };
  const torch::Tensor iid = torch::randn({384, 256}), odd = torch::randn({301, 197});
  const torch::Tensor low = torch::randn({512, 6}).mm(torch::randn({6, 320})) + 0.05 * torch::randn({512, 320});
  const torch::Tensor sign = torch::sign(torch::randn({256, 512})) * 1e-2;
  for (const torch::Tensor& w : {iid, odd, sign, torch::randn({128, 128}).to(torch::kDouble)}) {
    const double e = exact(w), est = spectral_norm(w);
    EXPECT_LE(est, e * (1 + 1e-5)) << w.sizes();
    EXPECT_GE(est, e * (1 - 0.01)) << w.sizes();
  }
  EXPECT_NEAR(spectral_norm(low) / exact(low), 1.0, 1e-5);
  const torch::Tensor t = odd.t();  // [197, 301], column stride 197: the unfused path
  ASSERT_NE(t.stride(1), 1);
  EXPECT_NEAR(spectral_norm(t) / spectral_norm(t.contiguous()), 1.0, 1e-5);
  EXPECT_NEAR(spectral_norm(t) / exact(t), 1.0, 0.01);
}

// spectral_norm stops each matrix where its own convergence says it is within rel_tol (k/2 times the
// last rise of the estimate: the no-gap error falls as 1/k^2, ref. [lanczos-kw]): an iid matrix (no
// gap at the top) takes many steps and still lands within the tolerance; a matrix with a spike (a
// trained weight) or an Adam-like sign update of a low-rank gradient takes few, and lands far
// closer; a tighter tolerance takes more steps and lands closer; max_steps caps the count.
TEST(CoordCheck, SpectralNormStopsWithinItsToleranceByItsOwnConvergence) {
  torch::manual_seed(17);
  auto exact = [](const torch::Tensor& w) { return torch::linalg_svdvals(w.to(torch::kDouble))[0].item<double>(); };
  const torch::Tensor iid = torch::randn({1024, 1024}) / 32;
  const torch::Tensor u = torch::randn({1024, 1}), v = torch::randn({1, 1024});
  const torch::Tensor spiked = iid + 3.0 * u.mm(v) / (u.norm() * v.norm());
  const torch::Tensor sign = torch::sign(torch::randn({1024, 8}).mm(torch::randn({8, 768}))) * 1e-2;
  for (const torch::Tensor& w : {iid, spiked, sign}) {
    std::vector<int> taken;
    const double e = exact(w), est = spectral_norms(w.unsqueeze(0), 32, 1e-3, &taken)[0].item<double>();
    EXPECT_LE(est, e * (1 + 1e-5)) << w.sizes();
    EXPECT_GE(est, e * (1 - 1e-3)) << w.sizes();
    ASSERT_EQ(taken.size(), 1u);
    if (w.data_ptr() == iid.data_ptr()) {
      EXPECT_GT(taken[0], 10) << "an iid matrix converges slowly";
      std::vector<int> tight;
      const double close = spectral_norms(w.unsqueeze(0), 400, 1e-6, &tight)[0].item<double>();
      EXPECT_GT(tight[0], taken[0]);
      EXPECT_GE(close, e * (1 - 1e-5));
      std::vector<int> capped;
      spectral_norms(w.unsqueeze(0), 5, 1e-3, &capped);
      EXPECT_EQ(capped[0], 5);
    } else {
      EXPECT_LE(taken[0], 8) << w.sizes() << ": a gap at the top converges geometrically";
      EXPECT_GE(est, e * (1 - 1e-4)) << w.sizes();
    }
  }
  // Wide matrices with few rows (a [1, d] gate, a router [E, d], a [10, d] readout): m^T m has rank
  // rows, and rows + 1 steps reach its top (1 step gave a [1, 512] gate's |m q|, 0.95 against 23).
  // (Ten rows may stop by convergence first: within the tolerance, not exact.)
  for (int64_t r : {1, 2, 4, 10}) {
    const torch::Tensor wide = torch::randn({r, 512});
    EXPECT_LE(spectral_norm(wide) / exact(wide), 1.0 + 1e-5) << r << " rows";
    EXPECT_GE(spectral_norm(wide) / exact(wide), 1.0 - (r < 10 ? 1e-5 : 1e-3)) << r << " rows";
  }
  // A stack: each matrix stops on its own (the spiked one is not held to the iid one's count).
  std::vector<int> each;
  spectral_norms(torch::stack({iid, spiked}), 32, 1e-3, &each);
  EXPECT_GT(each[0], 10);
  EXPECT_LE(each[1], 8);
}

// spectral_norms: a stack of matrices at once (an expert stack), each as spectral_norm finds it
// alone, with a zero matrix (rank 0), a low-rank one (its recursion ends early while the others go
// on) and a non-finite one (NaN for it alone) in the same batch.
TEST(CoordCheck, SpectralNormsOfAStackMatchEachMatrixAlone) {
  torch::manual_seed(5);
  const torch::Tensor s = torch::stack({torch::randn({48, 32}), torch::zeros({48, 32}),
                                        torch::randn({48, 2}).mm(torch::randn({2, 32})), torch::full({48, 32}, NAN),
                                        torch::randn({48, 32}) * 100});
  const torch::Tensor each = spectral_norms(s);
  ASSERT_EQ(each.size(0), 5);
  for (int64_t e = 0; e < 5; ++e) {
    const double alone = spectral_norm(s[e]);
    if (e == 3) {
      EXPECT_TRUE(std::isnan(each[e].item<double>()) && std::isnan(alone));
      continue;
    }
    const double exact = torch::linalg_svdvals(s[e].to(torch::kDouble))[0].item<double>();
    EXPECT_NEAR(each[e].item<double>(), alone, 1e-5 * (1 + exact)) << "matrix " << e;
    EXPECT_LE(each[e].item<double>(), exact * (1 + 1e-5) + 1e-12) << "matrix " << e;
    EXPECT_GE(each[e].item<double>(), exact * (1 - 0.01)) << "matrix " << e;
  }
  EXPECT_EQ(each[1].item<double>(), 0.0);
  EXPECT_NEAR(each[2].item<double>() / torch::linalg_svdvals(s[2].to(torch::kDouble))[0].item<double>(), 1.0, 1e-5);
}

// The recorder's ||W|| of an expert stack is the largest of its matrices' norms, read back once; a
// matrix that is NaN makes the row NaN (a diverged expert is not hidden behind a finite maximum).
TEST(CoordCheck, StackNormIsTheLargestMatrixAndNaNWhereAnyMatrixIs) {
  torch::manual_seed(6);
  const torch::Tensor finite = torch::stack({torch::randn({24, 16}), torch::randn({24, 16}) * 3});
  torch::Tensor broken = finite.clone();
  broken[0].fill_(NAN);
  for (const bool nan : {false, true}) {
    CoordRecorder rec(0, 1u << static_cast<int>(CoordQuantity::WSpec), {"experts"});
    rec.record(0, {}, {{"experts", nan ? broken : finite}});
    ASSERT_EQ(rec.run().series.size(), 1u);
    const CoordSeries& s = rec.run().series[0];
    EXPECT_EQ(s.shape, (std::vector<int64_t>{24, 16}));
    if (nan) {
      EXPECT_TRUE(std::isnan(s.rms[0]));
    } else {
      const double exact = torch::linalg_svdvals(finite.to(torch::kDouble)).max().item<double>();
      EXPECT_NEAR(s.rms[0], exact, 1e-4 * exact);
    }
  }
}
