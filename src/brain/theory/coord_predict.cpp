// The coordinate check's predictions (see coordcheck.h, "From the one-step exponents to step t"):
// the exponent a mapped layer's quantity has at a step, from the width theory (width_prediction)
// or seed 004's depth theory (depth_prediction), and the width theory a zoo model is judged
// against (theory_shape).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "brain/theory/coord_predict.h"
#include "brain/theory/theory_report.h"  // format_exponent
#include "brain/util/slope_fit.h"      // finite_size_term

namespace scaleinv::prediction {

namespace {

std::optional<double> max_opt(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// The one-step exponents a target has in the width theory.
struct BaseExponents {
  std::optional<double> ws, dws;  // ||W|| at init, ||dW|| of one update
  std::optional<double> h, dh, hg, wg, dw;
  // dh is fed by an update that already grows with width (row `fed_row`, exponent `fed_e`): the
  // theory then compounds (W dh_l, dW dh_l with e(dh_l) > 0), exponents reached only once that
  // upstream update is >> 1 (eta d >> 1), not a finite-width prediction; see width_prediction.
  bool fed_by_growth = false;
  int fed_row = 0;
  double fed_e = 0;
  const char* no_h = nullptr;  // why h has no exponent where the row has none (TiedLogits)
};

// Row l's dh is computed from row l-1's (eqs. 16-23); rows 0 and 1 take no incoming dh.
void check_fed(const WidthTheory& w, int l, BaseExponents& b) {
  if (l < 2 || l - 1 >= static_cast<int>(w.layers.size())) return;
  const auto& in = w.layers[static_cast<size_t>(l - 1)].dh;
  if (in && *in > kExponentTol && !b.fed_by_growth) {
    b.fed_by_growth = true;
    b.fed_row = l - 1;
    b.fed_e = *in;
  }
}

BaseExponents base_exponents(const WidthTheory& w, const Mapping& m) {
  const int L = w.depth;
  auto row = [&](int l) -> const LayerExponents& { return w.layers.at(static_cast<size_t>(l)); };
  BaseExponents b;
  switch (m.target) {
    case Target::SeedRow:
      if (m.row < 0 || m.row >= static_cast<int>(w.layers.size())) return b;
      b.h = row(m.row).h;
      b.dh = row(m.row).dh;
      b.hg = row(m.row).h_grad;
      b.wg = row(m.row).w_grad;
      b.dw = row(m.row).dw;
      b.ws = row(m.row).w_spec;
      b.dws = row(m.row).dw_spec;
      check_fed(w, m.row, b);
      break;
    case Target::Stream:
      b.h = row(1).h;
      for (int l = 1; l <= L + 1; ++l) {
        b.dh = max_opt(b.dh, row(l).dh);
        b.hg = max_opt(b.hg, row(l).h_grad);
        check_fed(w, l, b);
      }
      break;
    case Target::EmbeddingW:
      b.wg = row(0).w_grad;
      b.dw = row(0).dw;
      b.ws = row(0).w_spec;
      b.dws = row(0).dw_spec;
      break;
    case Target::HiddenW:
    case Target::HiddenWQK:
      for (int l = 1; l <= L; ++l) {
        b.wg = max_opt(b.wg, row(l).w_grad);
        b.dw = max_opt(b.dw, row(l).dw);
        b.ws = max_opt(b.ws, row(l).w_spec);
        b.dws = max_opt(b.dws, row(l).dw_spec);
      }
      break;
    case Target::ReadoutW:
    case Target::RouterW:  // on the router theory (width_prediction)
      b.wg = row(L + 1).w_grad;
      b.dw = row(L + 1).dw;
      b.ws = row(L + 1).w_spec;
      b.dws = row(L + 1).dw_spec;
      break;
    case Target::Logits:
    case Target::TiedLogits:
    case Target::RouterLogits:  // on the router theory (width_prediction)
      b.h = row(L + 2).h;
      b.dh = row(L + 2).dh;
      b.hg = row(L + 2).h_grad;
      check_fed(w, L + 2, b);
      if (m.target == Target::TiedLogits) {
        b.h.reset();
        b.no_h = "no prediction: a tied readout is the input embedding, aligned at init with the stream it reads "
                 "(one Theta(1) logit per position beside d^-1/2 ones); see dh";
      }
      break;
    default: break;
  }
  return b;
}

}  // namespace

// From the one-step exponents to a step t (seed 000 1.2.1):
//   h(t) = h(0) + dh(t): exponent max(e_h, e_dh) for t >= 1;
//   dh after t updates: the one-step exponent;
//   h', W' at t >= 1: the init exponent while the parameterization is stable (the updates do not
//     change the weights' scale); after an unstable update the one-step theory says nothing;
//   dW at t >= 2: the one-step exponent while stable (for Adam too: its normalised update still
//     depends on how consistent successive gradients are, which an unstable update changes).
// qk_unmodelled: the head dimension grows with width (fixed head count) and the logit scale is
// d_head^-p with p != 1/2. Then the gradients of W_q, W_k carry an extra d_head^(1/2 - p) (the
// logits' gradient sums d_head terms incoherently at init, and the scale multiplies it), which
// the bigram theory does not model: their W' (and SGD's dW, which follows W') get no prediction.
Pred width_prediction(const WidthTheory& w_in, const Mapping& m, CoordQuantity q, int step, bool qk_unmodelled) {
  Pred p;
  // A mixture's router (docs/moe.md "The router") is a readout of the normalised stream: its W and
  // logits follow rows L+1 and L+2 of the theory whose readout row is the router row. Its gradient
  // is not the cross-entropy's: it reaches the logits through the gates, dL/dg_j = <h', y_j>, which
  // at init is uncorrelated with the token (the experts y_j are random functions), so the gradient
  // of W_r is a zero-mean mix of the stream's tokens. Its update therefore meets a new token like
  // a random vector (alpha = u = 1/2 of eqs. 18-20, not the readout's 1), and W_r, never trained
  // towards dx, meets dx unaligned (omega = 1/2): dz ~ d^(1/2-a-c) (muP: d^-1/2). W' and h' (and
  // SGD's dW, which is W') get no prediction.
  const bool router = m.target == Target::RouterW || m.target == Target::RouterLogits;
  if (router && (q == CoordQuantity::WGrad || q == CoordQuantity::HGrad ||
                 ((q == CoordQuantity::DW || q == CoordQuantity::DWSpec) && w_in.family == OptFamily::SGD))) {
    p.why = "no prediction: the router's gradient comes through the gates and the experts' outputs, not the "
            "cross-entropy the readout theory models";
    return p;
  }
  std::optional<WidthTheory> routed;
  if (router) {
    ParamTable t = w_in.param;
    t.row(Role::Readout) = t.row(Role::Router);
    Alignment noise = w_in.align;
    noise.omega_readout = noise.alpha = noise.u = 0.5;
    routed = width_theory(t, w_in.family, w_in.depth, noise, w_in.rmsnorm, w_in.muon_scale);
  }
  const WidthTheory& w = routed ? *routed : w_in;
  if (m.target == Target::HiddenWQK && qk_unmodelled &&
      (q == CoordQuantity::WGrad ||
       ((q == CoordQuantity::DW || q == CoordQuantity::DWSpec) && w.family == OptFamily::SGD))) {
    p.why = "no prediction: d_head grows with width and the logit scale is not d_head^-1/2, so W_q, W_k's "
            "gradient carries d_head^(1/2-p), outside the bigram theory";
    return p;
  }
  const BaseExponents b = base_exponents(w, m);
  const bool stable = w.stable_init && w.stable_train;
  const std::string unstable_note = "no prediction: after an unstable update the one-step theory does not follow it";
  if (!stable && step >= 2) {
    // After one unstable update the weights' scale has changed (sec. 1.2.1: RMS(dW) outgrows
    // RMS(W)), so neither later gradients nor Adam's later updates (whose size depends on how
    // consistent successive gradients are) keep the one-step exponents.
    p.why = "no prediction: unstable parameterization; the one-step theory covers steps 0 and 1 only";
    return p;
  }
  if ((q == CoordQuantity::DH || (q == CoordQuantity::H && step > 0)) && b.fed_by_growth) {
    p.why = fmt::format("no prediction: fed by dh_{} ~ d^{}; the theory's d^{} compounds it, reached only for "
                        "eta*d >> 1",
                        b.fed_row, format_exponent(b.fed_e), b.dh ? format_exponent(*b.dh) : "?");
    return p;
  }
  switch (q) {
    case CoordQuantity::H:
      // h_t = h_0 + dh_t: one power law only when both have the same exponent; otherwise the
      // measured slope mixes d^e(h) and d^e(dh) with weights set by the LR, and the two are judged
      // separately (h at step 0, dh).
      if (step == 0 || !b.dh || (b.h && std::fabs(*b.dh - *b.h) <= kExponentTol)) {
        p.e = b.h;
      } else if (b.h) {
        p.why = fmt::format("no prediction: h_t = h_0 (d^{}) + dh_t (d^{}) mixes two exponents; see h at step 0 and dh",
                            format_exponent(*b.h), format_exponent(*b.dh));
        return p;
      }
      if (!p.e && b.no_h) {
        p.why = b.no_h;
        return p;
      }
      break;
    case CoordQuantity::DH: p.e = step == 0 ? std::nullopt : b.dh; break;
    case CoordQuantity::HGrad:
    case CoordQuantity::WGrad: {
      const auto e = q == CoordQuantity::HGrad ? b.hg : b.wg;
      if (step == 0 || stable) {
        p.e = e;
      } else if (e) {
        p.why = unstable_note;
        return p;
      }
      break;
    }
    case CoordQuantity::DW:
    case CoordQuantity::DWSpec: {
      // (Adam's update is normalised, but its size at t >= 2 depends on how consistent the
      // gradients of successive steps are, which an unstable update changes with width.)
      const auto e = q == CoordQuantity::DW ? b.dw : b.dws;
      if (step == 1 || (step >= 2 && stable)) {
        p.e = e;
      } else if (step >= 2 && e) {
        p.why = unstable_note;
        return p;
      }
      break;
    }
    case CoordQuantity::WSpec:
      // W_t = W_0 + the updates: one power law when both spectral norms share the exponent (as under
      // the spectral condition), otherwise judged at step 0 (and the updates as ||dW||).
      if (step == 0 || (stable && b.dws && b.ws && std::fabs(*b.dws - *b.ws) <= kExponentTol)) {
        p.e = b.ws;
      } else if (b.ws) {
        p.why = "no prediction: W_t = W_0 + updates mixes two exponents; see ||W|| at step 0 and ||dW||";
        return p;
      }
      break;
  }
  p.why = p.e ? m.what : "no prediction";
  return p;
}

Pred depth_prediction(const DepthTheory& d, const Mapping& m, CoordQuantity q, int step, bool power_law) {
  Pred p;
  if (!power_law) {
    p.why = "no prediction: alpha < 1/2 without pre-LN grows exponentially in L (seed 004 Claim 5.1)";
    return p;
  }
  // The seed freezes U and V; here they train, which adds an L^0 change (the embedding's update,
  // carried up the stream) and, at the logits, dV x_L ~ L^(1/2 - alpha).
  const double init = d.top_init_rho_half;
  const double upd = m.target == Target::DepthTop ? std::max(d.update_correlated, 0.0)
                                                  : std::max({d.update_correlated, 0.0, init});
  switch (q) {
    case CoordQuantity::H:
      if (step == 0 || (d.stable_init && std::fabs(init - upd) <= kExponentTol)) {
        p.e = init;
      } else {
        p.why = d.stable_init
                    ? fmt::format("no prediction: h_t = h_0 (L^{}) + dh_t (L^{}) mixes two exponents; see h at step 0 "
                                  "and dh",
                                  format_exponent(init), format_exponent(upd))
                    : std::string("no prediction: the seed derives the update exponent only for a stable init "
                                  "(alpha >= 1/2)");
        return p;
      }
      break;
    case CoordQuantity::DH:
      if (step >= 1 && d.stable_init) {
        p.e = upd;
      } else if (step >= 1) {
        p.why = "no prediction: the seed derives the update exponent only for a stable init (alpha >= 1/2)";
        return p;
      }
      break;
    default: break;
  }
  p.why = p.e ? m.what : "no prediction";
  return p;
}

Pred experts_prediction(const ParamTable& t, OptFamily f, const Mapping& m, CoordQuantity q, int step) {
  Pred p;
  if (!m.found) {
    p.why = "no prediction";
    return p;
  }
  const int fi = static_cast<int>(f);
  const bool normalised = f != OptFamily::SGD;  // Adam, Adafactor, Muon (the router on AdamW, each expert orthogonalized)
  const double x = t.row(m.target == Target::RouterW ? Role::Router : Role::Expert).experts_lr[fi];
  // A normalised update with one expert-count factor E^-x on both routed roles (x = 0: "tune dense
  // once", the dense model's activations carry to every E).
  const double xe = t.row(Role::Expert).experts_lr[fi];
  const bool carries = normalised && std::fabs(t.row(Role::Router).experts_lr[fi] - xe) <= kExponentTol;
  const std::string share = "each token passes through k experts whatever E is";
  const std::string after = "no prediction after the first update";
  auto band = [&] {
    // An expert's normalised update sums its M/E assignments: its alignment with one of them goes
    // from E^0 (many per expert, the dense model's regime) to (M/E)^-1/2 (few: grows like E^1/2).
    p.e = 0.25 - xe;
    p.band = 0.25;
    p.why = fmt::format("between E^{} and E^{}: a normalised update (LR E^-x, x = {}) over M/E assignments per expert",
                        format_exponent(-xe), format_exponent(0.5 - xe), format_exponent(xe));
  };
  // The embedding's output: below every expert, moved by its own normalised update only.
  const bool below = m.target == Target::SeedRow && m.row == 1;
  switch (q) {
    case CoordQuantity::H:
      if (step == 0 || (below && normalised)) {
        p.e = 0.0;
        p.why = step == 0 ? share + " (init)" : "the embedding's output: below the experts, a normalised update";
      } else if (carries && std::fabs(xe) <= kExponentTol) {  // h_0 + dh_t: one interval only when x = 0
        band();
      } else if (carries) {
        p.why = "no prediction: h_t = h_0 (E^0) + dh_t mixes two exponents; see dh";
      } else {
        p.why = after + (normalised ? ": router and experts have different experts_lr" : " under SGD (docs/moe.md)");
      }
      return p;
    case CoordQuantity::DH:
      if (below && normalised) {
        p.e = 0.0;
        p.why = "the embedding's output: below the experts, a normalised update";
      } else if (carries) band();
      else p.why = after + (normalised ? ": router and experts have different experts_lr" : " under SGD (docs/moe.md)");
      return p;
    case CoordQuantity::HGrad:
      if (step > 0) {
        p.why = after;
      } else if (m.target == Target::RouterLogits) {
        // The renormalised top-k gates depend on the k chosen logits only: per token k of the E
        // coordinates of dL/dz are nonzero, so their RMS goes like (k/E)^1/2.
        p.e = -0.5;
        p.why = "router logits' gradient at init: k of E coordinates nonzero per token (renormalised top-k)";
      } else {
        p.e = 0.0;
        p.why = share + " (init)";
      }
      return p;
    case CoordQuantity::WGrad:
      if (step > 0) {
        p.why = after;
      } else {
        p.e = m.routed ? -0.5 : 0.0;
        p.why = m.routed ? "sums the M/E assignments routed to it, uncorrelated at init" : "not routed; " + share;
      }
      return p;
    case CoordQuantity::DW:
      if (step >= 2) {
        p.why = "no prediction after the first update";
      } else if (m.routed) {
        p.e = normalised ? -x : -x - 0.5;
        p.why = normalised ? fmt::format("normalised update x LR E^-x (x = {})", format_exponent(x))
                           : fmt::format("LR E^-x (x = {}) x W' E^-1/2", format_exponent(x));
      } else {
        p.e = 0.0;
        p.why = "not routed; " + share;
      }
      return p;
    case CoordQuantity::WSpec:
    case CoordQuantity::DWSpec:
      if (m.routed) {
        p.why = "no prediction: the largest of E matrices' spectral norms";
      } else if ((q == CoordQuantity::WSpec && step == 0) || (q == CoordQuantity::DWSpec && step == 1)) {
        p.e = 0.0;
        p.why = "not routed; " + share;
      } else {
        p.why = "no prediction";
      }
      return p;
  }
  return p;
}

double experts_finite_term(double e_min, double e_max, double m, bool occupancy) {
  if (!(e_min > 0) || !(e_max > e_min) || !(m > 0)) return 0;
  // The assignments per expert, M/E, play the width's part with one incoherent direction each:
  // finite_size_term over x = M/E (from M/E_max to M/E_min) with n = 1 is
  // (1/2) [ln(1 + E_max/M) - ln(1 + E_min/M)] / ln(E_max/E_min).
  double term = finite_size_term(m / e_max, m / e_min, 1);
  if (occupancy) {
    auto occ = [m](double e) { return 1 - std::pow(1 - 1 / e, m); };
    term += 0.5 * std::fabs(std::log(occ(e_max) / occ(e_min))) / std::log(e_max / e_min);
  }
  return term;
}

TheoryShape theory_shape(const ModelConfig& mc, int depth) { return model_kind(mc.kind).theory_shape(mc, depth); }

}  // namespace scaleinv::prediction
