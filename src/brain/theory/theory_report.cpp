// Rendering of the theory engine's predictions (see theory_report.h).
#include "brain/theory/theory_report.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "brain/util/fraction.h"

namespace scaleinv {

namespace {

std::string cell(const std::optional<double>& v) { return v ? format_exponent(*v) : "-"; }

nlohmann::json num(const std::optional<double>& v) {
  if (!v) return nullptr;
  return std::fabs(*v) <= kExponentTol ? 0.0 : *v;
}

const char* yes(bool b) { return b ? "yes" : "NO"; }

}  // namespace

std::string format_exponent(double e) { return format_fraction(std::fabs(e) <= kExponentTol ? 0.0 : e); }

std::string theory_table(const WidthTheory& w, const DepthTheory& d) {
  const int L = w.depth;
  std::string s;
  const std::string opt = w.family == OptFamily::Muon
                              ? fmt::format("muon (scale rule {})", muon_scale_name(w.muon_scale))
                              : std::string(family_name(w.family));
  s += fmt::format("theory: param {}, optimizer {}, bigram model (seed 000 eq. 1) with L = {} hidden layers{}\n",
                   w.param.name, opt, L, w.rmsnorm ? ", RMSNorm between layers" : "");
  s += fmt::format("alignment (eqs. 18-20): omega_hidden = {}, omega_readout = {}, alpha = {}, u = {}\n",
                   format_exponent(w.align.omega_hidden), format_exponent(w.align.omega_readout),
                   format_exponent(w.align.alpha), format_exponent(w.align.u));
  s += "exponents e of width d, RMS ~ d^e; row l: h_l = input of W_l, h' = dLoss/dh_l, dW and dh after one step;\n"
         "||W||, ||dW||: spectral norms of the stored W_l at init and of one update (ref. [spectral])\n";
  const bool u_col = w.rmsnorm;
  s += fmt::format("{:>5}  {:<10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}{}\n", "layer", "role", "h", "h'", "W'",
                   "dW", "dh", "||W||", "||dW||", u_col ? fmt::format(" {:>6}", "RMS(u)") : "");
  s += std::string(u_col ? 72 : 65, '-') + "\n";
  for (const LayerExponents& r : w.layers)
    s += fmt::format("{:>5}  {:<10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}{}\n", r.layer, r.role, cell(r.h),
                     cell(r.h_grad), cell(r.w_grad), cell(r.dw), cell(r.dh), cell(r.w_spec), cell(r.dw_spec),
                     u_col ? fmt::format(" {:>6}", cell(r.u_rms)) : "");
  s += "verdicts:\n";
  s += fmt::format("  stable at init (eqs. 6-10)                  {}\n", yes(w.stable_init));
  // The training conditions (13)-(14), (24)-(27) assume a stable init; feature learning and
  // nontriviality are judged (1.2.3, "stronger conditions") only for a parameterization stable at
  // init and in training. Each line says which of these it is.
  const std::string train_verdict = w.stable_init ? yes(w.stable_train) : "not judged (unstable at init)";
  auto stronger = [&](bool v) -> std::string {
    if (!w.stable_init) return "NO (unstable at init; 1.2.3 judges it only for stable parameterizations)";
    if (!w.stable_train) return "NO (unstable in training; 1.2.3 judges it only for stable parameterizations)";
    return yes(v);
  };
  s += fmt::format("  stable in training (eqs. 13-14, 24-27)      {}\n", train_verdict);
  s += fmt::format("  feature learning, RMS(dh_{}) ~ 1 (1.2.3)     {}\n", L + 1, stronger(w.feature_learning));
  s += fmt::format("  nontrivial, logits move ~ 1 (1.2.3)         {}\n", stronger(w.nontrivial));
  s += fmt::format("  spectral condition at init (Condition 1)    {}\n", yes(w.spectral_init));
  s += fmt::format("  spectral condition of updates (Condition 1) {}\n", yes(w.spectral_update));
  if (w.failed_conditions.empty()) {
    s += "failed conditions: none\n";
  } else {
    s += "failed conditions:\n";
    for (const auto& c : w.failed_conditions) s += "  - " + c + "\n";
  }
  if (!w.spectral_violations.empty()) {
    s += "spectral condition (ref. [spectral] Condition 1, effective weights d^-a W):\n";
    for (const auto& c : w.spectral_violations) s += "  - " + c + "\n";
  }
  if (!w.notes.empty()) {
    s += "notes:\n";
    for (const auto& n : w.notes) s += "  - " + n + "\n";
  }
  s += fmt::format("depth (residual network, seed 004): alpha = branch = {}, gamma = {} ({})\n",
                   format_exponent(d.alpha), format_exponent(d.gamma), family_name(w.family));
  s += "  " + d.label + "\n";
  s += fmt::format("  stable {}, faithful {}, nontrivial {}, feature learning {}, maximal diversity {}, kappa {}\n",
                   yes(d.stable), yes(d.faithful), yes(d.nontrivial), yes(d.feature_learning), yes(d.max_diversity),
                   d.kappa ? format_exponent(*d.kappa) : "-");
  s += fmt::format("  exponents of L: top activation at init L^{} (rho = 1/2) or L^{} (rho = 1); one-step update "
                   "L^{} (correlated) or L^{} (uncorrelated); per block L^{}\n",
                   format_exponent(d.top_init_rho_half), format_exponent(d.top_init_rho_one),
                   format_exponent(d.update_correlated), format_exponent(d.update_uncorrelated),
                   format_exponent(d.block_update));
  s += fmt::format("  post-LN transport bound (eqs. 33, 35), shortcut L^{}: {:.3g} at L = {}\n",
                   format_exponent(d.shortcut), postln_transport_bound(d.shortcut, L), L);
  return s;
}

nlohmann::json theory_json(const WidthTheory& w, const DepthTheory& d) {
  nlohmann::json j;
  j["stable_init"] = w.stable_init;
  j["stable_train"] = w.stable_train;
  j["stable_train_judged"] = w.stable_init;  // the training conditions assume a stable init
  j["feature_learning"] = w.feature_learning;
  j["nontrivial"] = w.nontrivial;
  j["spectral_init"] = w.spectral_init;
  j["spectral_update"] = w.spectral_update;
  j["spectral_violations"] = w.spectral_violations;
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerExponents& r : w.layers) {
    nlohmann::json o;
    o["layer"] = r.layer;
    o["role"] = r.role;
    o["h"] = num(r.h);
    o["h_grad"] = num(r.h_grad);
    o["w_grad"] = num(r.w_grad);
    o["dw"] = num(r.dw);
    o["dh"] = num(r.dh);
    o["w_spec"] = num(r.w_spec);
    o["dw_spec"] = num(r.dw_spec);
    if (w.rmsnorm) o["u_rms"] = num(r.u_rms);
    layers.push_back(std::move(o));
  }
  j["layers"] = std::move(layers);
  j["failed_conditions"] = w.failed_conditions;
  j["notes"] = w.notes;

  nlohmann::json dj;
  dj["alpha"] = d.alpha;
  dj["gamma"] = d.gamma;
  dj["shortcut"] = d.shortcut;
  dj["region"] = depth_region_name(d.region);
  dj["label"] = d.label;
  dj["stable_init"] = d.stable_init;
  dj["stable_train"] = d.stable_train;
  dj["stable"] = d.stable;
  dj["faithful"] = d.faithful;
  dj["nontrivial"] = d.nontrivial;
  dj["feature_learning"] = d.feature_learning;
  dj["max_diversity"] = d.max_diversity;
  dj["kappa"] = d.kappa ? nlohmann::json(*d.kappa) : nlohmann::json(nullptr);
  dj["exponents_of_L"] = {{"top_init_rho_half", d.top_init_rho_half},
                          {"top_init_rho_one", d.top_init_rho_one},
                          {"update_correlated", d.update_correlated},
                          {"update_uncorrelated", d.update_uncorrelated},
                          {"block_update", d.block_update}};
  dj["postln_transport_bound"] = {{"L", w.depth}, {"bound", postln_transport_bound(d.shortcut, w.depth)}};
  j["depth"] = std::move(dj);

  j["param"] = param_to_json(w.param);
  j["optimizer"] = family_name(w.family);
  if (w.family == OptFamily::Muon) j["muon_scale"] = muon_scale_name(w.muon_scale);
  j["alignment"] = {{"omega_hidden", w.align.omega_hidden},
                    {"omega_readout", w.align.omega_readout},
                    {"alpha", w.align.alpha},
                    {"u", w.align.u}};
  j["model"] = {{"name", "bigram (seed 000 eq. 1)"}, {"depth_L", w.depth}, {"rmsnorm", w.rmsnorm}};
  return j;
}

}  // namespace scaleinv
