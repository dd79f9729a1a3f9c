// The theory engine against the seeds' known answers: seed 000 Tables 1-3 and eqs. (3)-(12),
// (24)-(28); seed 004's (alpha, gamma) classification; the post-LN transport bound (seed 000 eqs. 33, 35).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/param/table.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/theory_report.h"
#include "brain/theory/width_theory.h"
#include "brain/util/atomic_file.h"

using namespace scaleinv;

namespace {

constexpr double kTol = 1e-9;
const OptFamily kFamilies[] = {OptFamily::SGD, OptFamily::Adam, OptFamily::Adafactor};

Alignment omega_readout(double w) {
  Alignment a;
  a.omega_readout = w;
  return a;
}

// The Table-1 presets with the readout alignment they are stable under (seed 000 1.2):
// Everett et al.'s omega_{L+1} = 1/2 for sp and ntk, muP's worst case 1 for mup and mf.
struct Case {
  const char* name;
  double omega_readout;
};
const Case kTable1[] = {{"sp", 0.5}, {"ntk", 0.5}, {"mup", 1.0}, {"mf", 1.0}};

bool mentions(const std::vector<std::string>& v, const std::string& a, const std::string& b = "") {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) {
    return s.find(a) != std::string::npos && (b.empty() || s.find(b) != std::string::npos);
  });
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// A table with only the three roles of the bigram model set.
ParamTable custom(double a0, double ah, double aR, double b0, double bh, double bR, double c0 = 0, double ch = 0,
                  double cR = 0) {
  ParamTable t;
  t.name = "custom";
  t.row(Role::Embedding).a = a0;
  t.row(Role::Hidden).a = ah;
  t.row(Role::Readout).a = aR;
  t.row(Role::Embedding).b = b0;
  t.row(Role::Hidden).b = bh;
  t.row(Role::Readout).b = bR;
  for (int f = 0; f < kNumFamilies; ++f) {
    t.row(Role::Embedding).c[f] = c0;
    t.row(Role::Hidden).c[f] = ch;
    t.row(Role::Readout).c[f] = cR;
  }
  return t;
}

std::array<double, kNumRoles> theta3(double e, double h, double r) {
  std::array<double, kNumRoles> th{};
  th[static_cast<int>(Role::Embedding)] = e;
  th[static_cast<int>(Role::Readout)] = r;
  for (Role x : {Role::Hidden, Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO}) th[static_cast<int>(x)] = h;
  return th;
}

}  // namespace

// ---------------------------------------------------------------- seed 000 Table 1
TEST(TheoryWidth, Table1PresetsAreStableAndLearnFeatures) {
  for (const Case& c : kTable1)
    for (int L : {1, 3, 8}) {
      const WidthTheory w = width_theory(preset(c.name), OptFamily::Adam, L, omega_readout(c.omega_readout));
      SCOPED_TRACE(std::string(c.name) + " L=" + std::to_string(L));
      EXPECT_TRUE(w.stable_init);
      EXPECT_TRUE(w.stable_train);
      EXPECT_TRUE(w.feature_learning);
      EXPECT_TRUE(w.nontrivial);
      EXPECT_TRUE(w.failed_conditions.empty()) << joined(w.failed_conditions);
      ASSERT_EQ(w.layers.size(), static_cast<size_t>(L + 3));
      for (int l = 1; l <= L + 2; ++l) EXPECT_NEAR(w.dh(l), 0.0, kTol) << "dh_" << l;  // r_l = 0
      for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h(l), 0.0, kTol) << "h_" << l;
    }
}

TEST(TheoryWidth, Table1PresetsAlsoStableWithRmsNorm) {
  for (const Case& c : kTable1) {
    const WidthTheory w = width_theory(preset(c.name), OptFamily::Adam, 3, omega_readout(c.omega_readout), true);
    EXPECT_TRUE(w.stable_init && w.stable_train && w.feature_learning && w.nontrivial)
        << c.name << "\n" << joined(w.failed_conditions);
  }
}

TEST(TheoryWidth, SpAndNtkNeedOmegaReadoutHalf) {
  // seed 000 Table 3 "SP (50)": under muP's worst-case readout alignment the logit update grows like sqrt(d).
  for (const char* n : {"sp", "ntk"}) {
    const WidthTheory w = width_theory(preset(n), OptFamily::Adam, 3, omega_readout(1.0));
    EXPECT_TRUE(w.stable_init) << n;
    EXPECT_FALSE(w.stable_train) << n;
    EXPECT_FALSE(w.nontrivial) << n;
    EXPECT_NEAR(w.dh(5), 0.5, kTol) << n;   // logits
    EXPECT_NEAR(w.dh(4), 0.0, kTol) << n;   // the features themselves are fine
    EXPECT_TRUE(mentions(w.failed_conditions, "eq. (27)", "readout")) << joined(w.failed_conditions);
    EXPECT_TRUE(mentions(w.failed_conditions, "omega_readout = 1")) << joined(w.failed_conditions);
  }
  // mup and mf hold under omega_readout = 1 (the defaults) ...
  for (const char* n : {"mup", "mf"}) EXPECT_TRUE(width_theory(preset(n), OptFamily::Adam, 3).stable_train) << n;
}

TEST(TheoryWidth, StandardIsUnstableInTraining) {
  // `standard` = sp's a, b with one global LR (c = 0): hidden dh grows like d (eq. 25 fails).
  const WidthTheory w = width_theory(preset("standard"), OptFamily::Adam, 3, omega_readout(0.5));
  EXPECT_TRUE(w.stable_init);
  EXPECT_FALSE(w.stable_train);
  EXPECT_FALSE(w.feature_learning);
  EXPECT_FALSE(w.nontrivial);
  EXPECT_NEAR(w.dh(1), 0.0, kTol);  // the embedding (c = 0) is fine
  EXPECT_NEAR(w.dh(2), 1.0, kTol);  // first hidden layer: a+c = 0 < 1
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (25) layer 1 (hidden): a+c = 0 < alpha = 1"))
      << joined(w.failed_conditions);
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (25)", "readout")) << joined(w.failed_conditions);
  EXPECT_FALSE(mentions(w.failed_conditions, "embedding")) << joined(w.failed_conditions);
  EXPECT_FALSE(w.notes.empty());  // sec. 1.2.1: c < b, the update outgrows the init
}

// ---------------------------------------------------------------- init: Table 2, eqs. (3)-(12)
TEST(TheoryWidth, Table2FirstRowIsSpAtInit) {
  // sigma_0^2 = 1, sigma_{L+1}^2 = 1/d: variances 1 | 1 | 1 | 1/d | 1 | 1/d | 1/d, so RMS exponents halve them.
  const int L = 4;
  const WidthTheory w = width_theory(preset("sp"), OptFamily::Adam, L);
  for (int l = 1; l <= L + 2; ++l) EXPECT_NEAR(w.h(l), 0.0, kTol) << "h_" << l;
  EXPECT_NEAR(w.h_grad(L + 2), 0.0, kTol);
  for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h_grad(l), -0.5, kTol) << "h'_" << l;
  EXPECT_NEAR(w.w_grad(L + 1), 0.0, kTol);
  for (int l = 1; l <= L; ++l) EXPECT_NEAR(w.w_grad(l), -0.5, kTol) << "W'_" << l;
  EXPECT_NEAR(w.w_grad(0), -0.5, kTol);
  // With RMSNorm the first row is unchanged (its activations are already unit scale).
  const WidthTheory n = width_theory(preset("sp"), OptFamily::Adam, L, {}, true);
  for (int l = 0; l <= L + 2; ++l) {
    EXPECT_NEAR(n.h(l), w.h(l), kTol) << l;
    if (l >= 1) {
      EXPECT_NEAR(n.h_grad(l), w.h_grad(l), kTol) << l;
    }
    if (l <= L + 1) {
      EXPECT_NEAR(n.w_grad(l), w.w_grad(l), kTol) << l;
    }
  }
}

TEST(TheoryWidth, Table2OtherRowsWithoutNorm) {
  const int L = 3;
  // Row 2: sigma_0^2 = 1/d (b_0 = 1/2), sigma_{L+1}^2 = 1/d: h ~ 1/d, h' ~ 1/d, W'_{L+1} ~ 1/d,
  // W'_hidden ~ 1/d^2, W'_0 ~ 1/d (variances).
  WidthTheory w = width_theory(custom(0, 0, 0, 0.5, 0.5, 0.5), OptFamily::Adam, L);
  for (int l = 1; l <= L + 2; ++l) EXPECT_NEAR(w.h(l), -0.5, kTol) << l;
  for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h_grad(l), -0.5, kTol) << l;
  EXPECT_NEAR(w.w_grad(L + 1), -0.5, kTol);
  for (int l = 1; l <= L; ++l) EXPECT_NEAR(w.w_grad(l), -1.0, kTol) << l;
  EXPECT_NEAR(w.w_grad(0), -0.5, kTol);
  EXPECT_FALSE(w.stable_init);
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (8)", "embedding")) << joined(w.failed_conditions);
  // Row 3: sigma_0^2 = 1, sigma_{L+1}^2 = 1 (b_{L+1} = 0): logits ~ d, everything else ~ 1.
  w = width_theory(custom(0, 0, 0, 0, 0.5, 0), OptFamily::Adam, L);
  for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h(l), 0.0, kTol) << l;
  EXPECT_NEAR(w.logits(), 0.5, kTol);
  for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h_grad(l), 0.0, kTol) << l;
  for (int l = 0; l <= L + 1; ++l) EXPECT_NEAR(w.w_grad(l), 0.0, kTol) << l;
  EXPECT_FALSE(w.stable_init);
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (10)", "readout")) << joined(w.failed_conditions);
}

TEST(TheoryWidth, ClosedFormsOfEqs3To5) {
  // Random tables: the recursion equals the closed forms of Lemma E.4, halved to RMS.
  // Eq. (5) is checked with L - [[1 <= l <= L]]: the seed prints L + [[...]], but its own proof
  // (Var(h'_{l+1}) Var(h_l) d^-2a_l has exponent L-1-2(S-b_l)) and eq. (12) need the minus sign.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    const int L = 1 + trial % 6;
    const ParamTable t = custom(u(rng), u(rng), u(rng), u(rng), u(rng), u(rng));
    const WidthTheory w = width_theory(t, OptFamily::Adam, L);
    auto ab = [&](int l) {
      const Role r = l == 0 ? Role::Embedding : (l <= L ? Role::Hidden : Role::Readout);
      return t.row(r).a + t.row(r).b;
    };
    auto bl = [&](int l) { return t.row(l == 0 ? Role::Embedding : (l <= L ? Role::Hidden : Role::Readout)).b; };
    double S = 0;
    for (int i = 0; i <= L + 1; ++i) S += ab(i);
    for (int l = 0; l <= L + 1; ++l) {  // eq. (3): Var(h_{l+1}) = d^(l - 2 sum_{i<=l} (a_i+b_i))
      double s = 0;
      for (int i = 0; i <= l; ++i) s += ab(i);
      EXPECT_NEAR(w.h(l + 1), (l - 2 * s) / 2, 1e-9) << "h_" << l + 1;
    }
    for (int l = 1; l <= L + 1; ++l) {  // eq. (4)
      double s = 0;
      for (int i = l; i <= L + 1; ++i) s += ab(i);
      EXPECT_NEAR(w.h_grad(l), ((L + 1 - l) - 2 * s) / 2, 1e-9) << "h'_" << l;
    }
    for (int l = 0; l <= L + 1; ++l) {  // eq. (5), corrected sign
      const double ind = (l >= 1 && l <= L) ? 1.0 : 0.0;
      EXPECT_NEAR(w.w_grad(l), (L - ind - 2 * (S - bl(l))) / 2, 1e-9) << "W'_" << l;
    }
  }
}

TEST(TheoryWidth, Eqs11And12UnderStableInit) {
  // Any table meeting (8)-(10): RMS(h'_l) ~ d^-(a_R+b_R), RMS(W'_R) ~ d^-a_R, RMS(W'_l) ~ d^-(a_R+b_R+a_l).
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0), pos(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    const int L = 1 + trial % 5;
    const double a0 = u(rng), ah = u(rng), aR = u(rng), sR = 0.5 + pos(rng);
    const ParamTable t = custom(a0, ah, aR, -a0, 0.5 - ah, sR - aR);
    const WidthTheory w = width_theory(t, OptFamily::Adam, L);
    EXPECT_TRUE(w.stable_init);
    for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h_grad(l), -sR, 1e-9);  // eq. (11)
    EXPECT_NEAR(w.w_grad(L + 1), -aR, 1e-9);                              // eq. (12)
    for (int l = 1; l <= L; ++l) EXPECT_NEAR(w.w_grad(l), -(sR + ah), 1e-9);
    EXPECT_NEAR(w.w_grad(0), -(sR + a0), 1e-9);
  }
}

TEST(TheoryWidth, RmsNormFollowsLemmaE3) {
  // Lemma E.3 (a = 0): h_l ~ 1 for any sigma_l; Var(h'_l) = Theta(sigma_{L+1}^2); Var(W'_{L+1}) = Theta(1);
  // Var(W'_l) = Theta(sigma_{L+1}^2 / (sigma_l^2 d)); Var(W'_0) = Theta(sigma_{L+1}^2 / sigma_0^2).
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> b(0.0, 1.0), bR(0.0, 0.5);
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 1 + trial % 4;
    const double b0 = b(rng), bh = b(rng), bRv = bR(rng);  // sigma_{L+1}^2 = Omega(1/d)
    const WidthTheory w = width_theory(custom(0, 0, 0, b0, bh, bRv), OptFamily::Adam, L, {}, true);
    for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h(l), 0.0, 1e-9);
    EXPECT_NEAR(w.logits(), 0.5 - bRv, 1e-9);
    for (int l = 1; l <= L + 1; ++l) EXPECT_NEAR(w.h_grad(l), -bRv, 1e-9);
    EXPECT_NEAR(w.w_grad(L + 1), 0.0, 1e-9);
    for (int l = 1; l <= L; ++l) EXPECT_NEAR(w.w_grad(l), -bRv + bh - 0.5, 1e-9);
    EXPECT_NEAR(w.w_grad(0), -bRv + b0, 1e-9);
    EXPECT_EQ(w.stable_init, bRv >= 0.5);  // RMSNorm absorbs (8)-(9) but not (10): logits ~ d^(1/2-b_R)
  }
}

// ---------------------------------------------------------------- equivalence (eq. 28)
TEST(TheoryWidth, EquivalenceShiftLeavesPredictionsUnchanged) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const char* names[] = {"standard", "sp", "ntk", "mup", "mf", "completep", "depth-mup"};
  for (const char* n : names)
    for (OptFamily f : kFamilies)
      for (bool norm : {false, true})
        for (double wR : {0.5, 1.0})
          for (int trial = 0; trial < 4; ++trial) {
            const ParamTable t = preset(n);
            const ParamTable s = shift(t, theta3(u(rng), u(rng), u(rng)));
            const WidthTheory a = width_theory(t, f, 3, omega_readout(wR), norm);
            const WidthTheory b = width_theory(s, f, 3, omega_readout(wR), norm);
            SCOPED_TRACE(fmt::format("{} {} rmsnorm={} omega_R={}", n, family_name(f), norm, wR));
            EXPECT_EQ(a.stable_init, b.stable_init);
            EXPECT_EQ(a.stable_train, b.stable_train);
            EXPECT_EQ(a.feature_learning, b.feature_learning);
            EXPECT_EQ(a.nontrivial, b.nontrivial);
            for (int l = 1; l <= 5; ++l) {
              EXPECT_NEAR(a.dh(l), b.dh(l), 1e-9) << "dh_" << l;
              EXPECT_NEAR(a.h(l), b.h(l), 1e-9) << "h_" << l;
              EXPECT_NEAR(a.h_grad(l), b.h_grad(l), 1e-9) << "h'_" << l;
            }
            EXPECT_EQ(a.failed_conditions, b.failed_conditions);  // every number in them is invariant too
          }
}

TEST(TheoryWidth, SpShiftedIsNtkAndMupShiftedIsMf) {
  // seed 000 1.2.2: SP == NTK via theta = (0, 1/2, 1/2), muP == MF via theta = (1/2, 1/2, 1/2).
  const struct { const char* from; const char* to; std::array<double, kNumRoles> th; } pairs[] = {
      {"sp", "ntk", theta3(0, 0.5, 0.5)}, {"mup", "mf", theta3(0.5, 0.5, 0.5)}};
  for (const auto& p : pairs) {
    const ParamTable s = shift(preset(p.from), p.th), target = preset(p.to);
    for (Role r : {Role::Embedding, Role::Hidden, Role::Readout}) {
      EXPECT_NEAR(s.row(r).a, target.row(r).a, kTol) << p.to << role_name(r);
      EXPECT_NEAR(s.row(r).b, target.row(r).b, kTol) << p.to << role_name(r);
      EXPECT_NEAR(s.row(r).c[static_cast<int>(OptFamily::Adam)], target.row(r).c[static_cast<int>(OptFamily::Adam)],
                  kTol)
          << p.to << role_name(r);
    }
    for (OptFamily f : kFamilies) {
      const WidthTheory a = width_theory(s, f, 3), b = width_theory(target, f, 3);
      for (int l = 0; l <= 5; ++l) {
        EXPECT_NEAR(a.h(l), b.h(l), kTol);
        if (l <= 4) {
          EXPECT_NEAR(a.w_grad(l), b.w_grad(l), kTol);
          EXPECT_NEAR(a.dw(l), b.dw(l), kTol);
        }
        if (l >= 1) {
          EXPECT_NEAR(a.dh(l), b.dh(l), kTol);
        }
      }
    }
  }
}

TEST(TheoryWidth, SgdAndAdafactorColumnsMatchAdam) {
  // The presets' SGD and Adafactor LR columns are built so that RMS(dW) matches Adam's (eq. 15).
  for (const char* n : {"sp", "ntk", "mup", "mf", "completep", "depth-mup"})
    for (double wR : {0.5, 1.0}) {
      const WidthTheory adam = width_theory(preset(n), OptFamily::Adam, 3, omega_readout(wR));
      for (OptFamily f : {OptFamily::SGD, OptFamily::Adafactor}) {
        const WidthTheory o = width_theory(preset(n), f, 3, omega_readout(wR));
        for (int l = 0; l <= 4; ++l) EXPECT_NEAR(o.dw(l), adam.dw(l), kTol) << n << " " << family_name(f) << l;
        for (int l = 1; l <= 5; ++l) EXPECT_NEAR(o.dh(l), adam.dh(l), kTol) << n << " " << family_name(f) << l;
        EXPECT_EQ(o.stable_train, adam.stable_train) << n;
        EXPECT_EQ(o.nontrivial, adam.nontrivial) << n;
      }
    }
}

TEST(TheoryWidth, SgdUsesTheGradientScale) {
  // eq. (15): SGD's dW is d^-c RMS(W'); with standard's c = 0 the hidden update is d^-1/2 and
  // eq. (25)'s analogue a - e(dW) = 1/2 < 1 fails: dh_2 ~ d^1/2.
  const WidthTheory w = width_theory(preset("standard"), OptFamily::SGD, 3, omega_readout(0.5));
  EXPECT_NEAR(w.dw(1), -0.5, kTol);
  EXPECT_NEAR(w.dh(2), 0.5, kTol);
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (25) layer 1 (hidden): a-e(dW) = 1/2 < alpha = 1"))
      << joined(w.failed_conditions);
  EXPECT_NEAR(w.dh(1), -0.5, kTol);  // embedding: d^-1/2 gradients with c = 0
}

TEST(TheoryWidth, AlignmentAssumptionsMatter) {
  // With omega_hidden = 1 (weights aligned with the activation change) eq. (26) fails inside.
  Alignment al;
  al.omega_hidden = 1.0;
  const WidthTheory w = width_theory(preset("mup"), OptFamily::Adam, 2, al);
  EXPECT_FALSE(w.stable_train);
  EXPECT_TRUE(mentions(w.failed_conditions, "eq. (26) layer 1 (hidden)")) << joined(w.failed_conditions);
  // With alpha = 1/2 (unaligned updates) muP's hidden LR d^-1 is too small: no feature learning
  // through term 2, but the embedding still moves h_1 and it propagates (term 1 with omega = 1/2).
  Alignment un;
  un.alpha = 0.5;
  un.u = 0.5;
  const WidthTheory v = width_theory(preset("mup"), OptFamily::Adam, 2, un);
  EXPECT_TRUE(v.stable_train);
  EXPECT_NEAR(v.dh(3), 0.0, kTol);
}

TEST(TheoryWidth, BadArgumentsAndMissingQuantities) {
  EXPECT_THROW(width_theory(preset("mup"), OptFamily::Adam, 0), std::invalid_argument);
  Alignment bad;
  bad.u = 0.3;
  EXPECT_THROW(width_theory(preset("mup"), OptFamily::Adam, 2, bad), std::invalid_argument);
  const WidthTheory w = width_theory(preset("mup"), OptFamily::Adam, 2);
  EXPECT_THROW(w.h_grad(0), std::out_of_range);
  EXPECT_THROW(w.dh(0), std::out_of_range);
  EXPECT_THROW(w.w_grad(4), std::out_of_range);
  EXPECT_THROW(w.h(5), std::out_of_range);
  EXPECT_NEAR(w.h_grad(4), 0.0, kTol);  // softmax - y
}

// ---------------------------------------------------------------- seed 004
TEST(TheoryDepth, Seed004Classification) {
  for (OptFamily f : kFamilies) {
    const DepthTheory d = depth_theory(preset("depth-mup"), f);
    SCOPED_TRACE(family_name(f));
    EXPECT_NEAR(d.alpha, 0.5, kTol);
    EXPECT_NEAR(d.gamma, 0.5, kTol);  // SGD: depth_lr 0 + alpha
    EXPECT_EQ(d.region, DepthRegion::DepthMuP);
    EXPECT_TRUE(d.stable && d.faithful && d.nontrivial && d.feature_learning && d.max_diversity);
    ASSERT_TRUE(d.kappa.has_value());
    EXPECT_NEAR(*d.kappa, 0.5, kTol);
    EXPECT_NEAR(d.update_correlated, 0.0, kTol);
    EXPECT_NEAR(d.top_init_rho_half, 0.0, kTol);

    const DepthTheory c = depth_theory(preset("completep"), f);
    EXPECT_NEAR(c.alpha, 1.0, kTol);
    EXPECT_NEAR(c.gamma, 0.0, kTol);
    EXPECT_EQ(c.region, DepthRegion::Redundant);
    EXPECT_TRUE(c.stable && c.faithful && c.nontrivial && c.feature_learning);
    EXPECT_FALSE(c.max_diversity);
    ASSERT_TRUE(c.kappa.has_value());
    EXPECT_NEAR(*c.kappa, 0.0, kTol);
    EXPECT_NE(c.label.find("collapse"), std::string::npos) << c.label;
    EXPECT_NEAR(c.top_init_rho_one, 0.0, kTol);
  }
  // (1/2, 0): unstable in training, updates grow like L^1/2 (docs/design.md "Depth theory as
  // implemented": one-step changes against depth).
  DepthTheory d = depth_theory(0.5, 0.0);
  EXPECT_EQ(d.region, DepthRegion::UnstableTrain);
  EXPECT_TRUE(d.stable_init);
  EXPECT_FALSE(d.stable_train || d.stable || d.feature_learning);
  EXPECT_NEAR(d.update_correlated, 0.5, kTol);
  // (0, *): unstable at init.
  for (double g : {0.0, 0.5, 1.0, 2.0}) {
    d = depth_theory(0.0, g);
    EXPECT_EQ(d.region, DepthRegion::UnstableInit) << g;
    EXPECT_FALSE(d.stable_init || d.stable || d.faithful || d.nontrivial || d.feature_learning) << g;
    EXPECT_FALSE(d.kappa.has_value());
  }
  // (1/2, 1): stable but trivial, updates vanish like L^-1/2.
  d = depth_theory(0.5, 1.0);
  EXPECT_EQ(d.region, DepthRegion::Trivial);
  EXPECT_TRUE(d.stable && d.faithful);
  EXPECT_FALSE(d.nontrivial || d.feature_learning);
  EXPECT_NEAR(d.update_correlated, -0.5, kTol);
  // alpha + gamma = 1 with alpha > 1: unfaithful.
  d = depth_theory(1.5, -0.5);
  EXPECT_EQ(d.region, DepthRegion::Unfaithful);
  EXPECT_TRUE(d.stable && d.nontrivial);
  EXPECT_FALSE(d.faithful || d.feature_learning);
  // alpha in (1/2, 1) on the line: redundant without collapse.
  d = depth_theory(0.75, 0.25);
  EXPECT_EQ(d.region, DepthRegion::Redundant);
  EXPECT_EQ(d.label.find("collapse"), std::string::npos);
  // Presets with no depth scaling sit at alpha = 0.
  EXPECT_EQ(depth_theory(preset("mup"), OptFamily::Adam).region, DepthRegion::UnstableInit);
}

TEST(TheoryDepth, PostLnTransportBound) {
  // eq. (33): shortcut 0 (alpha_s = 1) gives 2^(-L/2); eq. (35) with alpha_s = L tends to 1 (KEEL).
  for (int L : {1, 2, 4, 16, 64}) EXPECT_NEAR(postln_transport_bound(0.0, L), std::pow(2.0, -L / 2.0), 1e-12) << L;
  double prev = 0;
  for (int L : {2, 4, 16, 64, 256, 4096}) {
    const double b = postln_transport_bound(1.0, L);
    EXPECT_GT(b, prev);
    EXPECT_GE(b, 1.0 - 1.0 / (2 * L) - 1e-12);  // (1 + 1/L^2)^(-L/2) ~ exp(-1/(2L))
    EXPECT_LT(b, 1.0);
    prev = b;
  }
  EXPECT_GT(postln_transport_bound(preset("keel"), 64), 0.99);
  EXPECT_LT(postln_transport_bound(preset("mup"), 64), 1e-9);
}

// ---------------------------------------------------------------- report and CLI
TEST(TheoryReport, JsonHasTheRequiredKeysAndNulls) {
  const WidthTheory w = width_theory(preset("mup"), OptFamily::Adam, 3);
  const nlohmann::json j = theory_json(w, depth_theory(preset("mup"), OptFamily::Adam));
  for (const char* k : {"stable_init", "stable_train", "feature_learning", "nontrivial", "layers", "failed_conditions",
                        "depth", "param", "optimizer", "alignment"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j["feature_learning"].get<bool>());
  ASSERT_EQ(j["layers"].size(), 6u);
  for (const auto& row : j["layers"])
    for (const char* k : {"layer", "role", "h", "h_grad", "w_grad", "dw", "dh"}) EXPECT_TRUE(row.contains(k)) << k;
  EXPECT_TRUE(j["layers"][0]["h_grad"].is_null());
  EXPECT_TRUE(j["layers"][0]["dh"].is_null());
  EXPECT_TRUE(j["layers"][5]["w_grad"].is_null());
  EXPECT_TRUE(j["layers"][5]["dw"].is_null());
  EXPECT_EQ(j["layers"][5]["role"], "logits");
  EXPECT_EQ(j["layers"][4]["role"], "readout");
  EXPECT_DOUBLE_EQ(j["layers"][1]["w_grad"].get<double>(), -1.0);  // mup hidden W' ~ d^-(a_R+b_R+a_h)
  EXPECT_EQ(j["optimizer"], "adam");
  EXPECT_DOUBLE_EQ(j["alignment"]["omega_readout"].get<double>(), 1.0);
  EXPECT_EQ(j["depth"]["region"], "unstable_init");
}

TEST(TheoryReport, TableIsReadable) {
  EXPECT_EQ(format_exponent(-0.5), "-1/2");
  EXPECT_EQ(format_exponent(1e-12), "0");
  const std::string s = theory_table(width_theory(preset("sp"), OptFamily::Adam, 2),
                                     depth_theory(preset("sp"), OptFamily::Adam));
  EXPECT_NE(s.find("readout"), std::string::npos);
  EXPECT_NE(s.find("-1/2"), std::string::npos);
  EXPECT_NE(s.find("eq. (27)"), std::string::npos) << s;
  EXPECT_NE(s.find("stable in training"), std::string::npos);
  EXPECT_NE(s.find("unstable at init"), std::string::npos);  // depth: sp has no branch scaling
}

TEST(TheoryCli, UnknownParamIsAOneLineUserError) {
  const auto r = scaleinv::testing::run_cli("theory --param nosuch");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
  for (const char* args : {"theory --param mup --optimizer rmsprop", "theory --param mup --depth 0",
                           "theory --param mup --omega-readout 2", "theory --param mup --align-u x"}) {
    const auto b = scaleinv::testing::run_cli(args);
    EXPECT_EQ(b.code, 2) << args << "\n" << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << args << "\n" << b.err;
  }
}

TEST(TheoryCli, WritesJson) {
  const std::string dir = scaleinv::testing::temp_dir("theory_json");
  const std::string path = dir + "/mup.json";
  const auto r = scaleinv::testing::run_cli("theory --param mup --json " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("feature learning"), std::string::npos) << r.out;
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const char* k : {"stable_init", "stable_train", "feature_learning", "nontrivial", "layers", "failed_conditions"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j["stable_train"].get<bool>());
  EXPECT_EQ(j["layers"].size(), 6u);  // default L = 3
  // Fractions are accepted for the alignment options; sp is stable with Everett et al.'s omega = 1/2.
  const auto s = scaleinv::testing::run_cli("theory --param sp --omega-readout 1/2 --depth 2 --rmsnorm --optimizer sgd");
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out.find("failed conditions:\n"), std::string::npos) << s.out;
  scaleinv::remove_tree(dir);
}

// Section 5 of issue 13: verdicts that rest on an earlier one say so.
TEST(TheoryReport, FeatureLearningLineSaysItIsJudgedOnlyWhenStable) {
  Alignment al;
  al.omega_readout = 1.0;  // sp is unstable in training at omega_readout = 1 (eq. 27)
  const WidthTheory w = width_theory(preset("sp"), OptFamily::Adam, 3, al);
  ASSERT_TRUE(w.stable_init);
  ASSERT_FALSE(w.stable_train);
  const std::string s = theory_table(w, depth_theory(preset("sp"), OptFamily::Adam));
  const auto at = s.find("feature learning, RMS(dh_4) ~ 1");
  ASSERT_NE(at, std::string::npos) << s;
  const std::string line = s.substr(at, s.find('\n', at) - at);
  EXPECT_NE(line.find("NO (unstable in training; 1.2.3 judges it only for stable parameterizations)"),
            std::string::npos) << line;
  const auto nt = s.find("nontrivial, logits move");
  EXPECT_NE(s.substr(nt, s.find('\n', nt) - nt).find("unstable in training"), std::string::npos) << s;
  // A stable one keeps the plain verdict.
  const std::string m = theory_table(width_theory(preset("mup"), OptFamily::Adam, 3, al),
                                     depth_theory(preset("mup"), OptFamily::Adam));
  EXPECT_NE(m.find("feature learning, RMS(dh_4) ~ 1 (1.2.3)     yes\n"), std::string::npos) << m;
  // And the CLI prints the same line.
  const auto r = scaleinv::testing::run_cli("theory --param sp --omega-readout 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("NO (unstable in training; 1.2.3 judges it only for stable parameterizations)"),
            std::string::npos) << r.out;
}

TEST(TheoryReport, TrainingIsNotJudgedWhenTheInitIsUnstable) {
  ParamTable t = preset("mup");
  t.row(Role::Embedding).b += 0.5;  // a+b = 1/2 != 0: RMS(h_1) vanishes (eq. 8)
  const WidthTheory w = width_theory(t, OptFamily::Adam, 3);
  ASSERT_FALSE(w.stable_init);
  const std::string s = theory_table(w, depth_theory(t, OptFamily::Adam));
  const auto at = s.find("stable in training (eqs. 13-14, 24-27)");
  ASSERT_NE(at, std::string::npos) << s;
  const std::string line = s.substr(at, s.find('\n', at) - at);
  EXPECT_NE(line.find("not judged (unstable at init)"), std::string::npos) << line;
  EXPECT_EQ(line.find("yes"), std::string::npos) << line;
  const auto fl = s.find("feature learning, RMS");
  EXPECT_NE(s.substr(fl, s.find('\n', fl) - fl).find("NO (unstable at init"), std::string::npos) << s;
  EXPECT_FALSE(theory_json(w, depth_theory(t, OptFamily::Adam))["stable_train_judged"].get<bool>());
}
