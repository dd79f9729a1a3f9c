// Width theory of seed 000 section 1 (see width_theory.h for the model and the indexing).
#include "brain/util/errors.h"
#include "brain/theory/width_theory.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "brain/util/fraction.h"

namespace scaleinv {

namespace {

bool greater(double x, double y) { return x > y + kExponentTol; }
bool same(double x, double y) { return std::fabs(x - y) <= kExponentTol; }
std::string F(double x) { return format_fraction(std::fabs(x) <= kExponentTol ? 0.0 : x); }

// "grows like d^1/2", "~ d^0", "vanishes like d^-1"
std::string behaviour(double e) {
  if (greater(e, 0)) return "grows like d^" + F(e);
  if (greater(0, e)) return "vanishes like d^" + F(e);
  return "stays ~ d^0";
}

double get(const std::optional<double>& v, const char* what, int l) {
  if (!v) throw std::out_of_range(fmt::format("width theory: {} does not exist at layer {}", what, l));
  return *v;
}

}  // namespace

double muon_scale_exponent(MuonScale s) { return s == MuonScale::Rms ? 0.5 : 0.0; }

double update_exponent(const RoleExponents& row, OptFamily f, double w_grad_exponent, Role role, MuonScale ms,
                       double alpha) {
  const double c = row.c[static_cast<int>(f)];
  switch (f) {
    case OptFamily::SGD: return -c + w_grad_exponent;  // eq. (15): dW = -eta W'
    case OptFamily::Adam: return -c;                    // eq. (15): dW = -eta sign(W')
    case OptFamily::Adafactor: return -c - row.b;       // eq. (15): dW = -eta RMS(W) sign(W')
    case OptFamily::Muon:                               // ref. [muon]: dW = -eta s O, ||O||_2 ~ 1
      return muon_orthogonalized(role) ? -c + muon_scale_exponent(ms) - alpha : -c;
  }
  return -c;
}

#define ROW_ACCESSOR(NAME)                                                              \
  double WidthTheory::NAME(int l) const {                                               \
    if (l < 0 || l >= static_cast<int>(layers.size()))                                  \
      throw std::out_of_range(fmt::format("width theory: no layer {} (0..{})", l,       \
                                          static_cast<int>(layers.size()) - 1));        \
    return get(layers[l].NAME, #NAME, l);                                               \
  }
ROW_ACCESSOR(h)
ROW_ACCESSOR(h_grad)
ROW_ACCESSOR(w_grad)
ROW_ACCESSOR(dw)
ROW_ACCESSOR(dh)
#undef ROW_ACCESSOR

namespace {

// The bigram model of eq. (1) under one table and optimizer family: the a, b of every weight
// W_0..W_{L+1} and the indexing of width_theory.h.
struct Bigram {
  int L = 1;
  int nw = 3;  // weights W_0..W_{L+1}
  int nh = 4;  // activations h_0..h_{L+2}
  OptFamily family = OptFamily::Adam;
  bool rmsnorm = false;
  std::vector<double> a, b;

  Role role_of(int l) const { return l == 0 ? Role::Embedding : (l <= L ? Role::Hidden : Role::Readout); }
  std::string role_str(int l) const {
    return l == 0 ? "embedding" : (l <= L ? "hidden" : (l == L + 1 ? "readout" : "logits"));
  }
  // With RMSNorm, h_l = RMSNorm(u_l) for l = 1..L+1 (Lemma E.3); the logits are not normalised.
  bool normed(int l) const { return rmsnorm && l >= 1 && l <= L + 1; }
  std::string layer_name(int l) const { return fmt::format("layer {} ({})", l, role_str(l)); }
};

// Exponents at initialization (eqs. 3-5): h_l, the pre-norm pre_l, h'_l, the gradient gout_{l+1}
// at the output of W_l, and W'_l.
struct InitExponents {
  std::vector<double> h, pre, hg, gout, wg;
  // e_dh = e_du - e_rms(u) under RMSNorm
  double thr(const Bigram& m, int l) const { return m.normed(l) ? pre[l] : 0.0; }
};

// Exponents after one update (eqs. 15-23): dW_l, dh_l and the pre-norm du_l.
struct UpdateExponents {
  std::vector<double> dw, dh, du;
};

// Spectral norms of W_l and dW_l (see LayerExponents::w_spec).
struct SpectralExponents {
  std::vector<double> wspec, dwspec;
};

void check_arguments(int L, const Alignment& al) {
  if (L < 1) throw std::invalid_argument(fmt::format("width theory: depth L = {} must be >= 1", L));
  for (auto [name, v] : {std::pair<const char*, double>{"omega_hidden", al.omega_hidden},
                         {"omega_readout", al.omega_readout}, {"alpha", al.alpha}, {"u", al.u}})
    if (!(v >= 0.5 - kExponentTol && v <= 1.0 + kExponentTol))
      throw std::invalid_argument(fmt::format("width theory: alignment {} = {} is outside [1/2, 1] (eqs. 18-20)", name, v));
}

Bigram bigram(const ParamTable& t, OptFamily f, int L, bool rmsnorm) {
  Bigram m;
  m.L = L;
  m.nw = L + 2;
  m.nh = L + 3;
  m.family = f;
  m.rmsnorm = rmsnorm;
  m.a.resize(m.nw);
  m.b.resize(m.nw);
  for (int l = 0; l < m.nw; ++l) {
    const RoleExponents& r = t.row(m.role_of(l));
    m.a[l] = r.a;
    m.b[l] = r.b;
  }
  return m;
}

InitExponents init_exponents(const Bigram& m) {
  const int L = m.L, nw = m.nw, nh = m.nh;
  const std::vector<double>&a = m.a, &b = m.b;
  InitExponents in;
  // ---- Initialization: forward (eq. 3 / Lemma E.4; Lemma E.3 with RMSNorm) ----
  // pre[l] = RMS of d^-a_{l-1} W_{l-1} h_{l-1}: each entry sums d terms for l-1 >= 1 (1/2 in the
  // exponent, independent at init) and picks one column of W_0 for the one-hot input.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double>&h = in.h, &pre = in.pre;
  h.assign(nh, nan);
  pre.assign(nh, nan);
  h[0] = 0;  // one-hot x: RMS ~ V^-1/2, constant in d
  for (int l = 0; l < nw; ++l) {
    pre[l + 1] = -(a[l] + b[l]) + (l >= 1 ? 0.5 : 0.0) + h[l];
    h[l + 1] = m.normed(l + 1) ? 0.0 : pre[l + 1];
  }
  // ---- Initialization: backward (eqs. 4-5; Lemma E.3 with RMSNorm) ----
  // gout[l+1] = RMS of dLoss/d(pre-norm output of W_l); RMSNorm divides by RMS(u) (Lemma E.2).
  std::vector<double>&hg = in.hg, &gout = in.gout, &wg = in.wg;
  hg.assign(nh, nan);
  gout.assign(nh, nan);
  wg.assign(nw, nan);
  hg[L + 2] = 0;  // softmax - y, entries in [-1, 1], V constant
  for (int l = nw - 1; l >= 0; --l) {
    gout[l + 1] = m.normed(l + 1) ? hg[l + 1] - pre[l + 1] : hg[l + 1];
    wg[l] = -a[l] + gout[l + 1] + h[l];  // W'_l = d^-a_l g h_l^T
    // h'_l = d^-a_l W_l^T g sums over d rows (hidden) or V rows (readout).
    if (l >= 1) hg[l] = -(a[l] + b[l]) + (l <= L ? 0.5 : 0.0) + gout[l + 1];
  }
  return in;
}

// ---- One update (eqs. 15-23) ----
UpdateExponents update_exponents(const ParamTable& t, const Bigram& m, const InitExponents& in, const Alignment& al,
                                 MuonScale ms) {
  const int L = m.L, nw = m.nw, nh = m.nh;
  const std::vector<double>&a = m.a, &b = m.b, &h = in.h;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  UpdateExponents up;
  std::vector<double>&dw = up.dw, &dh = up.dh, &du = up.du;
  dw.assign(nw, nan);
  dh.assign(nh, nan);
  du.assign(nh, nan);
  for (int l = 0; l < nw; ++l)
    dw[l] = update_exponent(t.row(m.role_of(l)), m.family, in.wg[l], m.role_of(l), ms, al.alpha);
  du[1] = -a[0] + dw[0] + h[0];  // eq. (17): a column of d^-a_0 dW_0
  dh[1] = du[1] - in.thr(m, 1);
  for (int l = 1; l <= L + 1; ++l) {
    const double omega = l == L + 1 ? al.omega_readout : al.omega_hidden;
    // eqs. (18)-(20): the three terms of dh_{l+1} = d^-a (W dh + dW h + dW dh), e_W = -b.
    const double t1 = -a[l] + omega - b[l] + dh[l];
    const double t2 = -a[l] + al.alpha + dw[l] + h[l];
    const double t3 = -a[l] + al.u + dw[l] + dh[l];
    du[l + 1] = std::max({t1, t2, t3});
    dh[l + 1] = du[l + 1] - in.thr(m, l + 1);
  }
  return up;
}

// ---- Initialization conditions (8)-(10) ----
void init_conditions(const Bigram& m, const InitExponents& in, std::vector<std::string>* out) {
  const int L = m.L;
  const std::vector<double>& h = in.h;
  for (int l = 0; l < m.nw; ++l) {
    const double s = m.a[l] + m.b[l];
    if (l == 0) {
      if (!m.normed(1) && !same(s, 0))
        out->push_back(fmt::format("eq. (8) {}: a+b = {} != 0, so RMS(h_1) {}", m.layer_name(0), F(s),
                                   behaviour(h[1])));
    } else if (l <= L) {
      if (!m.normed(l + 1) && !same(s, 0.5))
        out->push_back(fmt::format("eq. (9) {}: a+b = {} != 1/2, so W_{} scales RMS by d^{} (RMS(h_{}) {})",
                                   m.layer_name(l), F(s), l, F(0.5 - s), l + 1, behaviour(h[l + 1])));
    } else if (greater(0.5, s)) {
      out->push_back(fmt::format("eq. (10) {}: a+b = {} < 1/2, so W_{} scales RMS by d^{} (the logits {})",
                                 m.layer_name(l), F(s), l, F(0.5 - s), behaviour(h[L + 2])));
    }
  }
}

// The name of an update exponent a layer's condition compares: a+c for Adam (eq. 24), a-e(dW) else.
std::string update_name(const Bigram& m) { return m.family == OptFamily::Adam ? "a+c" : "a-e(dW)"; }

// eq. (17)/(24): the embedding's update moves h_1 directly.
void embedding_update_condition(const Bigram& m, const InitExponents& in, const UpdateExponents& up,
                                std::vector<std::string>* out) {
  if (!greater(up.dh[1], 0)) return;
  std::string desc = update_name(m);
  double val = m.a[0] - up.dw[0];
  if (m.normed(1)) {
    desc += "+e(RMS u_1)";
    val += in.thr(m, 1);
  }
  out->push_back(fmt::format("eq. ({}) {}: {} = {} < 0, so RMS(dh_1) {}", m.family == OptFamily::Adam ? 24 : 17,
                             m.layer_name(0), desc, F(val), behaviour(up.dh[1])));
}

// Conditions (21)-(23) of W_l, l = 1..L+1, evaluated with an O(1) incoming dh_l
// (r_l = max(-e(dh_l), 0)), so a break is reported at the layer that causes it and not again
// where it propagates.
void layer_update_conditions(const Bigram& m, const InitExponents& in, const UpdateExponents& up,
                             const Alignment& al, int l, std::vector<std::string>* out) {
  const int L = m.L;
  const std::vector<double>&a = m.a, &b = m.b, &h = in.h, &dw = up.dw, &dh = up.dh;
  const std::string c_name = update_name(m);
  const bool readout = l == L + 1;
  const double omega = readout ? al.omega_readout : al.omega_hidden;
  const double r = std::max(-dh[l], 0.0);
  const double th = in.thr(m, l + 1);
  const bool has_r = greater(r, 0);
  const std::string r_part = has_r ? "+r" : "";
  const std::string u_part = m.normed(l + 1) ? fmt::format("+e(RMS u_{})", l + 1) : "";
  // RMS(dh_{l+1}), naming the logits
  const std::string total =
      l + 1 == L + 2 ? fmt::format("RMS(dh_{}) (the logits)", l + 1) : fmt::format("RMS(dh_{})", l + 1);
  auto report = [&](int eq, const std::string& desc, double val, const std::string& rhs_name, double rhs,
                    const std::string& term, double term_e, bool uses_r) {
    std::string msg = fmt::format("eq. ({}) {}: {} = {} < {} = {}", eq, m.layer_name(l), desc, F(val), rhs_name,
                                  F(rhs));
    if (has_r && uses_r) msg += fmt::format(" (r = {}: dh_{} ~ d^{})", F(r), l, F(-r));
    msg += fmt::format(", so {} alone makes {} grow like d^{}", term, total, F(term_e));
    if (!same(term_e, dh[l + 1])) msg += fmt::format(" (d^{} in all)", F(dh[l + 1]));
    out->push_back(msg);
  };
  // term 1, W_l dh_l: eq. (21); (26) for a hidden layer at a+b = 1/2, (27) at the readout.
  {
    const double e = -a[l] + omega - b[l] - r - th;
    if (greater(e, 0)) {
      int eq = 21;
      if (!has_r) eq = readout ? 27 : ((m.normed(l + 1) || same(a[l] + b[l], 0.5)) ? 26 : 21);
      report(eq, "a+b" + r_part + u_part, a[l] + b[l] + r + th, readout ? "omega_readout" : "omega_hidden", omega,
             fmt::format("d^-a W_{} dh_{}", l, l), e, true);
    }
  }
  // term 2, dW_l h_l: eq. (22); (25) under full alignment alpha = 1.
  const double e2 = -a[l] + al.alpha + dw[l] + h[l] - th;
  {
    const double e = e2;
    if (greater(e, 0)) {
      std::string desc = c_name;
      if (!same(h[l], 0)) desc += fmt::format("-e(h_{})", l);
      report(same(al.alpha, 1.0) ? 25 : 22, desc + u_part, a[l] - dw[l] - h[l] + th, "alpha", al.alpha,
             fmt::format("d^-a dW_{} h_{}", l, l), e, false);
    }
  }
  // term 3, dW_l dh_l: eq. (23). With an O(1) dh_l it only adds to term 2 when u > alpha (the
  // seed folds it into (25) for alpha = u = 1), so it is reported where it is the larger one.
  {
    const double e = -a[l] + al.u + dw[l] - r - th;
    if (greater(e, 0) && (!greater(e2, 0) || greater(e, e2)))
      report(23, c_name + r_part + u_part, a[l] - dw[l] + r + th, "u", al.u, fmt::format("d^-a dW_{} dh_{}", l, l),
             e, true);
  }
}

// ---- Verdicts: eqs. (6)-(10), (13)-(14), (24)-(27) and sec. 1.2.3 ----
void verdicts(const Bigram& m, const InitExponents& in, const UpdateExponents& up, WidthTheory* w) {
  const int L = m.L;
  const std::vector<double>&h = in.h, &dh = up.dh;
  w->stable_init = true;
  for (int l = 1; l <= L + 1; ++l) w->stable_init = w->stable_init && same(h[l], 0);  // eqs. (6), (8)-(9)
  w->stable_init = w->stable_init && !greater(h[L + 2], 0);                           // eqs. (7), (10)
  w->stable_train = true;
  for (int l = 1; l <= L + 2; ++l) w->stable_train = w->stable_train && !greater(dh[l], 0);  // r_l >= 0
  const bool stable = w->stable_init && w->stable_train;
  w->feature_learning = stable && same(dh[L + 1], 0);  // r_{L+1} = 0
  w->nontrivial = stable && same(dh[L + 2], 0);        // r_{L+2} = 0
  if (stable && !w->feature_learning)
    w->failed_conditions.push_back(fmt::format("sec. 1.2.3 feature learning: RMS(dh_{}) {} (r_{} = {} > 0)", L + 1,
                                               behaviour(dh[L + 1]), L + 1, F(-dh[L + 1])));
  if (stable && !w->nontrivial)
    w->failed_conditions.push_back(fmt::format("sec. 1.2.3 nontriviality: RMS(dh_{}) (the logits) {} (r_{} = {} > 0)",
                                               L + 2, behaviour(dh[L + 2]), L + 2, F(-dh[L + 2])));
}

// Section 1.2.1: the analysis of later steps assumes the init keeps dominating, RMS(dW) <= RMS(W).
void assumption_notes(const Bigram& m, const UpdateExponents& up, std::vector<std::string>* notes) {
  for (int l = 0; l < m.nw; ++l)
    if (greater(up.dw[l], -m.b[l]))
      notes->push_back(fmt::format("sec. 1.2.1 {}: RMS(dW_{}) ~ d^{} > RMS(W_{}) ~ d^{}: after a few steps the "
                                   "updates, not the init, set the weight scale (the analysis assumes c >= b)",
                                   m.layer_name(l), l, F(up.dw[l]), l, F(-m.b[l])));
  if (m.rmsnorm)
    notes->push_back(
        "RMSNorm: dh of a normalised layer is the update relative to RMS(u) (Lemma E.2); a positive exponent "
        "means the update swamps u, while RMS(h) itself stays 1");
}

// ---- Spectral norms and ref. [spectral] Condition 1 (see LayerExponents::w_spec) ----
SpectralExponents spectral_condition(const Bigram& m, const UpdateExponents& up, const Alignment& al,
                                     WidthTheory* w) {
  const int L = m.L, nw = m.nw;
  const std::vector<double>&a = m.a, &b = m.b, &dw = up.dw;
  SpectralExponents sp;
  std::vector<double>&wspec = sp.wspec, &dwspec = sp.dwspec;
  wspec.resize(nw);
  dwspec.resize(nw);
  w->spectral_init = w->spectral_update = true;
  for (int l = 0; l < nw; ++l) {
    const bool hidden = l >= 1 && l <= L;
    wspec[l] = 0.5 - b[l];
    dwspec[l] = dw[l] + (hidden ? al.alpha : 0.5);
    const double want = l == 0 ? 0.5 : (hidden ? 0.0 : -0.5);  // sqrt(fan_out/fan_in)
    const char* fans = l == 0 ? "sqrt(d/V)" : (hidden ? "sqrt(d/d)" : "sqrt(V/d)");
    auto check = [&](double e, const char* what, bool* ok) {
      if (same(e - a[l], want)) return;
      *ok = false;
      w->spectral_violations.push_back(fmt::format("||d^-a {}_{}||_2 ({}) ~ d^{}, Condition 1 asks {} ~ d^{}", what,
                                                   l, m.role_str(l), F(e - a[l]), fans, F(want)));
    };
    check(wspec[l], "W", &w->spectral_init);
    check(dwspec[l], "dW", &w->spectral_update);
  }
  return sp;
}

// ---- Rows ----
std::vector<LayerExponents> layer_rows(const Bigram& m, const InitExponents& in, const UpdateExponents& up,
                                       const SpectralExponents& sp) {
  std::vector<LayerExponents> rows(m.nh);
  for (int l = 0; l < m.nh; ++l) {
    LayerExponents& row = rows[l];
    row.layer = l;
    row.role = m.role_str(l);
    row.h = in.h[l];
    if (l >= 1) row.h_grad = in.hg[l];
    if (l < m.nw) {
      row.w_grad = in.wg[l];
      row.dw = up.dw[l];
      row.w_spec = sp.wspec[l];
      row.dw_spec = sp.dwspec[l];
    }
    if (l >= 1) row.dh = up.dh[l];
    if (m.normed(l)) row.u_rms = in.pre[l];
  }
  return rows;
}

}  // namespace

WidthTheory width_theory(const ParamTable& t, OptFamily f, int L, const Alignment& al, bool rmsnorm, MuonScale ms) {
  check_arguments(L, al);
  WidthTheory w;
  w.param = t;
  w.family = f;
  w.depth = L;
  w.align = al;
  w.rmsnorm = rmsnorm;
  w.muon_scale = ms;

  const Bigram m = bigram(t, f, L, rmsnorm);
  const InitExponents in = init_exponents(m);                    // eqs. (3)-(5)
  const UpdateExponents up = update_exponents(t, m, in, al, ms);  // eqs. (15)-(23)

  // Broken conditions in the order init (8)-(10), update (17)/(24), (21)-(27) by layer, sec. 1.2.3.
  init_conditions(m, in, &w.failed_conditions);
  embedding_update_condition(m, in, up, &w.failed_conditions);
  for (int l = 1; l <= L + 1; ++l) layer_update_conditions(m, in, up, al, l, &w.failed_conditions);
  verdicts(m, in, up, &w);
  assumption_notes(m, up, &w.notes);

  const SpectralExponents sp = spectral_condition(m, up, al, &w);
  w.layers = layer_rows(m, in, up, sp);
  return w;
}

double alignment_value(const std::string& option, const std::string& text) {
  double v = 0;
  if (!parse_fraction(text, &v))
    throw UserError("command line", option, fmt::format("cannot read '{}' as a number", text),
                    "give a number or fraction in [1/2, 1], e.g. 1/2");
  if (!(v >= 0.5 - kExponentTol && v <= 1.0 + kExponentTol))
    throw UserError("command line", option, fmt::format("{} is outside [1/2, 1] (seed 000 eqs. 18-20)", text),
                    "give a value between 1/2 (independent) and 1 (fully aligned)");
  return v;
}

}  // namespace scaleinv
