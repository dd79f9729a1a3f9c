// The preset parameterizations: each is one row of numbers per role, with its source.
//
// Conventions used to fill the columns a paper leaves implicit (and tested in tests/test_param.cpp
// and tests/test_theory.cpp):
//  * Adafactor LR exponent: c_adafactor = c_adam - b (seed 000 eq. 15: Adafactor's update is
//    d^-(c+b) where Adam's is d^-c), so both give the same RMS(dW).
//  * SGD LR exponent: c_sgd = c_adam - w, where d^-w is RMS(W') at init (seed 000 eq. 12:
//    w_readout = a_R, w_hidden = a_R + b_R + a_h, w_embedding = a_R + b_R + a_0, and a vector-like
//    tensor (bias, norm gain) sees RMS(h') ~ d^-(a_R + b_R), eq. 11), so SGD's dW matches Adam's.
//  * Adam epsilon: eps = w, i.e. epsilon scales with the gradient it is added to (seed 000 2.1,
//    Everett et al.), except `standard` and the dinan-* rows, which keep one epsilon (seed 002
//    derives no width rule for it).
//  * Muon LR exponent (ref. [muon]): derive_muon_column (brain/param/table.h): c_muon = c_adam - 1 for the
//    hidden, attention and expert roles (the same RMS(dW) as the Adam column under a bounded-rank gradient),
//    c_adam for the roles Muon leaves to AdamW; `standard` keeps one global LR (c_muon = 0).
//  * Weight decay is a per-step decay fraction; every preset keeps it width-invariant (wd = 0):
//    MuAdamW's "lambda *= m" and CompleteP's "lambda_h ~ d" are exactly that under coupled decay.
//  * The vector-like role (biases, norm gains) is never multiplied or width-scaled at init
//    (a = b = 0); its Adam LR is not width-scaled (c = 0) except in the dinan-* rows, which follow
//    seed 002's rule LR ~ |g| ~ n^-1/2 (as for the position embedding).
//  * Depth exponents apply to tensors inside residual blocks (hidden, attention and vector roles);
//    embedding and readout are never depth-scaled.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/param/table.h"

namespace scaleinv {

namespace {

// One role: multiplier a, init b, LR c per family {sgd, adam, adafactor}, Adam epsilon.
RoleExponents row(double a, double b, double c_sgd, double c_adam, double c_ada, double eps) {
  RoleExponents e;
  e.a = a;
  e.b = b;
  e.c = {c_sgd, c_adam, c_ada};
  e.eps = eps;
  return e;
}

// Depth exponents for the in-block roles: LR k^-gamma per family, epsilon k^-depth_eps.
void set_block_depth(ParamTable& t, double lr_sgd, double lr_adam, double lr_ada, double eps) {
  for (Role r : {Role::Hidden, Role::Vector, Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO}) {
    t.row(r).depth_lr = {lr_sgd, lr_adam, lr_ada, /*muon: as adam*/ lr_adam};
    t.row(r).depth_eps = eps;
  }
}

ParamTable make(const char* name, const char* source, RoleExponents emb, RoleExponents hid,
                RoleExponents out, RoleExponents vec, double attn_logit) {
  ParamTable t;
  t.name = name;
  t.source = source;
  t.row(Role::Embedding) = emb;
  t.row(Role::Hidden) = hid;
  t.row(Role::Readout) = out;
  t.row(Role::Vector) = vec;
  // Attention projections are hidden matrices (seed 000 1.3; seed 002 eqs. 1.101-1.104, 1.110-1.113).
  for (Role r : {Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO}) t.row(r) = hid;
  // (The router and expert rows stay empty here: build() gives a dense preset their default_row.)
  for (Role r : all_roles())
    if (r < Role::Router) derive_muon_column(t.row(r), r);
  t.attn_logit = attn_logit;
  return t;
}

// seed 000 Table 1, "muP" row, and its SGD/Adafactor/epsilon columns (see header comment).
ParamTable mup_width(const char* name, const char* source) {
  return make(name, source,
              /*embedding*/ row(-0.5, 0.5, 0.0, 0.5, 0.0, 0.5),
              /*hidden*/ row(0.0, 0.5, 0.0, 1.0, 0.5, 1.0),
              /*readout*/ row(0.5, 0.5, 0.0, 0.5, 0.0, 0.5),
              /*vector*/ row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0),
              /*attn_logit: 1/d_head, Yang et al. (muP)*/ 1.0);
}

// Seed 002 footnote 8 / 26 strategy s: Var(W_head) = C/n^(1+s); every non-head SGD factor times
// n^s, every non-head AdamW factor times n^(s/2). Base factors (s = 0), seed 002 eqs. 1.99-1.116:
// SGD: WE 1, Q/K/V/U/W/X 1/n, head 1/n, bPE 1; AdamW: WE n^-1/2, bulk n^-3/2, head n^-1, bPE n^-1/2
// (footnote 41: the MLP's factor M is ignored).
ParamTable dinan(const char* name, const char* source, double s) {
  const double b_head = (1.0 + s) / 2.0;
  const double emb_sgd = 0.0 - s, emb_adam = 0.5 - s / 2;
  const double hid_sgd = 1.0 - s, hid_adam = 1.5 - s / 2;
  return make(name, source,
              row(0.0, 0.0, emb_sgd, emb_adam, emb_adam - 0.0, 0.0),
              row(0.0, 0.5, hid_sgd, hid_adam, hid_adam - 0.5, 0.0),
              row(0.0, b_head, 1.0, 1.0, 1.0 - b_head, 0.0),
              row(0.0, 0.0, emb_sgd, emb_adam, emb_adam, 0.0),
              /*1/sqrt(C), seed 002 eq. 1.16*/ 0.5);
}

// Unit scaling as rows of the table (seed 003: "to maintain a constant variance in the activations the
// weights must scale 1/sqrt(in_d)" -- its "Proof" section's CLT argument, sum_i theta_i x_i / sqrt(d)
// ~ N(0, sigma_x^2 sigma_theta^2) -- and its "Next" section: scale the gradient by it too).
// Every matrix is initialised with unit variance and its op carries 1/sqrt(fan_in) (u = 1: the
// base-shape scale sigma_0 = 1/sqrt(fan_in/m) in the op, the width part m^-a as before); the ops
// scale their backward passes, nonlinearities and residual adds to unit RMS (ParamTable::unit).
//  * unit (Blake et al. 2023, "Unit Scaling"): the standard parameterization with unit-scaled ops:
//    every matrix's op 1/sqrt(fan_in) (a = 1/2 relative to the base), init 1 (b = 0), one global LR.
//  * u-mup (Blake et al. 2024, "u-muP"): muP shifted by theta = 1/2 on hidden, attention and readout
//    (seed 000 eq. 28) into unit init, with u-muP's Adam LR rules: hidden weights
//    eta * fan_in^-1/2 (c_adam = 1/2) and depth^-1/2 (k_adm = 1/2) inside residual blocks, readout
//    eta (c_adam = 0), embedding eta * fan_out^-1/2 (u-muP's embedding rule, c_adam = 1/2); residual
//    branches k^-1/2 (the tau rule of UnitScaling::residual then holds the stream at unit RMS); the
//    readout op 1/fan_in relative to the base (a = 1: sigma_0 m^-1), so logits shrink like m^-1/2 at
//    init exactly as under muP. Adam epsilon is never width-scaled: the gradients are unit-scaled.
// LR exponents are relative to the base shape (as every row): at the base shape u-mup's LR is
// eta on unit-scale weights, where mup's is eta on weights of std sigma_0. SGD and Adafactor
// columns follow the header's conventions on the muP-equivalent exponents; u-muP itself is defined
// for Adam (under SGD the backward scales act as per-tensor LR factors).
ParamTable unit_scaled(const std::string& name) {
  auto unit_row = [](double a, double c_sgd, double c_adam, double c_ada) {
    RoleExponents e = row(a, 0.0, c_sgd, c_adam, c_ada, 0.0);
    e.unit = 1.0;
    return e;
  };
  ParamTable t;
  if (name == "unit") {
    t = make("unit", "unit scaling (Blake et al. 2023) on the standard parameterization; seed 003",
             row(0, 0.0, 0, 0, 0, 0), unit_row(0.5, 0, 0, 0), unit_row(0.5, 0, 0, 0), row(0, 0.0, 0, 0, 0, 0),
             0.5);
  } else {
    t = make("u-mup", "u-muP (Blake et al. 2024): muP (seed 000 Table 1) shifted by eq. (28), unit ops; seed 003",
             /*embedding: init 1, op 1, LR fan_out^-1/2*/ row(0.0, 0.0, -0.5, 0.5, 0.5, 0.0),
             /*hidden: op fan_in^-1/2, init 1, LR fan_in^-1/2*/ unit_row(0.5, -1.0, 0.5, 0.5),
             /*readout: op 1/fan_in, init 1, LR 1*/ unit_row(1.0, -1.0, 0.0, 0.0),
             /*vector: unscaled*/ row(0.0, 0.0, -1.0, 0.0, 0.0, 0.0), 1.0);
    t.branch = 0.5;
    set_block_depth(t, /*sgd*/ 0.0, /*adam*/ 0.5, /*adafactor*/ 0.5, /*eps*/ 0.0);
  }
  t.unit = UnitScaling{true, true, true, true};
  return t;
}

// The mixture-of-experts rows on a dense table (docs/moe.md derives each number; refs. [mup-moe],
// [completep-moe]):
//  * router [E, d]: a readout of the normalised stream (fan-in d grows, fan-out E does not), so the
//    dense table's readout row: its logits start at d^(1/2-a-b) (-> 0 under muP: uniform routing)
//    and move Theta(1) per Adam step, d^(1-a-c). Inside a block, so it takes the block's depth
//    exponents: under CompleteP its gradient carries the branch's L^-1 (SGD LR x L, epsilon L^-1)
//    and Adam's LR is not depth-scaled, as every block matrix's.
//  * experts [E, out, in]: E hidden matrices, the dense table's hidden row.
//  * expert count e = E / E_0: each expert (and each router row) is fed a share k/E of the tokens,
//    so its gradient, a mean over the batch, shrinks like e^-1. SGD's update follows the gradient:
//    its LR grows like e (experts_lr_sgd = -1); Adam, Adafactor and Muon normalise the update per
//    entry, so their LR does not move with E (experts_lr = 0): "tune dense once".
//  Against [completep-moe] (2601.20205 Table 1, Sec. 3.3, as secondary notes cite it; docs/references.md):
//  its router init n^-1 and Adam LR n^-1 are this router row's effective weight (seed 000 eq. (28));
//  its Sec. 3.2 holds k/E fixed, so no rule carries an E factor (experts_lr = 0 for Adam); its
//  expert up-projection is the hidden row. Its down-projection init sits a constant below fan-in
//  (the same width exponent), and its bias rate is Theta(1) (Scaling Rule 2, eq. (2)) as bias_rate is.
ParamTable moe_rows(ParamTable t, const std::string& name) {
  const std::string dense = t.name;
  t.name = name;
  t.source = fmt::format("{} ({}) with router = readout row, experts = hidden row, SGD LR x E/E_0 (docs/moe.md; "
                         "refs. [mup-moe], [completep-moe])", dense, t.source);
  RoleExponents router = default_row(t, Role::Router), expert = default_row(t, Role::Expert);
  router.depth_lr = expert.depth_lr;  // in a block: the block's depth exponents
  router.depth_wd = expert.depth_wd;
  router.depth_eps = expert.depth_eps;
  for (RoleExponents* e : {&router, &expert}) e->experts_lr = {-1.0, 0.0, 0.0, 0.0};
  t.row(Role::Router) = router;
  t.row(Role::Expert) = expert;
  return t;
}

// Every preset: its name and its builder, in the order preset_names() lists them (one map: the
// names and the builders cannot disagree). A new preset is one entry here.
using Builder = ParamTable (*)(const std::string& name);
const std::vector<std::pair<std::string, Builder>>& builders() {
  static const std::vector<std::pair<std::string, Builder>> table = {
      {"standard",
       [](const std::string& name) -> ParamTable {
         // PyTorch defaults: N(0,1) embeddings, 1/sqrt(fan_in) matrices, one global LR and epsilon.
         // What most people run; seed 000 Table 1's SP with its layerwise LRs removed.
         ParamTable t = make("standard", "PyTorch defaults: one global LR (seed 000 App. A init, no LR scaling)",
                             row(0, 0.0, 0, 0, 0, 0), row(0, 0.5, 0, 0, 0, 0), row(0, 0.5, 0, 0, 0, 0),
                             row(0, 0.0, 0, 0, 0, 0), 0.5);
         for (RoleExponents& e : t.roles) e.c[static_cast<int>(OptFamily::Muon)] = 0;  // one global LR for Muon too
         return t;
       }},
      {"sp",
       [](const std::string& name) -> ParamTable {
         return make("sp", "seed 000 Table 1, SP (aka simple muP); SGD/Adafactor/eps columns derived",
                     row(0, 0.0, -0.5, 0.0, 0.0, 0.5), row(0, 0.5, 0.5, 1.0, 0.5, 0.5), row(0, 0.5, 1.0, 1.0, 0.5, 0.0),
                     row(0, 0.0, -0.5, 0.0, 0.0, 0.5), 0.5);
       }},
      {"ntk",
       [](const std::string& name) -> ParamTable {
         return make("ntk", "seed 000 Table 1, NTK (Jacot et al. 2018); = sp shifted by theta=(0,1/2,1/2)",
                     row(0, 0.0, -0.5, 0.0, 0.0, 0.5), row(0.5, 0.0, -0.5, 0.5, 0.5, 1.0),
                     row(0.5, 0.0, 0.0, 0.5, 0.5, 0.5), row(0, 0.0, -0.5, 0.0, 0.0, 0.5), 0.5);
       }},
      {"mup",
       [](const std::string& name) -> ParamTable {
         return mup_width("mup", "seed 000 Table 1, muP (Yang and Hu 2020)");
       }},
      {"mf",
       [](const std::string& name) -> ParamTable {
         return make("mf", "seed 000 Table 1, MF (Mei et al. 2018); = mup shifted by theta=(1/2,1/2,1/2)",
                     row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.5, 0.0, -1.0, 0.5, 0.5, 1.5),
                     row(1.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), 1.0);
       }},
      {"completep",
       [](const std::string& name) -> ParamTable {
         // seed 000 2.1 (Dey et al. 2025): width = muP shifted by theta = 1/2 on embedding and readout;
         // depth rho = 1: every residual branch times 1/L (eq. 30); hidden Adam LR d^-1 L^(alpha-1) = d^-1;
         // epsilon d^-1 everywhere and L^-1 inside blocks (the moments' scale).
         ParamTable t = make("completep", "seed 000 section 2.1 (CompleteP, Dey et al. 2025)",
                             row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.0, 0.5, 0.0, 1.0, 0.5, 1.0),
                             row(1.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), 1.0);
         t.branch = 1.0;
         // SGD's true LR is eta L^(alpha - gamma) (seed 004 Def. 4.1 with delta = alpha): gamma_sgd = 0 - 1.
         set_block_depth(t, /*sgd*/ -1.0, /*adam*/ 0.0, /*adafactor*/ 0.0, /*eps*/ 1.0);
         return t;
       }},
      {"depth-mup",
       [](const std::string& name) -> ParamTable {
         // seed 004 Claim 5.5 and section 3 / App. C: branch a/sqrt(L), Adam LR(W_l) = eta n^-1 L^-1/2,
         // SGD LR(W_l) constant in L; U init 1, LR eta; V init n^-2, LR eta/n; W init 1/n, never depth-scaled.
         ParamTable t = make("depth-mup", "seed 004 (Depth-muP, Yang et al. 2023) Claim 5.5, App. C",
                             row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.0, 0.5, 0.0, 1.0, 0.5, 1.0),
                             row(0.0, 1.0, 1.0, 1.0, 0.0, 0.0), row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), 1.0);
         t.branch = 0.5;
         // Gradients of W_l are Theta(n^-1 L^-alpha): epsilon follows (seed 004 4.1).
         set_block_depth(t, /*sgd*/ 0.0, /*adam*/ 0.5, /*adafactor*/ 0.5, /*eps*/ 0.5);
         return t;
       }},
      {"keel",
       [](const std::string& name) -> ParamTable {
         // seed 000 eq. (34)-(35) (KEEL, Chen and Wei 2026): post-LN with the shortcut scaled up inside
         // the LN, h_{l+1} = LN(L h_l + f(LN(h_l))); width follows muP (Table 1).
         ParamTable t = mup_width("keel", "seed 000 eqs. (34)-(35) (KEEL, Chen and Wei 2026); width muP");
         t.shortcut = 1.0;
         return t;
       }},
      {"dinan-nt",
       [](const std::string& name) -> ParamTable {
         return dinan("dinan-nt", "seed 002 strategy s = 0 (neural tangent)", 0.0);
       }},
      {"dinan-hybrid",
       [](const std::string& name) -> ParamTable {
         return dinan("dinan-hybrid", "seed 002 strategy s = 1/2 (hybrid)", 0.5);
       }},
      {"dinan-mup",
       [](const std::string& name) -> ParamTable {
         return dinan("dinan-mup", "seed 002 strategy s = 1 (maximal update)", 1.0);
       }},
      {"unit", [](const std::string& name) -> ParamTable { return unit_scaled(name); }},
      {"u-mup", [](const std::string& name) -> ParamTable { return unit_scaled(name); }},
      {"mup-moe", [](const std::string& name) -> ParamTable { return moe_rows(preset("mup"), name); }},
      {"completep-moe",
       [](const std::string& name) -> ParamTable {
         return moe_rows(preset("completep"), name);
       }},
      {"spectral",
       [](const std::string& name) -> ParamTable {
         // ref. [spectral] (Yang, Simon and Bernstein 2023), Condition 1: ||W_l||_2 and ||dW_l||_2 ~
         // sqrt(fan_out/fan_in), with init std (1/sqrt(fan_in)) min(1, sqrt(fan_out/fan_in)) and no
         // multipliers (a = 0): the embedding (fan_in = vocabulary) std 1 (b = 0), hidden 1/sqrt(d)
         // (b = 1/2), readout sqrt(V)/d (b = 1). Its update rule, ||dW||_2 = RMS(dW) sqrt(fan_in fan_out)
         // for a bounded-rank update, gives Adam RMS(dW) ~ 1/fan_in: c = 0, 1, 1. It is muP (seed 000
         // Table 1) shifted by eq. (28) with theta = (+1/2, 0, -1/2) on (embedding, hidden, readout), so
         // the SGD, Adafactor and epsilon columns follow from the shift (test_param checks it). The
         // base-shape constant min(1, sqrt(fan_out/fan_in)) is not in the table (every row is the same
         // network at the base shape; hp.init_scale tunes constants there).
         ParamTable t = make("spectral",
                             "ref. [spectral] Condition 1 (Yang, Simon and Bernstein 2023); = mup shifted by "
                             "theta=(1/2,0,-1/2)",
                             row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), row(0.0, 0.5, 0.0, 1.0, 0.5, 1.0),
                             row(0.0, 1.0, 1.0, 1.0, 0.0, 0.0), row(0.0, 0.0, -1.0, 0.0, 0.0, 1.0), 1.0);
         return t;
       }},
  };
  return table;
}

ParamTable build(const std::string& name) {
  for (const auto& [n, make_preset] : builders())
    if (n == name) {
      ParamTable t = make_preset(name);
      // A dense preset leaves the mixture-of-experts rows out: they are its default_row (table.h).
      for (Role r : {Role::Router, Role::Expert})
        if (t.row(r) == RoleExponents{}) t.row(r) = default_row(t, r);
      return t;
    }
  const std::string problem = fmt::format("unknown preset '{}'", name);
  const std::string fix = fmt::format("use one of {} or a path to a .toml file", fmt::join(preset_names(), ", "));
  // Inside a config (a ConfigSource is active, brain/util/errors.h) the error names that file and
  // param.name; from a command's --param flag, the command line.
  UserError in_config("config", "param.name", problem, fix);
  if (std::string(in_config.what()).rfind("config:", 0) != 0) throw in_config;
  throw UserError("command line", "--param", problem, fix);
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& entry : builders()) names.push_back(entry.first);
  return names;
}

ParamTable preset(const std::string& name) { return build(name); }

ParamTable depth_mup_ode_limit() {
  ParamTable t = preset("depth-mup");
  t.name = "ode";
  t.source = "depth-mup with (alpha, gamma) = (1, 0): the ODE limit of seed 004 Claim 5.4";
  t.branch = 1.0;
  for (Role r : {Role::Hidden, Role::Vector, Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO, Role::Expert}) {
    // Adam / Adafactor: gamma = 0; SGD's true LR is eta L^(alpha - gamma) = eta L (depth_gamma adds alpha).
    t.row(r).depth_lr = {-1.0, 0.0, 0.0};
    t.row(r).depth_eps = 1.0;  // W_l's gradients shrink like L^-alpha = L^-1 (seed 004 4.1)
  }
  return t;
}

}  // namespace scaleinv
