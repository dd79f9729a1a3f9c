// A parameterization on a model scaleinv did not write (issue 15): roles from shapes, blocks and the
// depth multiplier, the refusals, and from C++ on a libtorch module written here (not from the zoo)
// the eq. (28) application: training through apply_parameterization equals training the table's
// own parameterization with forward multipliers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/adapt/apply_module.h"
#include "engine/adapt/module_coordcheck.h"
#include "brain/adapt/own_model.h"
#include "brain/util/errors.h"
#include "fixtures.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"

using namespace scaleinv;

namespace {

// The muP paper's MLP: in -> w -> w -> out, ReLU, no bias; `mult` = forward multipliers per layer.
struct OwnMlpImpl : torch::nn::Module {
  OwnMlpImpl(int width, std::array<double, 3> mult = {1, 1, 1}) : mult(mult) {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(24, width).bias(false)));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(width, 5).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(mult[0] * fc1(x));
    h = torch::relu(mult[1] * fc2(h));
    return mult[2] * head(h);
  }
  std::array<double, 3> mult;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};
TORCH_MODULE(OwnMlp);

OwnTensor t(const std::string& name, std::vector<int64_t> shape, TensorLayout l = TensorLayout::OutIn) {
  return {name, std::move(shape), l, 1.0};
}

std::vector<OwnTensor> stack(int w, int depth) {
  std::vector<OwnTensor> v{t("emb.weight", {50, w}, TensorLayout::InOut)};
  for (int i = 0; i < depth; ++i) {
    v.push_back(t(fmt::format("blocks.{}.fc.weight", i), {4 * w, w}));
    v.push_back(t(fmt::format("blocks.{}.fc.bias", i), {4 * w}));
    v.push_back(t(fmt::format("blocks.{}.proj.weight", i), {w, 4 * w}));
  }
  v.push_back(t("out.weight", {50, w}));
  return v;
}

std::string error_of(const std::function<void()>& f) { return scaleinv::testing::user_error_of(f); }

}  // namespace

TEST(AdaptRoles, FromShapesWithBlocksAndDepth) {
  OwnModelSpec s;
  s.base = stack(32, 2);
  s.delta = stack(64, 2);
  s.target = stack(128, 6);
  const OwnRoles r = infer_roles(s);
  EXPECT_DOUBLE_EQ(r.m, 4.0);
  EXPECT_DOUBLE_EQ(r.k, 3.0);
  EXPECT_EQ(r.blocks, 6);
  EXPECT_EQ(r.base_blocks, 2);
  auto role = [&](const std::string& n) {
    for (const OwnRole& o : r.tensors)
      if (o.name == n) return o;
    ADD_FAILURE() << n;
    return OwnRole{};
  };
  EXPECT_EQ(role("emb.weight").role, Role::Embedding);
  EXPECT_FALSE(role("emb.weight").in_block);
  EXPECT_EQ(role("blocks.5.fc.weight").role, Role::Hidden);
  EXPECT_TRUE(role("blocks.5.fc.weight").in_block);
  EXPECT_EQ(role("blocks.5.fc.weight").canonical, "blocks.*.fc.weight");
  EXPECT_EQ(role("blocks.5.fc.bias").role, Role::Vector);
  EXPECT_EQ(role("out.weight").role, Role::Readout);
}

TEST(AdaptRoles, ErrorsNameTheTensor) {
  OwnModelSpec s;
  s.base = stack(32, 2);
  s.delta = stack(64, 2);
  s.target = stack(128, 2);
  s.target[0].shape = {51, 128};  // the vocabulary changed: not a width dimension
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("field 'emb.weight': dimension 0 is 51"), std::string::npos);
  s.target = stack(128, 2);
  s.target.push_back(t("extra.weight", {128, 128}));
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("field 'extra.weight': has no counterpart in the base"), std::string::npos);
  s.target = stack(128, 2);
  s.overrides = {{"^blocks.0.fc.weight", Role::Embedding}};  // both fans grow: not an embedding's shape
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("field 'blocks.0.fc.weight': override"), std::string::npos);
  s.overrides = {{"^out", Role::Embedding}};  // [vocab, d] read the other way round fits: accepted
  EXPECT_EQ(error_of([&] { infer_roles(s); }), "(no error)");
  s.overrides = {{"^out", Role::Hidden}};
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("does not fit"), std::string::npos);
  s.overrides = {{"fc", Role::Hidden}};  // also matches blocks.*.fc.bias, a vector
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("field 'blocks.0.fc.bias': override"), std::string::npos);
  s.overrides = {{"^emb", Role::Embedding}};  // fits: accepted
  EXPECT_EQ(error_of([&] { infer_roles(s); }), "(no error)");
  s.overrides.clear();
  s.tied = {{"emb_again", "emb.weight", TensorLayout::Vector}};  // embedding and vector: no tie plan
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("field 'emb_again': shares 'emb.weight' (shape [50, 128])"), std::string::npos);
  s.tied = {{"emb_again", "nothing.weight", TensorLayout::InOut}};
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("not a tensor of the model"), std::string::npos);
  s.tied.clear();
  s.delta = stack(32, 2);
  s.target = stack(32, 2);
  EXPECT_NE(error_of([&] { infer_roles(s); }).find("same shapes"), std::string::npos);
}

TEST(AdaptPlan, RefusesWhereTheShiftIsNotExact) {
  OwnModelSpec s;
  s.base = stack(32, 2);
  s.delta = stack(64, 2);
  s.target = stack(128, 2);
  EXPECT_NE(error_of([&] { plan_own_model(preset("mup"), "adam", 0.1, s); }).find("weight_decay"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_own_model(preset("mup"), "adafactor", 0, s); }).find("adafactor"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_own_model(preset("u-mup"), "adamw", 0, s); }).find("unit"), std::string::npos);
  const OwnPlan p = plan_own_model(preset("mup"), "adamw", 0.1, s);
  for (Role r : all_roles()) EXPECT_EQ(p.shifted.row(r).a, 0.0) << role_name(r);
}

TEST(AdaptApply, LibtorchModuleTrainsExactlyAsTheTableWithMultipliers) {
  // seed 000 eq. 28, for scaleinv's own AdamW (with decay) and SGD: the shifted module (no
  // multipliers) and the table's parameterization (multipliers m^-a, LR m^-c, eps m^-eps).
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({16, 24});
  const torch::Tensor y = torch::randint(0, 5, {16});
  for (const std::string kind : {"adamw", "sgd"}) {
    const ParamTable table = preset("mup");
    const OptFamily fam = kind == "sgd" ? OptFamily::SGD : OptFamily::Adam;
    const int w = 256;
    const double m = 4.0;
    torch::manual_seed(3);
    OwnMlp shifted(w), base(64), delta(128);
    OptimConfig cfg;
    cfg.kind = kind;
    cfg.lr = kind == "sgd" ? 0.05 : 3e-3;
    cfg.eps = 1e-4;
    cfg.weight_decay = kind == "sgd" ? 0.0 : 0.1;
    OwnApplied a = apply_parameterization(*shifted, *base, *delta, table, cfg);
    ASSERT_EQ(a.groups.size(), 3u);
    EXPECT_EQ(a.groups[0].role, Role::Embedding);
    EXPECT_EQ(a.groups[1].role, Role::Hidden);
    EXPECT_EQ(a.groups[2].role, Role::Readout);
    auto opt = make_optimizer(cfg, a.groups);

    const Role roles[3] = {Role::Embedding, Role::Hidden, Role::Readout};
    std::array<double, 3> mult;
    for (int i = 0; i < 3; ++i) mult[i] = std::pow(m, -table.row(roles[i]).a);
    OwnMlp native(w, mult);
    std::vector<ParamGroup> groups;
    {
      torch::NoGradGuard ng;
      auto np = native->parameters(), sp = shifted->parameters();
      for (int i = 0; i < 3; ++i) {
        np[i].copy_(sp[i] / mult[i]);  // the same effective weights
        const TensorScale sc = tensor_scale(table, roles[i], fam, m, 1, false);
        ParamGroup g;
        g.name = a.groups[i].name;
        g.param = np[i];
        g.role = roles[i];
        g.lr_mult = sc.lr;
        g.wd_mult = sc.wd;
        g.eps_mult = sc.eps;
        groups.push_back(g);
      }
    }
    auto nopt = make_optimizer(cfg, groups);
    for (int step = 0; step < 5; ++step) {
      for (auto [model, o] : {std::pair{shifted, opt.get()}, std::pair{native, nopt.get()}}) {
        o->zero_grad();
        torch::nn::functional::cross_entropy(model->forward(x), y).backward();
        o->step(1.0);
      }
    }
    const torch::Tensor out_s = shifted->forward(x), out_n = native->forward(x);
    const double err = ((out_s - out_n).abs().max() / out_n.abs().max()).item<double>();
    EXPECT_LT(err, 1e-5) << kind;
  }
}

// The coordinate check on the module as written (engine/adapt/module_coordcheck.h): under mup every row
// matches the theory; under standard the hidden and readout updates grow with width and the check
// names them. The probe is small against the widths (16 samples + 5 outputs << 128; coordcheck.h).
TEST(AdaptCoordCheck, MupPassesStandardFailsOnTheUserModule) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({16, 24});
  const torch::Tensor y = torch::randint(0, 5, {16});
  auto make = [](int w) { return std::make_shared<OwnMlpImpl>(w); };
  auto loss = [](torch::nn::Module& m, const torch::Tensor& in, const torch::Tensor& target, ActivationTap& tap) {
    auto& net = static_cast<OwnMlpImpl&>(m);
    torch::Tensor h = torch::relu(tap("fc1", net.fc1(in)));
    h = torch::relu(tap("fc2", net.fc2(h)));
    return torch::nn::functional::cross_entropy(tap("head", net.head(h)), target);
  };
  ModuleCoordCheck cc;
  cc.widths = {128, 256, 512, 1024};
  cc.optim.kind = "adamw";
  cc.optim.lr = 1e-2;
  cc.show_progress = false;
  cc.quantities = parse_coord_quantities("h,dh,hgrad,wgrad,dw", "test");
  const torch::Tensor before = torch::rand({1});
  torch::manual_seed(77);
  const torch::Tensor expect = torch::rand({1});
  torch::manual_seed(77);
  const CoordCheckResult mup = coordcheck_module(make, loss, {{x, y}}, cc);
  EXPECT_TRUE(torch::equal(torch::rand({1}), expect)) << "the caller's generator state is restored";
  EXPECT_TRUE(mup.pass()) << render_coordcheck(mup);
  // Every tapped module and parameter got its role's prediction.
  int predicted_dw = 0, predicted_dh = 0;
  for (const CoordRow& r : mup.rows) {
    if (r.q == CoordQuantity::DW && r.step == 1 && r.predicted) ++predicted_dw;
    if (r.q == CoordQuantity::DH && r.step == 1 && r.predicted) ++predicted_dh;
  }
  EXPECT_EQ(predicted_dw, 3) << render_coordcheck(mup);
  EXPECT_EQ(predicted_dh, 3) << render_coordcheck(mup);

  cc.param = "standard";
  const CoordCheckResult sp = coordcheck_module(make, loss, {{x, y}}, cc);
  EXPECT_FALSE(sp.pass());
  const std::string failures = fmt::format("{}", fmt::join(sp.failures, "\n"));
  EXPECT_NE(failures.find("dh head"), std::string::npos) << failures;  // the logits' update grows
  EXPECT_NE(failures.find("dh fc2"), std::string::npos) << failures;   // the hidden update grows

  // A tap that names no module is one line naming it.
  auto bad = [](torch::nn::Module& m, const torch::Tensor& in, const torch::Tensor& target, ActivationTap& tap) {
    return torch::nn::functional::cross_entropy(tap("logits", static_cast<OwnMlpImpl&>(m).forward(in)), target);
  };
  cc.param = "mup";
  cc.widths = {64, 128};
  cc.seeds = {0, 1};
  cc.steps = 1;
  const std::string bad_tap = error_of([&] { coordcheck_module(make, bad, {{x, y}}, cc); });
  EXPECT_NE(bad_tap.find("field 'logits': a tap names no module"), std::string::npos) << bad_tap;
  cc.widths = {64};
  EXPECT_NE(error_of([&] { coordcheck_module(make, loss, {{x, y}}, cc); }).find("widths"), std::string::npos);
}

TEST(AdaptExample, OwnMlpPassesItsCheckAndTrains) {
  // examples/cpp/own_mlp.cpp: a user's module, built next to the CLI.
  const std::string dir = std::string(SCALEINV_BIN).substr(0, std::string(SCALEINV_BIN).rfind('/'));
  auto run = [&](const std::string& args) {
    FILE* p = popen((dir + "/examples/own_mlp " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[512];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int rc = p ? pclose(p) : -1;
    return std::make_pair(rc, out);
  };
  const auto [rc, out] = run("--steps 60");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("under mup (AdamW lr 0.01, widths 128..1024, 3 seeds, 3 steps): PASS"), std::string::npos) << out;
  // Every run of the sweep trained: a finite loss below ln(10) = 2.30 at the sweep's middle LR.
  for (const std::string p : {"mup     ", "standard"})
    for (int w : {128, 1024}) {
      const size_t at = out.find(fmt::format("  {} {:5d}", p, w));
      ASSERT_NE(at, std::string::npos) << out;
      double l[9];
      ASSERT_EQ(std::sscanf(out.c_str() + at + 16, "%lf %lf %lf %lf %lf %lf %lf %lf %lf", &l[0], &l[1], &l[2], &l[3],
                            &l[4], &l[5], &l[6], &l[7], &l[8]),
                9)
          << out;
      EXPECT_LT(l[4], 2.0) << p << " " << w << "\n" << out;
    }
  const auto [rc_sp, out_sp] = run("--param standard --skip-sweep");
  ASSERT_EQ(rc_sp, 0) << out_sp;
  EXPECT_NE(out_sp.find("under standard (AdamW lr 0.01, widths 128..1024, 3 seeds, 3 steps): FAIL"), std::string::npos)
      << out_sp;
  EXPECT_EQ(run("--bogus").first >> 8, 2);
}

// Each tensor's exponents use the ratio of the dimension they are about (own_model.h): the
// fan-in's for a hidden matrix, the fan-out's for an embedding. Here the FFN grows twice as fast as
// the model width (fc: fan-out x8, fan-in x4; proj the other way), so the fan-out's ratio used for
// a hidden tensor gives another LR. A tied readout use of the embedding is multiplied by
// m^-((a_r + b_r) - (a_e + b_e)): m^-1 under mup. (Issue 63: both planted bugs, the fan-out's ratio
// for a hidden tensor and m^-1/2 for the tie, were caught only by the Python tests.)
TEST(AdaptPlan, EachTensorUsesItsOwnDimensionsRatioAndATiedReadoutTheInitMatchedExponent) {
  auto model = [](int w, int ffn) {
    return std::vector<OwnTensor>{t("emb.weight", {50, w}, TensorLayout::InOut), t("fc.weight", {ffn, w}),
                                  t("proj.weight", {w, ffn}), t("out.weight", {50, w})};
  };
  OwnModelSpec s;
  s.base = model(32, 64);
  s.delta = model(64, 128);
  s.target = model(128, 512);  // width x4, FFN x8
  s.tied = {{"out.weight", "emb.weight", TensorLayout::OutIn}};
  s.target.pop_back();  // out.weight is the embedding read again, not a tensor of its own
  s.base.pop_back();
  s.delta.pop_back();
  const OwnPlan p = plan_own_model(preset("mup"), "adam", 0, s);
  auto plan_of = [&](const std::string& n) {
    for (size_t i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == n) return std::make_pair(p.roles.tensors[i], p.tensors[i]);
    ADD_FAILURE() << n;
    return std::make_pair(OwnRole{}, OwnTensorPlan{});
  };
  const double c_hidden = p.shifted.row(Role::Hidden).c[static_cast<size_t>(OptFamily::Adam)];
  ASSERT_NE(c_hidden, 0.0);  // else the ratios could not tell apart
  const auto [fc_role, fc] = plan_of("fc.weight");
  EXPECT_EQ(fc_role.role, Role::Hidden);
  EXPECT_DOUBLE_EQ(fc_role.m, 4.0);  // its fan-in (the width), not its fan-out (x8)
  EXPECT_DOUBLE_EQ(fc.lr, std::pow(4.0, -c_hidden));
  const auto [proj_role, proj] = plan_of("proj.weight");
  EXPECT_DOUBLE_EQ(proj_role.m, 8.0);  // its fan-in is the FFN
  EXPECT_DOUBLE_EQ(proj.lr, std::pow(8.0, -c_hidden));
  const auto [emb_role, emb] = plan_of("emb.weight");
  EXPECT_EQ(emb_role.role, Role::Embedding);
  EXPECT_DOUBLE_EQ(emb_role.m, 4.0);  // its fan-out (the width)
  ASSERT_EQ(p.ties.size(), 1u);
  const RoleExponents& e = p.table.row(Role::Embedding);
  const RoleExponents& r = p.table.row(Role::Readout);
  EXPECT_DOUBLE_EQ(p.ties[0].exponent, (r.a + r.b) - (e.a + e.b));
  EXPECT_DOUBLE_EQ(p.ties[0].exponent, 1.0);       // mup: the readout use at m^-1 ...
  EXPECT_DOUBLE_EQ(p.ties[0].multiplier, 0.25);    // ... = 1/4 at width x4
}
