// Depth theory: seed 004's (alpha, gamma) classification and seed 000 section 2 (see depth_theory.h).
#include "brain/theory/depth_theory.h"

#include <cmath>

#include "brain/theory/width_theory.h"  // kExponentTol

namespace scaleinv {

namespace {
bool gt(double x, double y) { return x > y + kExponentTol; }
bool eq(double x, double y) { return std::fabs(x - y) <= kExponentTol; }
}  // namespace

const char* depth_region_name(DepthRegion r) {
  switch (r) {
    case DepthRegion::UnstableInit: return "unstable_init";
    case DepthRegion::Trivial: return "trivial";
    case DepthRegion::UnstableTrain: return "unstable_train";
    case DepthRegion::Unfaithful: return "unfaithful";
    case DepthRegion::Redundant: return "redundant";
    case DepthRegion::DepthMuP: return "depth_mup";
  }
  return "?";
}

double depth_gamma(const ParamTable& t, OptFamily f) {
  const double g = t.row(Role::Hidden).depth_lr[static_cast<int>(f)];
  // SGD's true LR is eta L^(alpha - gamma) (seed 004 Def. 4.1 with delta = alpha; docs/design.md
  // "Depth theory as implemented").
  return f == OptFamily::SGD ? g + t.branch : g;
}

DepthTheory depth_theory(const ParamTable& t, OptFamily f) {
  return depth_theory(t.branch, depth_gamma(t, f), t.shortcut);
}

DepthTheory depth_theory(double alpha, double gamma, double shortcut) {
  DepthTheory d;
  d.alpha = alpha;
  d.gamma = gamma;
  d.shortcut = shortcut;
  const double s = alpha + gamma;

  // Exponents of L: seed 000 eqs. (29)-(31) with rho -> alpha and eta = L^-gamma; seed 004 H.2.
  d.top_init_rho_half = 0.5 - alpha;
  d.top_init_rho_one = 1.0 - alpha;
  d.update_correlated = 1.0 - s;
  d.update_uncorrelated = 0.5 - s;
  d.block_update = -s;

  d.stable_init = !gt(0.5, alpha);                     // seed 004 Claim 5.1
  d.stable_train = d.stable_init && !gt(1.0, s);       // Claim 5.2 a
  d.stable = d.stable_init && d.stable_train;
  d.nontrivial = d.stable && !gt(s, 1.0);              // seed 004 Claim 5.2 b
  d.faithful = d.stable && !gt(0.0, gamma);            // Claim 5.3 (linear case: faithful iff gamma >= 0)
  d.feature_learning = d.stable && d.nontrivial && d.faithful;  // seed 004 footnote 9
  d.max_diversity = d.feature_learning && eq(alpha, 0.5);      // Claim 5.5

  if (!d.stable_init) {
    d.region = DepthRegion::UnstableInit;
    d.label = "unstable at init: alpha < 1/2, the residual stream blows up like exp(L^(1-2 alpha)) (seed 004 Claim 5.1)";
  } else if (gt(s, 1.0)) {
    d.region = DepthRegion::Trivial;
    d.label = "stable but trivial: alpha+gamma > 1, updates vanish like L^(1-alpha-gamma) (seed 004 Claim 5.2)";
  } else if (gt(1.0, s)) {
    d.region = DepthRegion::UnstableTrain;
    d.label = "unstable in training: alpha+gamma < 1, updates grow like L^(1-alpha-gamma) (seed 004 Claim 5.2)";
  } else if (gt(alpha, 1.0)) {
    d.region = DepthRegion::Unfaithful;
    d.label = "unfaithful: alpha+gamma = 1 with alpha > 1, gamma < 0 and the pre-activations h explode "
              "(seed 004 Claim 5.3)";
  } else if (gt(alpha, 0.5)) {
    d.region = DepthRegion::Redundant;
    d.kappa = 0.0;
    d.label = eq(alpha, 1.0)
                  ? "feature learning but redundant (kappa = 0, ODE limit) with feature collapse at alpha = 1 "
                    "(seed 004 Claim 5.4, G.2)"
                  : "feature learning but redundant (kappa = 0, ODE limit) (seed 004 Claim 5.4)";
  } else {
    d.region = DepthRegion::DepthMuP;
    d.kappa = 0.5;
    d.label = "Depth-muP: stable, faithful, nontrivial, feature learning, maximal diversity kappa = 1/2 "
              "(seed 004 Claim 5.5)";
  }
  return d;
}

double postln_transport_bound(double shortcut, double L) {
  // (1 + alpha_s^-2)^(-L/2) with alpha_s = L^shortcut; log1p keeps it accurate as alpha_s grows.
  const double inv_sq = std::pow(L, -2.0 * shortcut);
  return std::exp(-0.5 * L * std::log1p(inv_sq));
}

}  // namespace scaleinv
