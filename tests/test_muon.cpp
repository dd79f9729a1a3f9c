// Muon and the spectral parameterization (issue 17): the Newton-Schulz orthogonalization, Muon's
// step against its formulas, the AdamW routing, the table's Muon column and the `spectral` preset,
// the theory's spectral norms and Condition 1, the eq. (28) shift for Muon, and the coordinate
// check that passes for mup + Muon and fails where the theory says.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include <fmt/format.h>

#include "tensor_util.h"
#include "coord_util.h"
#include "brain/util/errors.h"
#include "engine/coordcheck/coordcheck.h"
#include "engine/optim/muon.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/theory/width_theory.h"
#include "brain/train/config.h"

using namespace scaleinv;
using scaleinv::testing::failures_text;
using scaleinv::testing::has_failure;
using scaleinv::testing::leaf;
using scaleinv::testing::max_rel_diff;

namespace {

constexpr int kAdam = static_cast<int>(OptFamily::Adam);
constexpr int kMuon = static_cast<int>(OptFamily::Muon);


ParamGroup role_group(const std::string& name, const torch::Tensor& p, Role role, double lr = 1, double eps = 1) {
  ParamGroup g;
  g.name = name;
  g.param = p;
  g.role = role;
  g.lr_mult = lr;
  g.eps_mult = eps;
  return g;
}

// Bigram coordinate check as test_coordcheck's (2 x 8 probe tokens, widths 64..256, 3 seeds).
CoordCheckConfig bigram_check(const std::string& param, const std::string& optim_lines) {
  const std::string toml = fmt::format(R"(
[model]
kind = "bigram"
depth = 2
seq_len = 8
[param]
name = "{}"
[optim]
{}
[data]
source = "markov"
vocab = 32
markov_length = 20000
[train]
batch_size = 2
steps = 3
)",
                                       param, optim_lines);
  CoordCheckConfig cc;
  cc.train = train_config_from_toml_text(toml, "test");
  cc.widths = {64, 128, 256};
  cc.steps = 3;
  cc.seeds = {0, 1, 2};
  cc.show_progress = false;
  return cc;
}

}  // namespace

// ---- Newton-Schulz -----------------------------------------------------------------------------

TEST(MuonNewtonSchulz, OrthogonalizesKeepingSingularVectors) {
  torch::manual_seed(3);
  for (auto shape : {std::vector<int64_t>{16, 32}, std::vector<int64_t>{32, 16}, std::vector<int64_t>{24, 24}}) {
    const torch::Tensor m = torch::randn(shape, torch::kFloat64);
    const torch::Tensor o = newton_schulz(m, 5, 1e-7, torch::kFloat64);
    ASSERT_EQ(o.sizes(), m.sizes());
    // ref. [muon]: the quintic trades exactness for speed; its output's singular values lie in
    // about (0.5, 1.5) rather than at 1 ...
    auto [u, s, vh] = torch::linalg_svd(m, /*full_matrices=*/false, c10::nullopt);
    const torch::Tensor so = torch::linalg_svdvals(o, c10::nullopt);
    EXPECT_GT(so.min().item<double>(), 0.5) << so;
    EXPECT_LT(so.max().item<double>(), 1.5) << so;
    // ... and U^T O V is diagonal: the singular vectors of M are kept (O = U f(S) V^T, f odd).
    const torch::Tensor d = u.t().mm(o).mm(vh.t());
    const torch::Tensor off = d - torch::diag(torch::diagonal(d));
    EXPECT_LT(off.abs().max().item<double>(), 1e-10);
    EXPECT_GT(torch::diagonal(d).min().item<double>(), 0.5);  // signs kept: f(s) > 0 for s > 0
  }
}

TEST(MuonNewtonSchulz, ScaleInvariantAndBatched) {
  torch::manual_seed(4);
  const torch::Tensor m = torch::randn({2, 8, 12}, torch::kFloat64);
  const torch::Tensor o = newton_schulz(m, 5, 0.0, torch::kFloat64);
  // O(s M) = O(M) for s > 0 (eps = 0): the property the eq. (28) shift needs (table.h).
  EXPECT_LT(max_rel_diff(newton_schulz(m * 37.5, 5, 0.0, torch::kFloat64), o), 1e-13);
  EXPECT_LT(max_rel_diff(newton_schulz(m * 1e-3, 5, 0.0, torch::kFloat64), o), 1e-13);
  // A batch [E, r, c] is E independent matrices (ensembles).
  for (int e = 0; e < 2; ++e)
    EXPECT_LT(max_rel_diff(newton_schulz(m[e], 5, 0.0, torch::kFloat64), o[e]), 1e-13) << e;
  // fp32 and the fp64 reference agree to fp32 rounding, amplified by 5 polynomial steps.
  EXPECT_LT(max_rel_diff(newton_schulz(m.to(torch::kFloat32), 5, 0.0, torch::kFloat32).to(torch::kFloat64), o), 1e-5);
}

TEST(MuonScale, Rules) {
  EXPECT_DOUBLE_EQ(muon_scale_factor(MuonScale::Spectral, 256, 64), 2.0);   // fan_out > fan_in
  EXPECT_DOUBLE_EQ(muon_scale_factor(MuonScale::Spectral, 64, 256), 1.0);   // max(1, .)
  EXPECT_DOUBLE_EQ(muon_scale_factor(MuonScale::Rms, 64, 256), 0.2 * 16.0);
  EXPECT_DOUBLE_EQ(muon_scale_factor(MuonScale::Rms, 256, 64), 0.2 * 16.0);
}

// ---- the optimizer -----------------------------------------------------------------------------

TEST(MuonStep, MatchesItsFormulasAndRoutesTheRestToAdamW) {
  torch::manual_seed(5);
  const torch::Tensor w0 = torch::randn({6, 4}, torch::kFloat64), e0 = torch::randn({6, 4}, torch::kFloat64);
  auto grad = [](int s, int i) {
    return torch::sin(torch::arange(24, torch::kFloat64).view({6, 4}) * (s + 1) + i) * (1.0 + 0.5 * s);
  };
  for (const std::string rule : {"spectral", "rms"}) {
    for (bool nesterov : {true, false}) {
      OptimConfig c;
      c.kind = "muon";
      c.lr = 0.02;
      c.weight_decay = 0.1;
      c.muon_scale = rule;
      c.nesterov = nesterov;
      c.eps = 1e-6;
      torch::Tensor w = leaf(w0), e = leaf(e0);
      auto opt = make_optimizer(c, {role_group("hidden", w, Role::Hidden, 2.0), role_group("emb", e, Role::Embedding, 0.5)});
      OptimConfig ac = c;
      ac.kind = "adamw";
      torch::Tensor e_ref = leaf(e0);
      auto adamw = make_optimizer(ac, {role_group("emb", e_ref, Role::Embedding, 0.5)});
      // The formulas (OptimConfig's comment), step by step.
      torch::Tensor w_ref = w0.clone(), buf = torch::zeros_like(w0);
      const double mu = c.muon_momentum;
      const double scale = rule == "rms" ? 0.2 * std::sqrt(6.0) : std::sqrt(6.0 / 4.0);
      for (int s = 0; s < 4; ++s) {
        const double lr_factor = 0.5 + 0.25 * s;
        w.mutable_grad() = grad(s, 0);
        e.mutable_grad() = grad(s, 1);
        e_ref.mutable_grad() = grad(s, 1);
        opt->step(lr_factor);
        adamw->step(lr_factor);
        buf = mu * buf + (1 - mu) * grad(s, 0);
        const torch::Tensor m = nesterov ? (1 - mu) * grad(s, 0) + mu * buf : buf;
        w_ref = w_ref * (1 - c.lr * lr_factor * c.weight_decay);  // coupled: base LR x schedule x wd
        w_ref = w_ref - c.lr * lr_factor * 2.0 * scale * newton_schulz(m, 5, c.muon_eps, torch::kFloat64);
      }
      EXPECT_LT(max_rel_diff(w.detach(), w_ref), 1e-12) << rule << nesterov;
      EXPECT_TRUE(torch::equal(e.detach(), e_ref.detach())) << "the embedding takes AdamW's step exactly";
    }
  }
}

TEST(MuonStep, VectorsAndUnorthogonalizedRolesTakeAdamW) {
  torch::manual_seed(6);
  OptimConfig c;
  c.kind = "muon";
  c.lr = 0.01;
  const torch::Tensor r0 = torch::randn({5, 3}), g0 = torch::randn({3}), q0 = torch::randn({4, 4});
  torch::Tensor r = leaf(r0), g = leaf(g0), q = leaf(q0);
  auto opt = make_optimizer(c, {role_group("readout", r, Role::Readout), role_group("gain", g, Role::Hidden),
                                role_group("q", q, Role::AttnQ)});
  OptimConfig ac = c;
  ac.kind = "adamw";
  torch::Tensor r2 = leaf(r0), g2 = leaf(g0);
  auto adamw = make_optimizer(ac, {role_group("readout", r2, Role::Readout), role_group("gain", g2, Role::Hidden)});
  for (auto* t : {&r, &g, &q, &r2, &g2}) t->mutable_grad() = torch::ones_like(*t);
  opt->step();
  adamw->step();
  EXPECT_TRUE(torch::equal(r.detach(), r2.detach()));
  EXPECT_TRUE(torch::equal(g.detach(), g2.detach()));  // a 1-D tensor is never orthogonalized
  // The attention matrix is orthogonalized. Its first momentum is (1 - mu)(1 + mu) g (Nesterov, from
  // a zero buffer), whose direction ones / 4 has the one singular value 1; the 5 quintic steps
  // f(s) = 3.4445 s - 4.7750 s^3 + 2.0315 s^5 take 1 to 0.701, 1.1136, 0.7207, 1.0900, 0.69644,
  // and the spectral scale max(1, 4/4)^1/2 is 1: the update is lr * 0.69644 * ones / 4, Frobenius
  // norm 0.69644 lr (the momentum unorthogonalized would give lr, 4 steps 1.09 lr).
  const double mu = c.muon_momentum;
  const torch::Tensor want = c.lr * newton_schulz(torch::ones({4, 4}) * ((1 - mu) * (1 + mu)), 5, c.muon_eps, torch::kFloat32);
  // (q0 - q is read off float32 entries of |q0| up to ~3: half an ulp of each, on an update of
  // ~1.7e-3; the fp32 iteration itself adds ~1e-6 relative.)
  const double tol = 2 * std::ldexp(1.0, -24) * q0.abs().max().item<double>() / want.abs().max().item<double>() + 1e-5;
  EXPECT_LT(max_rel_diff(q0 - q.detach(), want), tol);
  EXPECT_NEAR(((q0 - q.detach()).norm() / c.lr).item<double>(), 0.69644, 1e-4);
}

// A mixture's experts [E, out, in] (engine/models/moe.cpp): Muon orthogonalizes each expert's [out, in] on its
// own, as it would that matrix alone as a hidden one (scale max(1, out/in)^1/2 per expert), and
// leaves the router [E, d] to AdamW, as the readout.
TEST(MuonStep, EachExpertOfAStackIsOrthogonalizedOnItsOwnAndTheRouterTakesAdamW) {
  torch::manual_seed(9);
  const torch::Tensor x0 = torch::randn({3, 6, 4}, torch::kFloat64), r0 = torch::randn({3, 4}, torch::kFloat64);
  auto grad = [](int s, int64_t n, int i) {
    return torch::sin(torch::arange(n, torch::kFloat64) * (s + 1) + i) * (1.0 + 0.5 * s);
  };
  OptimConfig c;
  c.kind = "muon";
  c.lr = 0.02;
  c.weight_decay = 0.1;
  c.eps = 1e-6;
  torch::Tensor x = leaf(x0), r = leaf(r0);
  auto opt = make_optimizer(c, {role_group("experts", x, Role::Expert, 2.0), role_group("router", r, Role::Router, 0.5)});
  std::vector<torch::Tensor> alone;
  std::vector<std::unique_ptr<Optimizer>> alone_opt;
  for (int64_t j = 0; j < 3; ++j) {
    alone.push_back(leaf(x0[j]));
    alone_opt.push_back(make_optimizer(c, {role_group("hidden", alone.back(), Role::Hidden, 2.0)}));
  }
  OptimConfig ac = c;
  ac.kind = "adamw";
  torch::Tensor r2 = leaf(r0);
  auto adamw = make_optimizer(ac, {role_group("router", r2, Role::Router, 0.5)});
  for (int s = 0; s < 3; ++s) {
    const torch::Tensor g = grad(s, 72, 0).view({3, 6, 4});
    x.mutable_grad() = g;
    r.mutable_grad() = grad(s, 12, 1).view({3, 4});
    r2.mutable_grad() = grad(s, 12, 1).view({3, 4});
    for (int64_t j = 0; j < 3; ++j) alone[j].mutable_grad() = g[j].clone();
    opt->step(0.75);
    adamw->step(0.75);
    for (auto& o : alone_opt) o->step(0.75);
  }
  for (int64_t j = 0; j < 3; ++j) EXPECT_LT(max_rel_diff(x.detach()[j], alone[j].detach()), 1e-12) << "expert " << j;
  EXPECT_TRUE(torch::equal(r.detach(), r2.detach())) << "the router takes AdamW's step exactly";
  EXPECT_TRUE(muon_orthogonalized(Role::Expert));
  EXPECT_FALSE(muon_orthogonalized(Role::Router));
}

TEST(MuonStep, CheckpointContinuesBitForBitAndRefusesOtherKinds) {
  torch::manual_seed(7);
  const torch::Tensor w0 = torch::randn({4, 6}), b0 = torch::randn({6});
  auto grad = [](int s, size_t i) {
    const torch::Tensor base = i == 0 ? torch::arange(24, torch::kFloat32).view({4, 6}) : torch::arange(6, torch::kFloat32);
    return torch::cos(base * (s + 1) + static_cast<double>(i));
  };
  auto run = [&](Optimizer& o, int from, int to) {
    for (int s = from; s < to; ++s) {
      for (size_t i = 0; i < o.groups().size(); ++i) o.groups()[i].param.mutable_grad() = grad(s, i);
      o.step();
    }
  };
  OptimConfig c;
  c.kind = "muon";
  c.lr = 0.01;
  c.weight_decay = 0.1;
  torch::Tensor wr = leaf(w0), br = leaf(b0), w1 = leaf(w0), b1 = leaf(b0);
  auto ref = make_optimizer(c, {role_group("w", wr, Role::Hidden), role_group("b", br, Role::Vector)});
  run(*ref, 0, 6);
  auto first = make_optimizer(c, {role_group("w", w1, Role::Hidden), role_group("b", b1, Role::Vector)});
  run(*first, 0, 3);
  std::stringstream ss;
  {
    torch::serialize::OutputArchive ar;
    first->save(ar);
    ar.save_to(ss);
  }
  torch::Tensor w2 = leaf(w1.detach()), b2 = leaf(b1.detach());
  auto resumed = make_optimizer(c, {role_group("w", w2, Role::Hidden), role_group("b", b2, Role::Vector)});
  {
    torch::serialize::InputArchive ar;
    ar.load_from(ss);
    resumed->load(ar);
  }
  run(*resumed, 3, 6);
  EXPECT_TRUE(torch::equal(w2.detach(), wr.detach()));
  EXPECT_TRUE(torch::equal(b2.detach(), br.detach()));
  OptimConfig other = c;
  other.kind = "adamw";
  auto wrong = make_optimizer(other, {role_group("w", leaf(w0), Role::Hidden), role_group("b", leaf(b0), Role::Vector)});
  ss.clear();
  ss.seekg(0);
  torch::serialize::InputArchive ar;
  ar.load_from(ss);
  EXPECT_THROW(wrong->load(ar), UserError);
}

TEST(MuonConfig, Validation) {
  EXPECT_EQ(optimizer_family("muon"), OptFamily::Muon);
  auto bad = [](const std::function<void(OptimConfig&)>& f, const std::string& field) {
    OptimConfig c;
    c.kind = "muon";
    f(c);
    try {
      validate_optim_config(c);
      ADD_FAILURE() << field;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad([](OptimConfig& c) { c.muon_momentum = 1.0; }, "optim.muon_momentum");
  bad([](OptimConfig& c) { c.ns_steps = 0; }, "optim.ns_steps");
  bad([](OptimConfig& c) { c.muon_scale = "frobenius"; }, "optim.muon_scale");
  bad([](OptimConfig& c) { c.muon_eps = -1; }, "optim.muon_eps");
  // The TOML reader takes the fields; the JSON of a non-Muon config does not carry them.
  const TrainConfig t = train_config_from_toml_text("[optim]\nkind = \"muon\"\nmuon_scale = \"rms\"\nns_steps = 6\n", "t");
  EXPECT_EQ(t.optim.muon_scale, "rms");
  EXPECT_EQ(t.optim.ns_steps, 6);
  EXPECT_TRUE(train_config_to_json(t).at("optim").contains("muon_scale"));
  EXPECT_FALSE(train_config_to_json(train_config_from_toml_text("", "t")).at("optim").contains("muon_scale"));
}

// ---- eq. (28) for Muon -------------------------------------------------------------------------

// Model a: y = X W + b; model b stores W' = W / mult (mult = m^-theta) and computes X (mult W') + mult b'.
// b's LR and epsilon factors are the shift's (lr m^theta, eps m^-theta): identical training.
double muon_shift_gap(const OptimConfig& c, double m, double theta, double lr_mult, double eps_mult) {
  torch::manual_seed(11);
  const torch::Tensor X = torch::randn({6, 4}, torch::kFloat64), Y = torch::randn({6, 5}, torch::kFloat64);
  const torch::Tensor w0 = torch::randn({5, 4}, torch::kFloat64), b0 = torch::randn({5}, torch::kFloat64);
  const double mult = std::pow(m, -theta);
  torch::Tensor wa = leaf(w0), ba = leaf(b0), wb = leaf(w0 / mult), bb = leaf(b0 / mult);
  auto oa = make_optimizer(c, {role_group("w", wa, Role::Hidden), role_group("b", ba, Role::Vector)});
  auto ob = make_optimizer(c, {role_group("w", wb, Role::Hidden, lr_mult, eps_mult),
                               role_group("b", bb, Role::Vector, lr_mult, eps_mult)});
  for (int s = 0; s < 8; ++s) {
    oa->zero_grad();
    ob->zero_grad();
    (0.5 * (X.mm(wa.t()) + ba - Y).pow(2).sum()).backward();
    (0.5 * (X.mm((wb * mult).t()) + bb * mult - Y).pow(2).sum()).backward();
    oa->step(0.7);
    ob->step(0.7);
  }
  return std::max(max_rel_diff(wb.detach() * mult, wa.detach()), max_rel_diff(bb.detach() * mult, ba.detach()));
}

TEST(MuonEquivalence, ShiftMovesTheLrByThetaAndEpsilonWithTheGradient) {
  const double m = 8;
  for (double theta : {0.5, 1.0, -0.5}) {
    const double up = std::pow(m, theta);
    for (const std::string rule : {"spectral", "rms"}) {
      OptimConfig c;
      c.kind = "muon";
      c.lr = 0.05;
      c.muon_scale = rule;
      c.muon_eps = 0.5;  // large enough to matter (the gradient's Frobenius norm is O(10))
      c.eps = 0.05;
      c.weight_decay = 0.2;
      for (const std::string mode : {"coupled", "independent"}) {
        c.wd_mode = mode;
        EXPECT_LT(muon_shift_gap(c, m, theta, up, 1 / up), 1e-12) << theta << rule << mode;
      }
      EXPECT_GT(muon_shift_gap(c, m, theta, up, 1), 1e-6) << "the epsilons must follow the gradient";
      EXPECT_GT(muon_shift_gap(c, m, theta, up * up, 1 / up), 1e-3) << "SGD's 2 theta is wrong for Muon";
    }
  }
  // The table's shift does the same to the Muon column (brain/param/table.h).
  std::array<double, kNumRoles> th{};
  th[static_cast<int>(Role::Hidden)] = 0.25;
  const ParamTable t = preset("mup"), s = shift(t, th);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).c[kMuon], t.row(Role::Hidden).c[kMuon] - 0.25);
}

// ---- the table ---------------------------------------------------------------------------------

TEST(MuonTable, ColumnConventionAndIo) {
  const ParamTable mup = preset("mup");
  EXPECT_DOUBLE_EQ(mup.row(Role::Hidden).c[kMuon], 0.0);  // constant LR for hidden matrices (ref. [muon])
  EXPECT_DOUBLE_EQ(mup.row(Role::AttnQ).c[kMuon], 0.0);
  for (Role r : {Role::Embedding, Role::Readout, Role::Vector})  // AdamW roles: the Adam column
    EXPECT_DOUBLE_EQ(mup.row(r).c[kMuon], mup.row(r).c[kAdam]) << role_name(r);
  for (const RoleExponents& e : preset("standard").roles) EXPECT_DOUBLE_EQ(e.c[kMuon], 0.0);
  // depth-mup's in-block Muon LR follows Adam's L^-1/2.
  EXPECT_DOUBLE_EQ(preset("depth-mup").row(Role::Hidden).depth_lr[kMuon], 0.5);
  // A TOML table without a muon column derives it; an explicit one is kept; both round-trip.
  const std::string base = param_to_toml(mup);
  std::string no_muon = base;
  for (size_t at; (at = no_muon.find(", muon = ")) != std::string::npos;)
    no_muon.erase(at, no_muon.find(" }", at) - at);
  ASSERT_EQ(no_muon.find("muon"), std::string::npos);
  EXPECT_EQ(param_from_toml_string(no_muon, "t.toml").roles, mup.roles);
  ParamTable custom = mup;
  custom.row(Role::Hidden).c[kMuon] = 0.25;
  EXPECT_EQ(param_from_toml_string(param_to_toml(custom), "t.toml").roles, custom.roles);
  EXPECT_EQ(param_from_json(param_to_json(custom)), custom);
}

TEST(MuonTable, SpectralPresetIsMupShiftedOntoConditionOne) {
  std::array<double, kNumRoles> th{};
  th[static_cast<int>(Role::Embedding)] = 0.5;
  th[static_cast<int>(Role::Readout)] = -0.5;
  th[static_cast<int>(Role::Router)] = -0.5;  // the router's default row is the readout's
  const ParamTable spectral = preset("spectral"), shifted = shift(preset("mup"), th);
  for (Role r : all_roles()) EXPECT_EQ(spectral.row(r), shifted.row(r)) << role_name(r);
  // No multipliers; init std 1, 1/sqrt(d), 1/d relative to the base (ref. [spectral]).
  for (Role r : all_roles()) EXPECT_DOUBLE_EQ(spectral.row(r).a, 0.0);
  EXPECT_DOUBLE_EQ(spectral.row(Role::Embedding).b, 0.0);
  EXPECT_DOUBLE_EQ(spectral.row(Role::Hidden).b, 0.5);
  EXPECT_DOUBLE_EQ(spectral.row(Role::Readout).b, 1.0);
}

// ---- the theory --------------------------------------------------------------------------------

TEST(MuonTheory, SpectralNormsAndConditionOne) {
  for (const char* p : {"mup", "spectral", "mf", "completep"})
    for (OptFamily f : {OptFamily::Adam, OptFamily::Muon}) {
      const WidthTheory w = width_theory(preset(p), f, 3);
      EXPECT_TRUE(w.stable_init && w.stable_train && w.feature_learning) << p << family_name(f);
      EXPECT_TRUE(w.spectral_init && w.spectral_update) << p << family_name(f) << ": " << w.spectral_violations.size();
      // Hidden: ||W|| ~ ||dW|| ~ 1 for the stored tensor of a row with a = 0.
      if (std::string(p) == "spectral") {
        EXPECT_DOUBLE_EQ(w.layers[2].w_spec.value(), 0.0);
        EXPECT_DOUBLE_EQ(w.layers[2].dw_spec.value(), 0.0);
        EXPECT_DOUBLE_EQ(w.layers[4].w_spec.value(), -0.5);  // readout sqrt(V/d)
        EXPECT_DOUBLE_EQ(w.layers[0].dw_spec.value(), 0.5);  // embedding sqrt(d/V)
      }
    }
  // sp's readout breaks Condition 1 at init (||W_4||_2 ~ 1, not d^-1/2) while stable at init.
  const WidthTheory sp = width_theory(preset("sp"), OptFamily::Adam, 3);
  EXPECT_TRUE(sp.stable_init);
  EXPECT_FALSE(sp.spectral_init);
  ASSERT_FALSE(sp.spectral_violations.empty());
  EXPECT_NE(sp.spectral_violations.front().find("readout"), std::string::npos) << sp.spectral_violations.front();
}

TEST(MuonTheory, WhereMuonFails) {
  // mup + Muon: the hidden update has RMS d^-1, the same as mup + Adam.
  const WidthTheory mup = width_theory(preset("mup"), OptFamily::Muon, 3);
  EXPECT_DOUBLE_EQ(mup.dw(2), -1.0);
  // standard + Muon: the hidden matrices are fine (constant LR is Muon's rule) but the readout on
  // AdamW with one global LR blows the logits up: eq. (25) at layer 4.
  const WidthTheory st = width_theory(preset("standard"), OptFamily::Muon, 3);
  EXPECT_TRUE(st.stable_init);
  EXPECT_FALSE(st.stable_train);
  EXPECT_DOUBLE_EQ(st.dh(3), 0.0);   // the hidden activations move ~1
  EXPECT_DOUBLE_EQ(st.dh(5), 1.0);   // the logits grow like d
  bool named = false;
  for (const auto& c : st.failed_conditions) named = named || c.find("layer 4 (readout)") != std::string::npos;
  EXPECT_TRUE(named);
  // mup + Muon with the RMS-matching scale: the hidden updates grow like d^1/2 (the scale's sqrt(d)).
  const WidthTheory rms = width_theory(preset("mup"), OptFamily::Muon, 3, {}, false, MuonScale::Rms);
  EXPECT_FALSE(rms.stable_train);
  EXPECT_DOUBLE_EQ(rms.dw(2), -0.5);
  EXPECT_DOUBLE_EQ(rms.dh(2), 0.5);
  EXPECT_DOUBLE_EQ(rms.layers[2].dw_spec.value(), 0.5);
}

// ---- the coordinate check ----------------------------------------------------------------------

TEST(MuonCoordCheck, MupAndSpectralPassStandardAndRmsFailWhereTheTheorySays) {
  for (const char* p : {"mup", "spectral"}) {
    const CoordCheckResult r = run_coordcheck(bigram_check(p, "kind = \"muon\"\nlr = 0.01"));
    EXPECT_TRUE(r.pass()) << p << "\n" << failures_text(r);
    int spectral_rows = 0;
    for (const auto& row : r.rows)
      if (row.predicted && (row.q == CoordQuantity::WSpec || row.q == CoordQuantity::DWSpec)) {
        ++spectral_rows;
        EXPECT_TRUE(row.matches.value_or(false)) << p << " " << row.layer << " " << coord_quantity_name(row.q);
      }
    EXPECT_EQ(spectral_rows, 4 * (4 + 3)) << p;  // 4 matrices, ||W|| at steps 0..3 and ||dW|| at 1..3
  }
  const CoordCheckResult st = run_coordcheck(bigram_check("standard", "kind = \"muon\"\nlr = 0.01"));
  EXPECT_FALSE(st.pass());
  EXPECT_TRUE(has_failure(st, "dh logits ", "unstable")) << failures_text(st);
  EXPECT_FALSE(has_failure(st, "dh h2 ", "unstable")) << failures_text(st);  // Muon's hidden update is fine
  const CoordCheckResult rms = run_coordcheck(bigram_check("mup", "kind = \"muon\"\nlr = 0.01\nmuon_scale = \"rms\""));
  EXPECT_FALSE(rms.pass());
  EXPECT_TRUE(has_failure(rms, "dh h3 ", "unstable")) << failures_text(rms);
}

// ---- sweeps ------------------------------------------------------------------------------------

TEST(MuonSweep, ScaleRuleIsAGridAxis) {
  const SweepSpec s = load_sweep(std::string(SCALEINV_SOURCE_DIR) + "/examples/sweeps/gpt_kjv_muon_width.toml");
  ASSERT_EQ(s.points.size(), 2u * 3 * 10 * 2);
  int rms = 0;
  for (const SweepPoint& p : s.points) {
    EXPECT_EQ(p.config.optim.kind, "muon");
    rms += p.config.optim.muon_scale == "rms";
  }
  EXPECT_EQ(rms, 60);
  // The rules are distinct runs (Muon's fields are part of a Muon config's identity).
  EXPECT_NE(s.points.front().id, s.points.back().id);
}
