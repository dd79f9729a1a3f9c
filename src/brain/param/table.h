#pragma once
// The parameterization as data (docs/design.md "How a table reaches a tensor").
//
// Every trainable tensor has a Role. Every role has exponents. A model of width d and depth L
// is compared with a base model of width d0 and depth L0 through m = d/d0 and k = L/L0, so that
// at the base shapes every parameterization is the same network and a hyperparameter tuned there
// means the same thing everywhere:
//
//   forward multiplier   m^-a                                    (seed 000 eq. 1: d^-a_l)
//   init std             sigma_base(role, fan_in/m) * m^-b       (seed 000 eq. 2: Var = d^-2b_l)
//   learning rate        eta * m^-c[opt] * k^-depth_lr[opt]      (seed 000 eq. 15: eta_l = C d^-c_l)
//   weight decay         the per-step decay fraction scales m^-wd * k^-depth_wd
//   Adam epsilon         eps * m^-eps * k^-depth_eps             (seed 000 2.1, CompleteP)
//   residual branch      k^-branch                               (seed 000 eq. 30 rho; seed 004 alpha)
//   post-LN shortcut     L^shortcut inside the LN                (seed 000 eq. 34; KEEL: L)
//   attention logits     d_head0^-1/2 * (d_head/d_head0)^-attn_logit
//   unit scaling         per role u (the op carries sigma_0^u), and ParamTable::unit (op rules)
//
// Depth exponents apply only to tensors inside residual blocks. A new parameterization is a new
// row of data (a preset below, or a TOML file), never a new branch in model or optimizer code.
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace scaleinv {

// Router and Expert are the mixture-of-experts roles (docs/moe.md): the router [E, d] maps the
// normalised stream to one logit per expert (fan-in grows with width, fan-out E does not: a
// readout of the stream, ref. [mup-moe]), the experts [E, out, in] are E hidden matrices each.
enum class Role : int { Embedding = 0, Hidden, Readout, Vector, AttnQ, AttnK, AttnV, AttnO, Router, Expert };
inline constexpr int kNumRoles = 10;
// The four roles every table must define; the attention and expert roles default to the hidden
// row, the router to the readout row (default_row).
inline constexpr int kCoreRoles = 4;
const char* role_name(Role r);                 // "embedding", "hidden", ..., "attn_o", "router", "expert"
bool parse_role(const std::string& s, Role* out);
std::array<Role, kNumRoles> all_roles();

// Optimizer families with distinct LR exponents (seed 000 eq. 15). Adam covers AdamW and
// momentumless Adam / sign descent. Muon (ref. [muon]) orthogonalizes the update of the hidden,
// attention and expert matrices (muon_orthogonalized) and runs AdamW on every other tensor, so its column holds
// the Muon LR exponent for the former and the AdamW exponent for the latter.
enum class OptFamily : int { SGD = 0, Adam = 1, Adafactor = 2, Muon = 3 };
inline constexpr int kNumFamilies = 4;
const char* family_name(OptFamily f);          // "sgd", "adam", "adafactor", "muon"
bool parse_family(const std::string& s, OptFamily* out);

// The roles whose update Muon orthogonalizes: hidden and attention matrices, and a mixture's experts
// (each [out, in] slice of the [E, out, in] stack on its own: E hidden matrices). Embeddings, the
// readout, the router and vector-like tensors take AdamW, as in the reference implementation (ref. [muon]).
bool muon_orthogonalized(Role r);

// How Muon scales its orthogonalized update O (singular values ~1) of a fan_out x fan_in matrix:
//   Spectral: max(1, fan_out/fan_in)^(1/2)       (ref. [muon]; the spectral condition, ref. [spectral])
//   Rms:      0.2 * sqrt(max(fan_in, fan_out))   (ref. [moonlight]: RMS(update) ~ 0.2, AdamW's typical
//                                                 update RMS, so AdamW's LR carries over)
// Spectral's factor is constant in width (fan ratios are fixed); Rms's grows like d^(1/2) for a hidden
// matrix. The table's Muon column is the LR exponent on top of the Spectral rule; the theory engine
// adds the Rms rule's d^(1/2) (brain/theory/width_theory.h).
enum class MuonScale : int { Spectral = 0, Rms = 1 };
const char* muon_scale_name(MuonScale s);      // "spectral", "rms"
bool parse_muon_scale(const std::string& s, MuonScale* out);

struct RoleExponents {
  double a = 0;                              // forward multiplier m^-a
  double b = 0;                              // init std m^-b
  std::array<double, kNumFamilies> c{};      // LR m^-c per optimizer family (see derive_muon_column)
  double wd = 0;                             // weight-decay fraction m^-wd
  double eps = 0;                            // Adam epsilon m^-eps
  std::array<double, kNumFamilies> depth_lr{};  // LR k^-gamma per family (in-block tensors)
  double depth_wd = 0;
  double depth_eps = 0;
  // Expert count (mixture-of-experts, ParamTable::base_experts): LR e^-x per family, e = E / E_0.
  // An expert sees a share k/E of the tokens, so its gradient (a mean over the batch) shrinks like
  // e^-1: SGD's update with it, Adam's not (its update is normalised per entry); docs/moe.md.
  std::array<double, kNumFamilies> experts_lr{};
  // Unit scaling (seed 003 "Meat"/"Proof": the 1/sqrt(fan_in) belongs to the operation): the share
  // u of the base-shape fan-in scale sigma_0 = 1/sqrt(fan_in/m) that the op carries instead of the
  // init, init std sigma_0^(1-u) m^-b and forward scale sigma_0^u m^-a. u = 0: every existing row
  // (the scale is all in the init); u = 1: unit-variance init (u-muP, Blake et al. 2024).
  double unit = 0;
  bool operator==(const RoleExponents&) const = default;
};

// The role row's columns, each declared once: the TOML reader and writer, the JSON reader and
// writer and `scaleinv param`'s table all loop over role_columns(), so a new column is one row
// there (and its member above). A column is a scalar exponent or one exponent per optimizer family
// ({ sgd = .., adam = .., adafactor = .., muon = .. }; muon optional, see derive_muon_column).
struct RoleColumn {
  const char* key;                                            // TOML/JSON key
  const char* label;                                          // `scaleinv param` header (families: + _sgd..)
  double RoleExponents::*scalar = nullptr;                    // a scalar column, or
  std::array<double, kNumFamilies> RoleExponents::*families = nullptr;  // a per-family column
  bool required = false;           // a full row must give it (a partial attention row: none)
  bool omitted_when_zero = false;  // JSON: written only where nonzero (tables from before it keep their fingerprint)
  bool shown = true;               // a column of `scaleinv param`'s exponent table
  bool group_start = false;        // `scaleinv param` draws a bar before it
  bool in_block_only = false;      // a depth exponent: acts on tensors inside residual blocks only
};
const std::vector<RoleColumn>& role_columns();
// The 3-letter abbreviation of a family in `scaleinv param`'s headers: sgd, adm, afc, muo.
const char* family_abbrev(OptFamily f);

// How the operations themselves are scaled (unit scaling, seed 003; u-muP). All false: plain torch
// ops, the true gradient (every parameterization of seed 000). Read by the layers through the
// ScaleContext (src/engine/unit/scaled_ops.h), never by preset name.
struct UnitScaling {
  // Linear / matmul / attention backward scaled so that each gradient has unit RMS at init:
  // grad-input 1/sqrt(fan_out), grad-weight 1/sqrt(rows); where a tensor feeds several ops
  // (residual split, q/k/v) the contributions are re-weighted to the true gradient's ratio, so the
  // update direction of a per-tensor scale-invariant optimizer (Adam) is unchanged.
  bool backward = false;
  // ReLU / GELU divided by their RMS at unit-normal input (their "variance corrections"); the
  // attention average over keys multiplied back to unit RMS.
  bool nonlin = false;
  // Residual adds by the tau rule: x_l = sqrt(1 - tau_l) x_{l-1} + sqrt(tau_l) f_l, the stream held at
  // unit RMS (tau_l = beta^2 / (1 + l beta^2) keeps the direction of x_0 + beta sum f).
  bool residual = false;
  // Cross-entropy's logit gradient scaled to unit RMS (the loss value itself unchanged).
  bool loss = false;
  bool any() const { return backward || nonlin || residual || loss; }
  bool operator==(const UnitScaling&) const = default;
};

struct ParamTable {
  std::string name;
  std::string source;       // the paper, table or equation the row comes from
  int base_width = 64;      // d0
  int base_depth = 4;       // L0
  int base_experts = 4;     // E0: the expert count the mixture-of-experts rows are relative to
  std::array<RoleExponents, kNumRoles> roles{};
  double branch = 0;        // residual branch multiplier k^-branch
  double shortcut = 0;      // post-LN shortcut alpha = L^shortcut
  double attn_logit = 0.5;  // exponent p of the attention logit scale d_head^-p
  UnitScaling unit;         // how the ops are scaled (all off: plain ops)

  const RoleExponents& row(Role r) const { return roles[static_cast<int>(r)]; }
  RoleExponents& row(Role r) { return roles[static_cast<int>(r)]; }
  double width_mult(double width) const { return width / base_width; }
  double experts_mult(double experts) const { return experts > 0 ? experts / base_experts : 1.0; }
  double depth_mult(double depth) const { return depth / base_depth; }
  bool operator==(const ParamTable&) const = default;
};

// The scale factors one tensor gets, at width multiplier m and depth multiplier k.
struct TensorScale {
  double multiplier = 1;  // forward multiplier m^-a
  double init = 1;        // factor on the base init std, m^-b
  double lr = 1;          // factor on the base LR
  double wd = 1;          // factor on the base weight-decay fraction
  double eps = 1;         // factor on the base Adam epsilon
  // Unit scaling (seed 003 "Meat"/"Proof"; RoleExponents::unit): the share sigma_0^u of a matrix's
  // base-shape init std sigma_0 (its fan-in scale) that the operation carries as a forward factor
  // instead of the init; the init keeps sigma_0^(1-u). 1 when u = 0 or sigma_0 <= 0 (a constant
  // init, or base_std not given).
  double unit = 1;
};
// base_std: the tensor's base-shape init std sigma_0, for `unit` (0: not a unit-scaled matrix).
// e: the expert-count multiplier E / E_0 (1 for a dense model); only experts_lr reads it.
TensorScale tensor_scale(const ParamTable& t, Role role, OptFamily f, double m, double k, bool in_block,
                         double base_std = 0, double e = 1);
// The row a role has where a table does not give it: attention and expert roles the hidden row,
// the router the readout row (a fixed fan-out: microsoft/mup's MuReadout answer, ref. [mup-moe]),
// every other role its own. Tables whose router and expert rows equal these write neither (JSON,
// TOML, `scaleinv param`), so every table from before the roles existed keeps its fingerprint.
RoleExponents default_row(const ParamTable& t, Role r);
bool role_is_default(const ParamTable& t, Role r);
// A mixture-of-experts table: its router or expert row sets the expert-count column (the mup-moe and
// completep-moe presets, and tables written from them). A dense model refuses one (engine/models/model.h).
bool is_moe_table(const ParamTable& t);
double branch_multiplier(const ParamTable& t, double k);         // k^-branch
double shortcut_multiplier(const ParamTable& t, double depth);   // L^shortcut
double attn_logit_scale(const ParamTable& t, double d_head, double base_d_head);

// The Muon column by convention, where a table gives none (derive_muon_column; presets.cpp): for the
// orthogonalized roles the LR exponent that gives the row's Adam RMS(dW). Muon's update of a hidden
// d x d matrix has spectral norm eta m^-c, and with a gradient of bounded rank (fixed batch, the
// theory's full alignment) RMS(dW) = ||dW||_2 sqrt(rank)/d ~ m^-(c+1), where Adam's is m^-c_adam:
// c_muon = c_adam - 1. For the AdamW roles c_muon = c_adam. Depth: depth_lr_muon = depth_lr_adam
// (depth changes no fan, so both updates scale alike in k).
void derive_muon_column(RoleExponents& e, Role r);

// Presets, each citing its source. Unknown names throw UserError listing the known ones.
std::vector<std::string> preset_names();
ParamTable preset(const std::string& name);
// depth-mup at (alpha, gamma) = (1, 0), the ODE limit of seed 004 Claim 5.4: branch L^-1, in-block
// LRs not depth-scaled (SGD's true LR eta L^(alpha - gamma)), Adam epsilon following the L^-1
// gradients of W_l; every other number of depth-mup. Not a preset to train with: the diagnostics'
// comparison row (`scaleinv diagnose diversity --param ode`).
ParamTable depth_mup_ode_limit();
// A preset name, or a path to a TOML file (see examples/params/custom.toml).
ParamTable load_param(const std::string& name_or_file);
ParamTable param_from_toml_file(const std::string& path);
ParamTable param_from_toml_string(const std::string& text, const std::string& where);
std::string param_to_toml(const ParamTable& t);
nlohmann::json param_to_json(const ParamTable& t);
ParamTable param_from_json(const nlohmann::json& j);
// Stable short hash of the table's numbers (checkpoints, distributed start-up check).
std::string param_fingerprint(const ParamTable& t);

// The equivalence shift of seed 000 eq. (28): a += theta, b -= theta; the LR exponent moves by
// theta for Adam, 2*theta for SGD, not at all for Adafactor (its update is relative to RMS(W));
// Adam epsilon follows the gradient, eps += theta. Weight decay is a per-step fraction: unchanged.
// Muon moves by theta like Adam: its update is a function of the momentum M that is invariant under
// M -> s M for every s > 0 (O(sM) = O(M): the Newton-Schulz iteration runs on M / ||M||_F), the
// momentum is linear in the gradient, and the scale rule depends on the shape only; so the update of
// the stored tensor is unchanged and the LR must grow like the stored tensor, d^theta (c -= theta).
// Its normalisation epsilon (||M||_F + eps) follows the gradient like Adam's (eps += theta), exactly
// as the AdamW roles' epsilon. docs/muon.md derives it; tests/test_muon.cpp checks it.
ParamTable shift(const ParamTable& t, const std::array<double, kNumRoles>& theta);

}  // namespace scaleinv
