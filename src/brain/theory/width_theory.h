#pragma once
// Width theory of seed 000 section 1 for its L-layer bigram model (eq. 1):
//
//   h_0 = x (one-hot),   h_{l+1} = d^-a_l W_l h_l   (l = 0..L+1),   logits = h_{L+2}
//   W_0: embedding (role Embedding), W_1..W_L: hidden (role Hidden), W_{L+1}: readout (role Readout)
//
// Given a ParamTable (a, b, c per role), an optimizer family and alignment assumptions, it predicts
// the exponent e of every RMS ~ d^e (d the width) at initialization (eqs. 3-5, Lemma E.4; with
// RMSNorm Lemma E.3) and after one update (eqs. 15-23), and the verdicts of eqs. 6-10, 13-14,
// 24-27 and section 1.2.3. These exponents are what the coordinate check is judged against.
//
// Indexing follows the seed: row l of `layers` holds h_l (the input of W_l, i.e. the output of
// W_{l-1}), h'_l = dLoss/dh_l, W'_l, dW_l and dh_l = h_l(after one step) - h_l(init). So
//   row 0      : role "embedding"; h_0 = x (exponent 0), no h'_0, no dh_0 (the input is data)
//   row 1..L   : role "hidden"    (row l has W_l hidden and h_l = output of W_{l-1})
//   row L+1    : role "readout"
//   row L+2    : role "logits"; h_{L+2} = logits, h'_{L+2} = softmax - y ~ 1, no W.
// A quantity that does not exist for a row is std::nullopt (null in JSON).
//
// Everything is an exponent of d; RMS is the square root of the seed's variances (eqs. 3-5 give
// variances, so they are halved here).
#include <optional>
#include <string>
#include <vector>

#include "brain/param/table.h"

namespace scaleinv {

// Alignment exponents of eqs. (18)-(20), each in [1/2, 1] (Appendix D):
//   RMS(W_l dh_l)  ~ d^omega RMS(W_l) RMS(dh_l)     (omega_hidden for l = 1..L, omega_readout for L+1)
//   RMS(dW_l h_l)  ~ d^alpha RMS(dW_l) RMS(h_l)
//   RMS(dW_l dh_l) ~ d^u     RMS(dW_l) RMS(dh_l)
// Defaults: muP's assumptions (omega = 1/2 inside, worst case omega = 1 at the readout (eq. 50),
// full update/activation alignment alpha = u = 1). Everett et al. use omega_readout = 1/2 (sp, ntk).
struct Alignment {
  double omega_hidden = 0.5;
  double omega_readout = 1.0;
  double alpha = 1.0;
  double u = 1.0;
};

// Tolerance on every exponent comparison (== 0, <= 0).
inline constexpr double kExponentTol = 1e-9;

// One row of the prediction (see the indexing note above).
struct LayerExponents {
  int layer = 0;            // seed index l = 0..L+2
  std::string role;         // "embedding", "hidden", "readout" (the role of W_l) or "logits"
  std::optional<double> h;       // RMS(h_l) at init                         (eq. 3)
  std::optional<double> h_grad;  // RMS(h'_l) at init                        (eq. 4; 0 at the logits)
  std::optional<double> w_grad;  // RMS(W'_l) at init, multiplier included   (eq. 5)
  std::optional<double> dw;      // RMS(dW_l), one update                    (eq. 15)
  std::optional<double> dh;      // RMS(dh_l), one update                    (eqs. 16-23)
  // Spectral norms of the stored W_l (multiplier excluded, as W' and dW), ref. [spectral]:
  //   w_spec   ||W_l||_2 at init: iid entries of std d^-b, so d^-b (sqrt(fan_in) + sqrt(fan_out)) ~ d^(1/2-b)
  //   dw_spec  ||dW_l||_2 after one update: RMS(dW) times d^alpha (hidden: a bounded-rank update under
  //            full alignment alpha = 1 has ||dW||_2 ~ RMS(dW) sqrt(fan_in fan_out); alpha = 1/2 a noise-like
  //            one, RMS(dW) sqrt(d)) or d^(1/2) (embedding, readout: one fan is fixed, so the rank is
  //            bounded); Muon's orthogonalized update is eta m^-c times its scale rule, exactly.
  std::optional<double> w_spec;
  std::optional<double> dw_spec;
  // With RMSNorm only: RMS(u_l) of the pre-norm u_l = d^-a W_{l-1} h_{l-1}, l = 1..L+1 (Lemma E.3).
  std::optional<double> u_rms;
};

struct WidthTheory {
  ParamTable param;
  OptFamily family = OptFamily::Adam;
  int depth = 3;  // L, the number of hidden layers
  Alignment align;
  bool rmsnorm = false;

  std::vector<LayerExponents> layers;  // L+3 rows, index = seed layer index

  bool stable_init = false;       // eqs. (6)-(10): RMS(h_1..h_{L+1}) ~ 1, logits O(1)
  bool stable_train = false;      // eqs. (13)-(14), (24)-(27): every RMS(dh_l) = O(1), r_l >= 0
  bool feature_learning = false;  // 1.2.3: stable and RMS(dh_{L+1}) ~ 1
  bool nontrivial = false;        // 1.2.3: stable and RMS(dh_{L+2}) ~ 1 (the logits move)
  // ref. [spectral] Condition 1 on the effective weights d^-a W_l: ||d^-a W_l||_2 (init) and
  // ||d^-a dW_l||_2 (one update) ~ sqrt(fan_out/fan_in), i.e. d^(1/2) (embedding), d^0 (hidden),
  // d^(-1/2) (readout). A sufficient condition for feature learning, not a stability verdict: sp
  // breaks it at the readout's init and is still stable at init (the input is not aligned yet).
  bool spectral_init = false;
  bool spectral_update = false;
  MuonScale muon_scale = MuonScale::Spectral;  // the Muon scale rule (family Muon only)
  std::vector<std::string> spectral_violations;  // "||d^-a W_3||_2 (readout) ~ d^0, Condition 1 asks d^-1/2"
  // Each broken condition, naming the equation, the layer and the numbers, e.g.
  // "eq. (25) layer 2 (hidden): a+c = 0 < alpha = 1, so d^-a dW_2 h_2 ~ d^1 and RMS(dh_3) grows like d^2".
  // Conditions are reported where they break (a layer whose incoming dh is O(1) but whose own
  // terms grow), not again in every layer the growth propagates through.
  std::vector<std::string> failed_conditions;
  // Assumptions of the analysis that the table violates without breaking a verdict of its own,
  // e.g. section 1.2.1's RMS(dW_l) <= RMS(W_l) (c_l >= b_l for Adam).
  std::vector<std::string> notes;

  // Exponent accessors by seed index; they throw std::out_of_range where the quantity does not
  // exist (e.g. h_grad(0), w_grad(L+2)).
  double h(int l) const;
  double h_grad(int l) const;
  double w_grad(int l) const;
  double dw(int l) const;
  double dh(int l) const;
  double logits() const { return h(depth + 2); }
};

// The prediction. L (hidden layers) must be >= 1 and every alignment exponent in [1/2, 1];
// otherwise std::invalid_argument (the CLI checks user input first and raises UserError).
// An alignment exponent given on the command line as `option TEXT` (eqs. 18-20): a number or
// fraction in [1/2, 1]; anything else is a UserError naming the option.
double alignment_value(const std::string& option, const std::string& text);

WidthTheory width_theory(const ParamTable& t, OptFamily f, int L, const Alignment& align = {},
                         bool rmsnorm = false, MuonScale muon_scale = MuonScale::Spectral);

// RMS(dW_l) exponent of eq. (15) for one bigram role (embedding, hidden, readout):
// -c + {SGD: e(W'), Adam: 0, Adafactor: -b, Muon: see below}.
// Muon on a hidden matrix: ||dW||_2 = eta m^-c s, s the scale rule's d^0 (Spectral) or d^(1/2) (Rms),
// so RMS(dW) ~ d^(-c + e(s) - alpha) (the same alignment as w_spec/dw_spec); on the AdamW roles Adam's -c.
double update_exponent(const RoleExponents& row, OptFamily f, double w_grad_exponent, Role role = Role::Hidden,
                       MuonScale muon_scale = MuonScale::Spectral, double alpha = 1.0);
// The Muon scale rule's exponent of d for a hidden (d x d) matrix: 0 (Spectral) or 1/2 (Rms).
double muon_scale_exponent(MuonScale s);

}  // namespace scaleinv
