#pragma once
// Depth theory: the (alpha, gamma) classification of seed 004 (Tensor Programs VI, Claims 5.1-5.5
// and Claim G.1; joined into one list as docs/design.md "Depth theory as implemented" describes) for
// a residual network
//   x_l = x_{l-1} + L^-alpha f_l(x_{l-1}; W_l),   LR(W_l) = eta n^-1 L^-gamma  (Adam-normalised),
// the depth exponents of seed 000 section 2 (eqs. 29-31; seed 004 H.2), and the post-LN backward
// transport bound of seed 000 eqs. (33)-(35).
//
// From a ParamTable: alpha = table.branch; gamma = the Adam-normalised depth LR exponent of the
// hidden role: for Adam and Adafactor gamma = row(Hidden).depth_lr[family]; for SGD the table's
// exponent is SGD's true LR, eta L^(alpha - gamma) (seed 004 Def. 4.1 with delta = alpha), so
// gamma = depth_lr[SGD] + alpha.
//
// Regions (limits n -> inf first, then L -> inf; comparisons with tolerance kExponentTol):
//   alpha < 1/2                          unstable at init (Claim 5.1)
//   alpha >= 1/2, alpha+gamma > 1        stable but trivial (Claim 5.2 b)
//   alpha >= 1/2, alpha+gamma < 1        unstable in training (Claim 5.2 a)
//   alpha+gamma = 1, alpha > 1           unfaithful: gamma < 0, h explodes (Claim 5.3)
//   alpha+gamma = 1, 1/2 < alpha <= 1    feature learning but redundant, kappa = 0 (ODE limit,
//                                        Claim 5.4); at alpha = 1 features collapse (G.2)
//   alpha = gamma = 1/2                  Depth-muP: every property, maximal diversity kappa = 1/2 (5.5)
#include <optional>
#include <string>

#include "brain/param/table.h"

namespace scaleinv {

enum class DepthRegion : int { UnstableInit, Trivial, UnstableTrain, Unfaithful, Redundant, DepthMuP };
const char* depth_region_name(DepthRegion r);  // "unstable_init", "trivial", ..., "depth_mup"

struct DepthTheory {
  double alpha = 0;  // residual branch multiplier L^-alpha
  double gamma = 0;  // Adam-normalised depth LR exponent of the hidden (in-block) weights
  double shortcut = 0;  // post-LN shortcut exponent: alpha_s = L^shortcut (seed 000 eq. 34)

  DepthRegion region = DepthRegion::UnstableInit;
  std::string label;  // one line, e.g. "Depth-muP: stable, faithful, ... (seed 004 Claim 5.5)"

  bool stable_init = false;       // seed 004 Claim 5.1: alpha >= 1/2
  bool stable_train = false;      // Claim 5.2 a: alpha + gamma >= 1 (given stable at init)
  bool stable = false;            // both
  bool faithful = false;          // Def. 5.3 / Claim 5.3: stable and gamma >= 0 (h_t = Theta(1))
  bool nontrivial = false;        // Def. 5.4 / Claim 5.2 b: stable and alpha + gamma <= 1
  bool feature_learning = false;  // Def. 5.5: stable, nontrivial and faithful (seed 004 footnote 9)
  bool max_diversity = false;     // Def. 5.6 / Claim 5.5: kappa = 1/2 (alpha = gamma = 1/2)
  std::optional<double> kappa;    // feature diversity exponent where the seed gives it: 1/2 or 0

  // Exponents of L (seed 000 eqs. 29-31, seed 004 H.2):
  double top_init_rho_half = 0;     // top activation at init, L^(1/2 - alpha) (mu = 0, rho = 1/2)
  double top_init_rho_one = 0;      // top activation at init, L^(1 - alpha)   (mu != 0, rho = 1)
  double update_correlated = 0;     // one-step change of the top activation / output, L^(1-alpha-gamma)
  double update_uncorrelated = 0;   // the same with uncorrelated layer gradients, L^(1/2-alpha-gamma)
  double block_update = 0;          // one block's change per step, L^-(alpha+gamma)
};

// Classification from the exponents directly (gamma Adam-normalised).
DepthTheory depth_theory(double alpha, double gamma, double shortcut = 0);
// Classification of a table under an optimizer family (see the header comment for gamma).
DepthTheory depth_theory(const ParamTable& t, OptFamily f);
// The Adam-normalised gamma of a table (the hidden role's depth LR exponent; + alpha for SGD).
double depth_gamma(const ParamTable& t, OptFamily f);

// Post-LN backward transport bound of seed 000 eqs. (33), (35), Lemma E.5:
//   ||prod_l alpha_s B_l||_2 <~ (1 + 1/alpha_s^2)^(-L/2),  alpha_s = L^shortcut.
// shortcut 0 (plain post-LN): 2^(-L/2), vanishing exponentially; shortcut 1 (KEEL): -> 1.
double postln_transport_bound(double shortcut, double L);
inline double postln_transport_bound(const ParamTable& t, double L) { return postln_transport_bound(t.shortcut, L); }

}  // namespace scaleinv
