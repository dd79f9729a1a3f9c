// The joint law (brain/report/joint_law.h): a planted law in two axes recovered exactly with a batch size
// re-tuned in every cell, the near-optimal estimator, extrapolation along every axis widening the
// interval, declined targets, held-out cells against the baselines, the leave-one-scale-out
// coverage of noisy replicates, bad input (collinear axes named, one value, a target missing an
// axis), and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "planted_noise.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/report/joint_law.h"

using namespace scaleinv;

namespace {

// log2 LR* = kJointA + kJointN log2 N + kJointD log2 D (Step Law's form); the batch size's own optimum is at
// log2 bs = 4 + 0.5 log2(D / 2^30), off the LR's, so that re-tuning it matters.
constexpr double kJointA = 6.0, kJointN = -0.75, kJointD = 0.25;
double planted_joint(double n, double d) { return kJointA + kJointN * std::log2(n) + kJointD * std::log2(d); }

using scaleinv::testing::Noise;

// Cells at (N, D) with an LR grid in quarter-doublings around the planted optimum and batch sizes
// 2^2..2^8; the loss is quadratic in both (no interaction), plus noise of sd `sigma` on each cell's
// optimum (shifting the whole cell, the scatter the interval must cover) and none per run.
// `holes` drops every third run: a grid with holes.
SweepTable cells(const std::vector<std::pair<double, double>>& nd, double sigma, uint64_t seed, bool holes = false) {
  SweepTable t;
  t.db = "planted";
  t.hparam_axes = {"bs"};
  Noise noise{seed};
  int k = 0;
  for (const auto& [n, d] : nd) {
    const double opt = planted_joint(n, d) + sigma * noise.normal();
    const double bs_opt = 4 + 0.5 * std::log2(d / 1073741824.0);
    for (double x = std::round(opt * 4) / 4 - 3; x <= std::round(opt * 4) / 4 + 3 + 1e-9; x += 0.25)
      for (int b = 2; b <= 8; ++b) {
        if (holes && (k++ % 3 == 0)) continue;
        SweepRow r;
        r.param = "standard";
        r.width = r.depth = 0;
        r.lr_log2 = x;
        r.axes = {{"N", fmt::format("{:.17g}", n)}, {"D", fmt::format("{:.17g}", d)}, {"bs", std::to_string(1 << b)}};
        r.final_loss = 2.0 + 0.01 * (x - opt) * (x - opt) + 0.002 * (b - bs_opt) * (b - bs_opt);
        r.id = fmt::format("{}-{}-{}-{}", n, d, x, b);
        t.rows.push_back(r);
      }
  }
  return t;
}

std::vector<std::pair<double, double>> grid(std::vector<double> ns, std::vector<double> ds) {
  std::vector<std::pair<double, double>> out;
  for (double n : ns)
    for (double d : ds) out.emplace_back(n, d * n);  // D grows with N (tokens per parameter), not collinear
  return out;
}

const std::vector<double> kNs = {1e8, 2e8, 4e8, 8e8, 1.6e9};
const std::vector<double> kRatios = {10, 40, 160};

std::string error_of(const SweepTable& t, const JointLawOptions& o) {
  try {
    fit_joint_law(t, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JointLaw, RecoversAPlantedLawInTwoAxesWithTheBatchRetuned) {
  // The optimum sits on the quarter-doubling grid only up to rounding: the argmin is within 1/8
  // doubling of the planted value, so the coefficients are recovered within what that allows.
  const SweepTable t = cells(grid(kNs, kRatios), 0.0, 1);
  JointLawOptions o;
  o.axes = {"N", "D"};
  o.at = {{"N", 3.2e9}, {"D", 3.2e9 * 40}};
  const JointLawResult r = fit_joint_law(t, o);
  ASSERT_EQ(r.fits.size(), 1u);
  const JointLawFit& f = r.fits[0];
  EXPECT_EQ(f.n_cells, 15);
  EXPECT_EQ(f.retuned, std::vector<std::string>{"bs"});
  EXPECT_NEAR(f.coef[1], kJointN, 0.03);
  EXPECT_NEAR(f.coef[2], kJointD, 0.03);
  EXPECT_LE(f.residual_sd, 0.125);
  ASSERT_EQ(r.predictions.size(), 1u);
  const JointPrediction& p = r.predictions[0];
  EXPECT_EQ(p.status, "predicted");
  EXPECT_NEAR(p.value, planted_joint(3.2e9, 3.2e9 * 40), 0.2);
  EXPECT_LT(p.lo, p.value);  // (its coverage: the leave-one-scale-out test below, on noisy cells)
  EXPECT_GT(p.hi, p.value);
  // Its curvature is the planted 1% per doubling^2 (0.01 / 2.0 of the loss, in percent: 0.5%).
  EXPECT_NEAR(f.curvature, 0.5, 0.01);
}

TEST(JointLaw, TheIntervalWidensWithDistanceAlongEveryAxis) {
  const SweepTable t = cells(grid(kNs, kRatios), 0.3, 7);
  JointLawOptions o;
  o.axes = {"N", "D"};
  double last = 0;
  for (double n : {4e8, 1.6e9, 6.4e9}) {  // inside, at the edge, two doublings past it
    o.at = {{"N", n}, {"D", 4e8 * 40}};
    const JointPrediction p = fit_joint_law(t, o).predictions.at(0);
    ASSERT_EQ(p.status, "predicted") << p.status;
    EXPECT_GT(p.hi - p.lo, last) << n;
    last = p.hi - p.lo;
  }
  double last_d = 0;
  for (double d : {1.6e10, 6.4e10, 2.56e11}) {  // the same along D at N fixed
    o.at = {{"N", 4e8}, {"D", d}};
    const JointPrediction p = fit_joint_law(t, o).predictions.at(0);
    ASSERT_EQ(p.status, "predicted") << p.status;
    EXPECT_GT(p.hi - p.lo, last_d) << d;
    last_d = p.hi - p.lo;
  }
  o.at = {{"N", 1.6e9 * 16}, {"D", 4e8 * 40}};  // 4 doublings past: declined, naming the axis
  const JointPrediction p = fit_joint_law(t, o).predictions.at(0);
  EXPECT_NE(p.status.find("declined: N "), std::string::npos) << p.status;
  EXPECT_TRUE(std::isnan(p.value));
}

TEST(JointLaw, HeldOutCellsAreJudgedAgainstTheBaselinesOnAGridWithHoles) {
  const SweepTable t = cells(grid(kNs, kRatios), 0.0, 3, /*holes=*/true);
  JointLawOptions o;
  o.axes = {"N", "D"};
  o.holdout_upto = {{"N", 8e8}};
  o.near_optimal_pct = 0.05;
  o.reference = {{"c", std::exp2(kJointA)}, {"N", kJointN}, {"D", kJointD}};  // the planted law itself
  const JointLawResult r = fit_joint_law(t, o);
  ASSERT_EQ(r.predictions.size(), 3u);  // the three cells at N = 1.6e9
  double law_err = 0, carried_err = 0, law_regret = 0, carried_regret = 0;
  for (const JointPrediction& p : r.predictions) {
    EXPECT_TRUE(p.held_out);
    EXPECT_EQ(p.x.at("N"), 1.6e9);
    EXPECT_LE(std::fabs(p.error), 0.3);
    EXPECT_TRUE(p.covered);
    ASSERT_EQ(p.baselines.size(), 3u);
    // The planted law misses by the grid's rounding (1/8 doubling) and a hole next to the cell's
    // best run (1/4) at most; carrying the largest fitted N's LR one doubling of N (and D) up
    // misses by kJointN + kJointD = -0.5 per doubling, give or take the same rounding.
    EXPECT_LE(std::fabs(p.baselines[2].error), 0.25 + 1e-9);
    law_err += std::fabs(p.error), carried_err += std::fabs(p.baselines[0].error);
    law_regret += p.regret, carried_regret += p.baselines[0].regret;
  }
  EXPECT_LT(law_err, carried_err);
  EXPECT_LT(law_regret, carried_regret);
  // The markdown's mean row and the JSON carry the same cells.
  EXPECT_NE(joint_law_markdown(r).find("| mean | 3 cells |"), std::string::npos);
  EXPECT_EQ(joint_law_to_json(r)["predictions"].size(), 3u);
}

TEST(JointLaw, LeaveOneScaleOutCoverageOfNoisyReplicatesIsNearNominal) {
  // 40 replicate stores whose cells' optima scatter by 0.3 doublings about the planted law: the
  // 90% interval must cover about 90% of the held-out optima. Read at N = 4e8, 8e8, 1.6e9 (3 cells
  // each) per replicate: 360 reads; binomial sd at p = 0.9 is 1.6 points, so 84%..96% is +-4 sd.
  int covered = 0, read = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    JointLawOptions o;
    o.axes = {"N", "D"};
    o.bootstrap = 100;
    const Coverage c = loso_coverage(cells(grid(kNs, kRatios), 0.3, 1000 + seed), o);
    covered += c.covered;
    read += c.read;
  }
  EXPECT_EQ(read, 360);
  std::printf("leave-one-scale-out coverage on planted replicates: %d of %d\n", covered, read);
  const double rate = static_cast<double>(covered) / read;
  EXPECT_GE(rate, 0.84) << covered << "/" << read;
  EXPECT_LE(rate, 0.96) << covered << "/" << read;
}

TEST(JointLaw, BadInputIsOneLineNamingTheAxis) {
  JointLawOptions o;
  o.axes = {"N", "D"};
  o.at = {{"N", 1e9}, {"D", 1e11}};
  // N and D on one line (D = 20 N in every cell): the law cannot separate them, and says which.
  const SweepTable line = cells(grid(kNs, {20}), 0.0, 1);
  EXPECT_NE(error_of(line, o).find("N and D are collinear"), std::string::npos) << error_of(line, o);
  // An axis with one value.
  const SweepTable one_d = cells({{1e8, 1e10}, {2e8, 1e10}, {4e8, 1e10}, {8e8, 1e10}}, 0.0, 1);
  EXPECT_NE(error_of(one_d, o).find("holds one value of D"), std::string::npos) << error_of(one_d, o);
  const SweepTable t = cells(grid(kNs, kRatios), 0.0, 1);
  JointLawOptions missing = o;
  missing.at = {{"N", 1e9}};
  EXPECT_NE(error_of(t, missing).find("gives no D"), std::string::npos);
  JointLawOptions unknown = o;
  unknown.axes = {"N", "tokens"};
  EXPECT_NE(error_of(t, unknown).find("'tokens' is no axis"), std::string::npos);
  JointLawOptions negative = o;
  negative.at = {{"N", -1}, {"D", 1e11}};
  EXPECT_NE(error_of(t, negative).find("N=-1 is not a positive number"), std::string::npos);
  JointLawOptions ref = o;
  ref.reference = {{"c", 1.79}, {"N", -0.713}};
  EXPECT_NE(error_of(t, ref).find("one exponent per law axis"), std::string::npos);
  JointLawOptions all = o;
  all.at.clear();
  all.holdout_upto = {{"N", 1e10}};
  EXPECT_NE(error_of(t, all).find("nothing is held out"), std::string::npos);
  JointLawOptions few = o;  // 3 cells for 3 coefficients
  EXPECT_NE(error_of(cells({{1e8, 1e10}, {2e8, 4e10}, {4e8, 1e10}}, 0.0, 1), few).find("needs 4 cells"), std::string::npos);
}

TEST(JointLaw, TheCliFitsAStoreJointlyAndRefusesJointOnlyFlagsWithoutIt) {
  const std::string db = std::string(SCALEINV_SOURCE_DIR) + "/docs/results/data/width_gpu_h100.db";
  const auto r = scaleinv::testing::run_cli("predict --db " + db + " --joint width --holdout --fit-upto width=512 --param mup");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("#### mup: log2 LR* = a + b_width log2 width"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| mup | width=1024 |"), std::string::npos) << r.out;
  const auto bad = scaleinv::testing::run_cli("predict --db " + db + " --holdout --fit-upto width=512");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("field '--fit-upto'"), std::string::npos) << bad.err;
  const auto loso = scaleinv::testing::run_cli("predict --db " + db + " --at width=1024 --loso");
  EXPECT_EQ(loso.code, 2);
  EXPECT_NE(loso.err.find("field '--loso': applies to a joint law only"), std::string::npos) << loso.err;
}

TEST(JointLaw, CoverageTableMatchesTheStores) {
  // docs/results/steplaw_holdout.md's coverage table: every row recomputed from its store, and the
  // total, with the default estimator and bootstrap.
  struct Row {
    const char *store, *law, *db;
    std::vector<std::string> axes;
    const char* hparam;
  };
  const std::vector<Row> rows = {
      {"Step Law dense", "LR in (N, D)", "steplaw_dense.db", {"N", "D"}, "lr"},
      {"Step Law dense", "batch size in D", "steplaw_dense.db", {"D"}, "batch_size"},
      {"Step Law dense", "batch size in (N, D)", "steplaw_dense.db", {"N", "D"}, "batch_size"},
      {"Step Law MoE", "LR in (Na, D)", "steplaw_moe.db", {"Na", "D"}, "lr"},
      {"Step Law MoE", "batch size in D", "steplaw_moe.db", {"D"}, "batch_size"},
      {"Step Law MoE", "batch size in (Na, D)", "steplaw_moe.db", {"Na", "D"}, "batch_size"},
      {"width_gpu_h100 (mup, standard)", "LR in width", "width_gpu_h100.db", {"width"}, "lr"},
      {"depth_gpu_h100 (3 params)", "LR in depth", "depth_gpu_h100.db", {"depth"}, "lr"},
      {"gpt_kjv_batch_cpu", "LR in batch size", "gpt_kjv_batch_cpu.db", {"train.batch_size"}, "lr"},
      {"gpt_kjv_horizon_cpu", "LR in steps", "gpt_kjv_horizon_cpu.db", {"train.steps"}, "lr"},
  };
  const std::string src = SCALEINV_SOURCE_DIR;
  const std::string page = scaleinv::testing::slurp(src + "/docs/results/steplaw_holdout.md");
  int covered = 0, read = 0;
  for (const Row& r : rows) {
    JointLawOptions o;
    o.axes = r.axes;
    o.hparam = r.hparam;
    o.loso = true;
    const Coverage c = loso_coverage(read_sweep_rows(src + "/docs/results/data/" + r.db), o);
    const std::string line = fmt::format("| {} | {} | {} of {} | {:.2f} |", r.store, r.law, c.covered, c.read, c.mean_abs_error);
    EXPECT_NE(page.find(line), std::string::npos) << "the page does not hold:\n" << line;
    covered += c.covered, read += c.read;
  }
  const std::string total = fmt::format("**{} of {} ({:.0f}%)**", covered, read, 100.0 * covered / read);
  EXPECT_NE(page.find(total), std::string::npos) << total;
}

TEST(JointLaw, StepLawHeldOutCellsBeatThePapersLaw) {
  // Issue 60's bar on published data: fitted on N <= 537M, read at the three 1.07B cells, mean
  // |error| below the paper's law's (0.26 doublings) and mean regret below 0.04%, every measured
  // optimum inside its interval. The store is imported here from the CSV, as the page does.
  const std::string src = SCALEINV_SOURCE_DIR;
  const std::string dir = ::testing::TempDir() + "/steplaw_test";
  std::filesystem::create_directories(dir);
  const auto imp = scaleinv::testing::run_cli(
      "import-results " + src + "/docs/results/data/published/steplaw_dense.csv --out " + dir +
      "/s.db --lr lr --loss smooth_loss --scale N=N --scale D=D --hparam batch_size=bs --param standard");
  ASSERT_EQ(imp.code, 0) << imp.err;
  JointLawOptions o;
  o.axes = {"N", "D"};
  o.holdout_upto = {{"N", 5.4e8}};
  o.reference = {{"c", 1.79}, {"N", -0.713}, {"D", 0.307}};
  const JointLawResult r = fit_joint_law(read_sweep_rows(dir + "/s.db"), o);
  ASSERT_EQ(r.predictions.size(), 3u);
  double err = 0, regret = 0, paper_err = 0;
  for (const JointPrediction& p : r.predictions) {
    EXPECT_EQ(p.x.at("N"), 1073741824.0);
    EXPECT_TRUE(p.covered) << p.x.at("D");
    err += std::fabs(p.error) / 3, regret += p.regret / 3, paper_err += std::fabs(p.baselines.at(2).error) / 3;
  }
  EXPECT_NEAR(paper_err, 0.2648, 0.001);  // the paper's law on these cells, as the issue measured it
  EXPECT_LT(err, 0.26);
  EXPECT_LT(regret, 0.04);
  scaleinv::remove_tree(dir);
}

TEST(JointLaw, AParameterizationTheLawCannotFitIsLeftOutWithANote) {
  // standard at 15 cells, mup at two only (three coefficients need four): mup is named in a note
  // and standard is fitted; a store of mup alone is refused with the same reason.
  SweepTable t = cells(grid(kNs, kRatios), 0.0, 1);
  SweepTable two = cells({{1e8, 1e10}, {2e8, 4e10}}, 0.0, 2);
  for (auto& r : two.rows) r.param = "mup";
  t.rows.insert(t.rows.end(), two.rows.begin(), two.rows.end());
  JointLawOptions o;
  o.axes = {"N", "D"};
  o.at = {{"N", 3.2e9}, {"D", 3.2e9 * 40}};
  const JointLawResult r = fit_joint_law(t, o);
  ASSERT_EQ(r.fits.size(), 1u);
  EXPECT_EQ(r.fits[0].param, "standard");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("mup left out: command line: field '--joint': 2 fitted cells for 3 coefficients"),
            std::string::npos) << r.notes[0];
  EXPECT_NE(joint_law_markdown(r).find("mup left out"), std::string::npos);
  EXPECT_NE(error_of(two, o).find("2 fitted cells for 3 coefficients"), std::string::npos);
}
