// Optimizers: each against a hand-computed step, per-group factors, the equivalence that makes
// sp == ntk train identically, coupled vs independent weight decay, checkpoints, schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensor_util.h"
#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "brain/train/config.h"

using namespace scaleinv;
using scaleinv::testing::leaf;
using scaleinv::testing::max_rel_diff;

namespace {

torch::Tensor dvec(std::vector<double> v) { return torch::tensor(v, torch::kFloat64); }
std::vector<double> to_vec(const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().to(torch::kFloat64).flatten();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

ParamGroup group(const std::string& name, const torch::Tensor& p, double lr = 1, double wd = 1, double eps = 1) {
  ParamGroup g;
  g.name = name;
  g.param = p;
  g.lr_mult = lr;
  g.wd_mult = wd;
  g.eps_mult = eps;
  return g;
}

// Runs one optimizer over `groups`, feeding gradient grad(step, group) at each step.
void run_steps(Optimizer& opt, int from, int to, const std::function<torch::Tensor(int, size_t)>& grad,
               double lr_factor = 1.0) {
  for (int s = from; s < to; ++s) {
    for (size_t i = 0; i < opt.groups().size(); ++i) opt.groups()[i].param.mutable_grad() = grad(s, i);
    opt.step(lr_factor);
  }
}

void expect_user_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a UserError mentioning " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(OptimConfig, FamiliesAndValidation) {
  EXPECT_EQ(optimizer_family("sgd"), OptFamily::SGD);
  for (const char* k : {"adam", "adamw", "sign"}) EXPECT_EQ(optimizer_family(k), OptFamily::Adam) << k;
  EXPECT_EQ(optimizer_family("adafactor"), OptFamily::Adafactor);
  expect_user_error([] { optimizer_family("lamb"); }, "optim.kind");
  OptimConfig c;
  c.wd_mode = "sometimes";
  expect_user_error([&] { validate_optim_config(c); }, "optim.wd_mode");
  c = OptimConfig();
  c.beta2 = 1.0;
  expect_user_error([&] { validate_optim_config(c); }, "optim.beta2");
  c = OptimConfig();
  c.kind = "adafactor";
  c.eps = 0;
  expect_user_error([&] { make_optimizer(c, {}); }, "optim.eps");
  c = OptimConfig();
  c.schedule = "cyclic";
  expect_user_error([&] { make_optimizer(c, {}); }, "optim.schedule");
  expect_user_error([&] { make_optimizer(c, {}); }, "(fix: use one of constant, cosine, linear, wsd)");
}

// Optimizer kinds are one table (brain/optim/optim_config.h): every row builds, under its own kind, and
// the kinds list the fixes print is the table's.
TEST(OptimConfig, EveryKindBuilds) {
  std::string listed;
  for (const OptimizerKind& k : optimizer_kind_rows()) {
    SCOPED_TRACE(k.kind);
    OptimConfig c;
    c.kind = k.kind;
    if (k.family == OptFamily::Adafactor) c.eps = 1e-30;
    torch::Tensor w = torch::randn({4, 3});
    auto opt = make_optimizer(c, {group("w", w)});
    ASSERT_TRUE(opt);
    EXPECT_EQ(optimizer_family(k.kind), k.family);
    listed += (listed.empty() ? "" : ", ") + k.kind;
  }
  EXPECT_EQ(listed, optimizer_kinds());
  EXPECT_EQ(listed, "sgd, adam, adamw, sign, adafactor, muon, lion");
}

// The rows' decay and epsilon traits are what the steps do (brain/optim/optimizer_kinds.h): with a zero
// gradient, a per-tensor LR factor of 2 and a weight decay, a decoupled decay shrinks W by base LR x
// wd exactly (the factor left out), a coupled (L2) decay moves it otherwise, and no decay leaves it.
TEST(OptimizerKinds, DecayTraitsMatchTheSteps) {
  for (const OptimizerKind& k : optimizer_kind_rows()) {
    SCOPED_TRACE(k.kind);
    OptimConfig c;
    c.kind = k.kind;
    c.lr = 0.1;
    c.weight_decay = 0.5;
    c.eps = k.default_eps;
    torch::Tensor w = leaf(dvec({1.0, -2.0, 4.0}));
    auto opt = make_optimizer(c, {group("w", w, /*lr=*/2.0)});
    run_steps(*opt, 0, 1, [](int, size_t) { return torch::zeros({3}, torch::kFloat64); });
    const auto got = to_vec(w);
    const std::vector<double> decoupled = {0.95, -1.9, 3.8};
    if (k.decay == DecayMode::Decoupled) {
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], decoupled[i], 1e-15) << i;
    } else if (k.decay == DecayMode::Coupled) {
      EXPECT_GT(std::abs(got[0] - decoupled[0]), 1e-3);
    } else {
      EXPECT_EQ(got, std::vector<double>({1.0, -2.0, 4.0}));
    }
    if (k.eps == EpsMode::Squared) {  // validate_optim_config wants eps > 0
      c.eps = 0;
      expect_user_error([&] { validate_optim_config(c); }, "optim.eps");
    }
  }
}

// A name without a row is a UserError naming the field and listing the rows; the field and file are
// the caller's.
TEST(OptimizerKinds, LookupListsTheKinds) {
  expect_user_error([] { optimizer_kind("nope"); }, "optim.kind");
  expect_user_error([] { optimizer_kind("nope"); }, std::string("use one of ") + optimizer_kinds());
  expect_user_error([] { optimizer_kind("nope", "command line", "--optimizer"); }, "--optimizer");
  EXPECT_EQ(find_optimizer_kind("nope"), nullptr);
  EXPECT_EQ(optimizer_kind("adamw").python_class, "AdamW");
  EXPECT_TRUE(optimizer_kind("muon").reads("muon_momentum"));
  EXPECT_FALSE(optimizer_kind("adamw").reads("muon_momentum"));
  EXPECT_TRUE(optimizer_kind("adam").l2_in_normalisation());
  EXPECT_FALSE(optimizer_kind("sgd").l2_in_normalisation());
}

TEST(OptimGroups, FactorsComeFromTheTable) {
  ScaleContext ctx;
  ctx.table = preset("mup");
  ctx.family = OptFamily::Adam;
  ctx.width = 256;
  ctx.depth = 16;
  std::vector<TaggedParam> params;
  const std::pair<Role, bool> tags[] = {
      {Role::Embedding, false}, {Role::Hidden, true}, {Role::Readout, false}, {Role::Vector, true}};
  for (const auto& [role, in_block] : tags) {
    TaggedParam tp;
    tp.name = std::string(role_name(role)) + (in_block ? ".block" : "");
    tp.tensor = torch::zeros({2, 2});
    tp.tag.role = role;
    tp.tag.in_block = in_block;
    params.push_back(tp);
  }
  const auto groups = param_groups(params, ctx);
  ASSERT_EQ(groups.size(), params.size());
  bool some_not_one = false;
  for (size_t i = 0; i < groups.size(); ++i) {
    const TensorScale s = ctx.scale(params[i].tag.role, params[i].tag.in_block);
    EXPECT_EQ(groups[i].name, params[i].name);
    EXPECT_TRUE(groups[i].param.is_same(params[i].tensor));
    EXPECT_DOUBLE_EQ(groups[i].lr_mult, s.lr);
    EXPECT_DOUBLE_EQ(groups[i].wd_mult, s.wd);
    EXPECT_DOUBLE_EQ(groups[i].eps_mult, s.eps);
    some_not_one |= std::abs(s.lr - 1) > 1e-9;
  }
  EXPECT_TRUE(some_not_one);  // mup at m = 4: the hidden LR shrinks
}

TEST(OptimSgd, HandComputedMomentumAndL2) {
  const std::vector<double> p0 = {1.0, -2.0, 0.5};
  const std::vector<std::vector<double>> gs = {{0.1, 0.2, -0.3}, {-0.4, 0.05, 0.2}, {0.3, -0.1, 0.0}};
  OptimConfig c;
  c.kind = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  torch::Tensor p = leaf(dvec(p0));
  auto opt = make_optimizer(c, {group("w", p, /*lr=*/2.0, /*wd=*/3.0)});
  run_steps(*opt, 0, 3, [&](int s, size_t) { return dvec(gs[s]); });
  // torch convention: d = g + wd*p; buf = momentum*buf + d; p -= lr*buf.
  const double lr = 0.2, wd = 0.03;
  std::vector<double> w = p0, buf(3, 0.0);
  for (int s = 0; s < 3; ++s)
    for (int j = 0; j < 3; ++j) {
      buf[j] = 0.9 * buf[j] + gs[s][j] + wd * w[j];
      w[j] -= lr * buf[j];
    }
  const auto got = to_vec(p);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(got[j], w[j], 1e-15) << j;
  EXPECT_EQ(opt->steps_taken(), 3);

  // Without momentum: p -= lr * (g + wd*p).
  c.momentum = 0;
  torch::Tensor q = leaf(dvec(p0));
  auto plain = make_optimizer(c, {group("w", q, 2.0, 3.0)});
  run_steps(*plain, 0, 1, [&](int s, size_t) { return dvec(gs[s]); }, /*lr_factor=*/0.5);
  const auto got2 = to_vec(q);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(got2[j], p0[j] - 0.1 * (gs[0][j] + wd * p0[j]), 1e-15);
}

namespace {
// Scalar reference Adam / AdamW: returns the parameters after the gradient sequence.
std::vector<double> adam_reference(const std::string& kind, std::vector<double> w,
                                   const std::vector<std::vector<double>>& gs, double lr, double b1, double b2,
                                   double eps, double wd, const std::string& wd_mode, double base_lr) {
  std::vector<double> m(w.size(), 0), v(w.size(), 0);
  for (size_t s = 0; s < gs.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    for (size_t j = 0; j < w.size(); ++j) {
      double g = gs[s][j];
      if (kind == "adam") g += wd * w[j];
      // coupled decay uses the base LR (no per-tensor factor): optim_detail.h
      if (kind == "adamw") w[j] *= wd_mode == "coupled" ? 1 - base_lr * wd : 1 - wd;
      m[j] = b1 * m[j] + (1 - b1) * g;
      v[j] = b2 * v[j] + (1 - b2) * g * g;
      const double mhat = m[j] / (1 - std::pow(b1, t)), vhat = v[j] / (1 - std::pow(b2, t));
      w[j] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  return w;
}
}  // namespace

TEST(OptimAdam, HandComputedAdamAndAdamW) {
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 0.0};
  const std::vector<std::vector<double>> gs = {
      {0.1, 0.2, -0.3, 1e-3}, {-0.4, 0.05, 0.2, 2e-3}, {0.3, -0.1, 0.0, -1e-3}};
  for (const std::string kind : {"adam", "adamw"})
    for (const std::string mode : {"coupled", "independent"}) {
      OptimConfig c;
      c.kind = kind;
      c.lr = 0.01;
      c.beta1 = 0.8;
      c.beta2 = 0.95;
      c.eps = 1e-3;
      c.weight_decay = 0.1;
      c.wd_mode = mode;
      torch::Tensor p = leaf(dvec(p0));
      auto opt = make_optimizer(c, {group("w", p, /*lr=*/3.0, /*wd=*/0.5, /*eps=*/2.0)});
      run_steps(*opt, 0, 3, [&](int s, size_t) { return dvec(gs[s]); });
      const auto want = adam_reference(kind, p0, gs, 0.03, 0.8, 0.95, 2e-3, 0.05, mode, /*base_lr=*/0.01);
      const auto got = to_vec(p);
      for (size_t j = 0; j < p0.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-14) << kind << " " << mode << " " << j;
    }
}

TEST(OptimAdam, PerGroupLrAndEpsMultipliers) {
  // One step of momentumless Adam: update = lr_t * g / (|g| + eps_t), per group.
  OptimConfig c;
  c.kind = "adam";
  c.lr = 0.1;
  c.beta1 = 0;
  c.beta2 = 0.999;
  c.eps = 1e-3;
  const std::vector<double> g = {0.5, -0.02, 0.001};
  torch::Tensor a = leaf(torch::zeros({3}, torch::kFloat64)), b = leaf(torch::zeros({3}, torch::kFloat64));
  auto opt = make_optimizer(c, {group("a", a, 1.0, 1.0, 1.0), group("b", b, 4.0, 1.0, 100.0)});
  run_steps(*opt, 0, 1, [&](int, size_t) { return dvec(g); });
  const auto ga = to_vec(a), gb = to_vec(b);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(ga[j], -0.1 * g[j] / (std::abs(g[j]) + 1e-3), 1e-15);
    EXPECT_NEAR(gb[j], -0.4 * g[j] / (std::abs(g[j]) + 0.1), 1e-15);
  }
  EXPECT_GT(std::abs(gb[1] / ga[1] - 4.0), 1.0);  // eps_mult mattered
}

TEST(OptimAdam, ZeroEpsilonLeavesZeroGradientEntriesAlone) {
  OptimConfig c;
  c.kind = "adam";
  c.beta1 = 0;
  c.beta2 = 0.9;
  c.eps = 0;
  torch::Tensor p = leaf(dvec({1.0, 2.0}));
  auto opt = make_optimizer(c, {group("w", p)});
  run_steps(*opt, 0, 2, [&](int, size_t) { return dvec({0.0, 0.5}); });
  const auto got = to_vec(p);
  EXPECT_EQ(got[0], 1.0);
  EXPECT_NEAR(got[1], 2.0 - 2 * c.lr, 1e-15);
}

TEST(OptimSign, SignDescentEqualsMomentumlessAdamWithoutEps) {
  torch::manual_seed(3);
  const torch::Tensor p0 = torch::randn({5, 4}, torch::kFloat64);
  std::vector<torch::Tensor> gs;
  for (int s = 0; s < 6; ++s) gs.push_back(torch::randn({5, 4}, torch::kFloat64));
  OptimConfig sign;
  sign.kind = "sign";
  sign.lr = 0.05;
  sign.weight_decay = 0.1;
  OptimConfig adam = sign;
  adam.kind = "adamw";
  adam.beta1 = 0;
  adam.beta2 = 0;
  adam.eps = 0;
  torch::Tensor ps = leaf(p0), pa = leaf(p0);
  auto os = make_optimizer(sign, {group("w", ps, 2.0, 0.5)});
  auto oa = make_optimizer(adam, {group("w", pa, 2.0, 0.5)});
  run_steps(*os, 0, 6, [&](int s, size_t) { return gs[s]; });
  run_steps(*oa, 0, 6, [&](int s, size_t) { return gs[s]; });
  EXPECT_LT(max_rel_diff(pa.detach(), ps.detach()), 1e-15);
  // and sign descent is what it says: p -= lr_t * sign(g) (after the decay)
  torch::Tensor q = leaf(dvec({1.0, -1.0, 3.0}));
  OptimConfig plain;
  plain.kind = "sign";
  plain.lr = 0.1;
  auto oq = make_optimizer(plain, {group("q", q)});
  run_steps(*oq, 0, 1, [&](int, size_t) { return dvec({2.0, 0.0, -1e-9}); });
  const auto got = to_vec(q);
  EXPECT_DOUBLE_EQ(got[0], 0.9);
  EXPECT_DOUBLE_EQ(got[1], -1.0);
  EXPECT_DOUBLE_EQ(got[2], 3.1);
}

// Lion (engine/optim/lion.cpp), three steps by hand: c = b1 m + (1-b1) g; p *= 1 - lr wd (base LR, coupled
// mode); p -= lr_t sign(c); m = b2 m + (1-b2) g. The first entry's step-2 gradient is negative but
// the momentum keeps c positive; step 3 tells b2's momentum from b1's.
TEST(OptimLion, ThreeStepsByHand) {
  OptimConfig c;
  c.kind = "lion";
  c.lr = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.weight_decay = 0.5;
  torch::Tensor p = leaf(dvec({1.0, -2.0, 4.0}));
  auto opt = make_optimizer(c, {group("w", p, /*lr=*/2.0)});  // lr_t = 0.2, decay fraction 0.05
  const std::vector<std::vector<double>> gs = {{0.3, -0.1, 0.0}, {-0.01, 0.5, -2.0}, {-0.03, 0.0, 0.0}};
  run_steps(*opt, 0, 1, [&](int s, size_t) { return dvec(gs[s]); });
  // c = 0.1 g = (0.03, -0.01, 0): p = 0.95 p - 0.2 (1, -1, 0); m = 0.01 g = (0.003, -0.001, 0)
  std::vector<double> want = {0.75, -1.7, 3.8};
  auto got = to_vec(p);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << "step 1, " << i;
  run_steps(*opt, 1, 2, [&](int s, size_t) { return dvec(gs[s]); });
  // c = 0.9 m + 0.1 g = (0.0017, 0.0491, -0.2): p = 0.95 p - 0.2 (1, 1, -1); m = (0.00287, 0.00401, -0.02)
  want = {0.5125, -1.815, 3.81};
  got = to_vec(p);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << "step 2, " << i;
  run_steps(*opt, 2, 3, [&](int s, size_t) { return dvec(gs[s]); });
  // c = 0.9 m + 0.1 g = (-0.000417, 0.003609, -0.018) (with m = b1 m + ... it would be +0.0204 first)
  want = {0.686875, -1.92425, 3.8195};
  got = to_vec(p);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << "step 3, " << i;
  // its state round-trips a checkpoint and it takes no ensemble groups
  std::stringstream buf;
  {
    torch::serialize::OutputArchive ar;
    opt->save(ar);
    ar.save_to(buf);
  }
  torch::Tensor q = leaf(p.detach());
  auto back = make_optimizer(c, {group("w", q, 2.0)});
  torch::serialize::InputArchive in;
  in.load_from(buf);
  back->load(in);
  run_steps(*opt, 3, 4, [&](int, size_t) { return dvec({0.0, 0.0, 0.0}); });
  run_steps(*back, 3, 4, [&](int, size_t) { return dvec({0.0, 0.0, 0.0}); });
  EXPECT_EQ(to_vec(q), to_vec(p));
  EXPECT_FALSE(optimizer_kind("lion").ensemble);
}

TEST(OptimWeightDecay, CoupledAndIndependentDifferExactlyAsDefined) {
  const torch::Tensor p0 = dvec({1.0, -2.0, 4.0});
  const torch::Tensor g = dvec({0.3, 0.1, -0.2});
  for (const std::string kind : {"adamw", "sign", "adafactor"}) {
    OptimConfig c;
    c.kind = kind;
    c.lr = 0.05;
    c.weight_decay = 0.2;
    c.eps = 1e-6;
    c.wd_mode = "coupled";
    OptimConfig ci = c;
    ci.wd_mode = "independent";
    // wd_t = 0.2 * 0.5 = 0.1; the coupled fraction uses the base LR with its schedule, 0.05 * 0.5 = 0.025
    // (not the per-tensor LR factor 2: the table's wd exponent is the decay fraction, brain/param/table.h)
    torch::Tensor pc = leaf(p0), pi = leaf(p0);
    auto oc = make_optimizer(c, {group("w", pc, 2.0, 0.5)});
    auto oi = make_optimizer(ci, {group("w", pi, 2.0, 0.5)});
    run_steps(*oc, 0, 1, [&](int, size_t) { return g; }, 0.5);
    run_steps(*oi, 0, 1, [&](int, size_t) { return g; }, 0.5);
    // Same update, different decay: coupled p0*(1 - base_lr_t*wd_t), independent p0*(1 - wd_t).
    const torch::Tensor diff = pc.detach() - pi.detach();
    const torch::Tensor want = p0 * (0.1 - 0.025 * 0.1);
    EXPECT_LT((diff - want).abs().max().item<double>(), 1e-14) << kind;
  }
  // With a zero gradient only the decay acts.
  for (const std::string mode : {"coupled", "independent"}) {
    OptimConfig c;
    c.kind = "adamw";
    c.lr = 0.05;
    c.weight_decay = 0.2;
    c.wd_mode = mode;
    torch::Tensor p = leaf(p0);
    auto o = make_optimizer(c, {group("w", p)});
    run_steps(*o, 0, 1, [&](int, size_t) { return torch::zeros({3}, torch::kFloat64); });
    const double frac = mode == "coupled" ? 0.05 * 0.2 : 0.2;
    EXPECT_TRUE(torch::allclose(p.detach(), p0 * (1 - frac), 0, 1e-15)) << mode;
  }
}

namespace {
// Scalar reference Adafactor (see adafactor.cpp) for a [rows, cols] matrix or a vector (rows = 0).
std::vector<double> adafactor_reference(std::vector<double> w, int rows, int cols,
                                        const std::vector<std::vector<double>>& gs, double lr, double b1, double b2,
                                        double eps, double wd, double base_lr) {
  const size_t n = w.size();
  const double eps1 = eps * eps;
  std::vector<double> R(rows > 0 ? rows : 0, 0), C(rows > 0 ? cols : 0, 0), V(n, 0), M(n, 0), U(n);
  for (size_t s = 0; s < gs.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    const auto& g = gs[s];
    double ms = 0;
    for (double x : w) ms += x * x;
    const double scale = std::max(1e-3, std::sqrt(ms / n));
    for (double& x : w) x *= 1 - base_lr * wd;  // coupled decay: base LR, no per-tensor factor
    if (rows > 0) {
      for (int i = 0; i < rows; ++i) {
        double a = 0;
        for (int j = 0; j < cols; ++j) a += g[i * cols + j] * g[i * cols + j] + eps1;
        R[i] = b2 * R[i] + (1 - b2) * a / cols;
      }
      for (int j = 0; j < cols; ++j) {
        double a = 0;
        for (int i = 0; i < rows; ++i) a += g[i * cols + j] * g[i * cols + j] + eps1;
        C[j] = b2 * C[j] + (1 - b2) * a / rows;
      }
      double mr = 0;
      for (double r : R) mr += r / rows;
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          const double vhat = R[i] * C[j] / mr / (1 - std::pow(b2, t));
          U[i * cols + j] = g[i * cols + j] / std::sqrt(vhat);
        }
    } else {
      for (size_t j = 0; j < n; ++j) {
        V[j] = b2 * V[j] + (1 - b2) * (g[j] * g[j] + eps1);
        U[j] = g[j] / std::sqrt(V[j] / (1 - std::pow(b2, t)));
      }
    }
    double us = 0;
    for (double u : U) us += u * u;
    const double clip = std::max(1.0, std::sqrt(us / n));
    for (size_t j = 0; j < n; ++j) {
      double u = U[j] / clip;
      if (b1 > 0) {
        M[j] = b1 * M[j] + (1 - b1) * u;
        u = M[j] / (1 - std::pow(b1, t));
      }
      w[j] -= lr * scale * u;
    }
  }
  return w;
}
}  // namespace

TEST(OptimAdafactor, HandComputedFactoredAndVector) {
  torch::manual_seed(7);
  const torch::Tensor m0 = torch::randn({3, 4}, torch::kFloat64), v0 = torch::randn({5}, torch::kFloat64);
  std::vector<std::vector<double>> gm, gv;
  for (int s = 0; s < 4; ++s) {
    // vary the scale so that some steps clip and some do not
    gm.push_back(to_vec(torch::randn({3, 4}, torch::kFloat64) * std::pow(10.0, s % 2 ? 1 : -1)));
    gv.push_back(to_vec(torch::randn({5}, torch::kFloat64) * std::pow(10.0, s % 2 ? -1 : 1)));
  }
  for (double b1 : {0.0, 0.9}) {
    OptimConfig c;
    c.kind = "adafactor";
    c.lr = 0.1;
    c.beta1 = b1;
    c.beta2 = 0.8;
    c.eps = 1e-3;
    c.weight_decay = 0.01;
    torch::Tensor pm = leaf(m0), pv = leaf(v0);
    auto opt = make_optimizer(c, {group("m", pm, 2.0, 1.0, 3.0), group("v", pv, 0.5, 2.0, 1.0)});
    run_steps(*opt, 0, 4, [&](int s, size_t i) {
      return i == 0 ? dvec(gm[s]).view({3, 4}) : dvec(gv[s]);
    });
    const auto wm = adafactor_reference(to_vec(m0), 3, 4, gm, 0.2, b1, 0.8, 3e-3, 0.01, /*base_lr=*/0.1);
    const auto wv = adafactor_reference(to_vec(v0), 0, 5, gv, 0.05, b1, 0.8, 1e-3, 0.02, /*base_lr=*/0.1);
    const auto got_m = to_vec(pm), got_v = to_vec(pv);
    for (size_t j = 0; j < wm.size(); ++j) EXPECT_NEAR(got_m[j], wm[j], 1e-13) << "b1=" << b1 << " m" << j;
    for (size_t j = 0; j < wv.size(); ++j) EXPECT_NEAR(got_v[j], wv[j], 1e-13) << "b1=" << b1 << " v" << j;
  }
}

TEST(OptimAdafactor, RelativeStepFloorAndClipping) {
  OptimConfig c;
  c.kind = "adafactor";
  c.lr = 0.5;
  c.beta1 = 0;
  c.beta2 = 0;
  c.eps = 1e-12;
  // A zero parameter moves by lr * 1e-3 * sign(g): the floor on RMS(p).
  torch::Tensor z = leaf(torch::zeros({4}, torch::kFloat64));
  auto oz = make_optimizer(c, {group("z", z)});
  run_steps(*oz, 0, 1, [&](int, size_t) { return dvec({2.0, -3.0, 1e-3, -0.5}); });
  EXPECT_TRUE(torch::allclose(z.detach(), dvec({-5e-4, 5e-4, -5e-4, 5e-4}), 1e-9, 0));
  // A large gradient after a small one: the raw update has RMS > 1, the applied one exactly 1.
  c.beta2 = 0.99;
  torch::Tensor p = leaf(torch::full({2, 3}, 2.0, torch::kFloat64));
  auto op = make_optimizer(c, {group("p", p)});
  run_steps(*op, 0, 1, [&](int, size_t) { return torch::full({2, 3}, 1e-3, torch::kFloat64); });
  const torch::Tensor before = p.detach().clone();
  const double rms_before = before.pow(2).mean().sqrt().item<double>();
  run_steps(*op, 1, 2, [&](int, size_t) { return dvec({1.0, -2.0, 3.0, 0.5, 1.0, -1.0}).view({2, 3}); });
  const double rms_update = (p.detach() - before).pow(2).mean().sqrt().item<double>() / (0.5 * rms_before);
  EXPECT_NEAR(rms_update, 1.0, 1e-12);
}

namespace {
// The equivalence shift (seed 000 eq. 28): the stored weight is W = m^theta w, the forward pass uses
// m^-theta W. With the LR, epsilon and decay moved as the table's shift moves them, the effective
// weight m^-theta W follows the same trajectory as w itself.
struct Shifted {
  double lr_mult, eps_mult, wd_mult;
};
double equivalence_gap(const OptimConfig& c, double m, double theta, Shifted sh) {
  torch::manual_seed(11);
  const torch::Tensor X = torch::randn({6, 4}, torch::kFloat64), Y = torch::randn({6, 3}, torch::kFloat64);
  const torch::Tensor w0 = torch::randn({4, 3}, torch::kFloat64), b0 = torch::randn({3}, torch::kFloat64);
  const double mult = std::pow(m, -theta);
  torch::Tensor wa = leaf(w0), ba = leaf(b0);
  torch::Tensor wb = leaf(w0 / mult), bb = leaf(b0 / mult);
  auto oa = make_optimizer(c, {group("w", wa), group("b", ba)});
  auto ob = make_optimizer(c, {group("w", wb, sh.lr_mult, sh.wd_mult, sh.eps_mult),
                               group("b", bb, sh.lr_mult, sh.wd_mult, sh.eps_mult)});
  for (int s = 0; s < 8; ++s) {
    for (auto* o : {oa.get(), ob.get()}) o->zero_grad();
    (0.5 * (X.mm(wa) + ba - Y).pow(2).sum()).backward();
    (0.5 * (X.mm(wb * mult) + bb * mult - Y).pow(2).sum()).backward();
    oa->step(0.7);
    ob->step(0.7);
  }
  return std::max(max_rel_diff(wb.detach() * mult, wa.detach()), max_rel_diff(bb.detach() * mult, ba.detach()));
}
}  // namespace

TEST(OptimEquivalence, ShiftedParameterizationTrainsIdentically) {
  const double m = 8;
  for (double theta : {0.5, 1.0, -0.5}) {
    const double up = std::pow(m, theta);
    OptimConfig adam;
    adam.kind = "adam";
    adam.lr = 0.05;
    adam.beta1 = 0.9;
    adam.beta2 = 0.95;
    adam.eps = 0.05;  // large enough to matter
    EXPECT_LT(equivalence_gap(adam, m, theta, {up, 1 / up, 1}), 1e-12) << "adam theta=" << theta;
    EXPECT_GT(equivalence_gap(adam, m, theta, {up, 1, 1}), 1e-6) << "eps must follow the gradient";
    OptimConfig mless = adam;  // momentumless Adam, the seed's analysis case
    mless.beta1 = 0;
    EXPECT_LT(equivalence_gap(mless, m, theta, {up, 1 / up, 1}), 1e-12) << "theta=" << theta;
    OptimConfig adamw = adam;
    adamw.kind = "adamw";
    adamw.weight_decay = 0.3;
    adamw.wd_mode = "independent";  // a per-step fraction: unchanged by the shift
    EXPECT_LT(equivalence_gap(adamw, m, theta, {up, 1 / up, 1}), 1e-12) << "adamw-independent theta=" << theta;
    adamw.wd_mode = "coupled";  // the fraction is base_lr_t * wd_t: also unchanged by the shift
    EXPECT_LT(equivalence_gap(adamw, m, theta, {up, 1 / up, 1}), 1e-12) << "adamw-coupled theta=" << theta;
    EXPECT_GT(equivalence_gap(adamw, m, theta, {up, 1 / up, up}), 1e-6) << "moving wd breaks it";

    OptimConfig sgd;
    sgd.kind = "sgd";
    sgd.lr = 0.01;
    sgd.momentum = 0.9;
    EXPECT_LT(equivalence_gap(sgd, m, theta, {up * up, 1, 1}), 1e-12) << "sgd theta=" << theta;
    EXPECT_GT(equivalence_gap(sgd, m, theta, {up, 1, 1}), 1e-6) << "sgd needs m^(2 theta)";

    OptimConfig ada;
    ada.kind = "adafactor";
    ada.lr = 0.05;
    ada.beta1 = 0.9;
    ada.beta2 = 0.9;
    ada.eps = 0.05;
    EXPECT_LT(equivalence_gap(ada, m, theta, {1, 1 / up, 1}), 1e-12) << "adafactor theta=" << theta;
  }
}

TEST(OptimCheckpoint, SaveLoadContinuesBitForBit) {
  auto grad = [](int s, size_t i) {
    const torch::Tensor base = i == 0 ? torch::arange(12, torch::kFloat32).view({3, 4}) : torch::arange(4, torch::kFloat32);
    return torch::sin(base * (s + 1) + static_cast<double>(i)) * (1.0 + 0.3 * s);
  };
  torch::manual_seed(5);
  const torch::Tensor w0 = torch::randn({3, 4}), b0 = torch::randn({4});
  for (const std::string kind : {"sgd", "adam", "adamw", "sign", "adafactor"}) {
    OptimConfig c;
    c.kind = kind;
    c.lr = 0.01;
    c.momentum = 0.9;
    c.weight_decay = 0.1;
    c.beta1 = 0.9;
    c.eps = 1e-6;
    torch::Tensor wr = leaf(w0), br = leaf(b0), w1 = leaf(w0), b1 = leaf(b0);
    auto ref = make_optimizer(c, {group("w", wr, 2.0), group("b", br, 0.5)});
    run_steps(*ref, 0, 6, grad);
    auto first = make_optimizer(c, {group("w", w1, 2.0), group("b", b1, 0.5)});
    run_steps(*first, 0, 3, grad);
    std::stringstream ss;
    {
      torch::serialize::OutputArchive ar;
      first->save(ar);
      ar.save_to(ss);
    }
    first.reset();
    torch::Tensor w2 = leaf(w1.detach()), b2 = leaf(b1.detach());
    auto resumed = make_optimizer(c, {group("w", w2, 2.0), group("b", b2, 0.5)});
    {
      torch::serialize::InputArchive ar;
      ar.load_from(ss);
      resumed->load(ar);
    }
    EXPECT_EQ(resumed->steps_taken(), 3);
    run_steps(*resumed, 3, 6, grad);
    EXPECT_TRUE(torch::equal(w2.detach(), wr.detach())) << kind;
    EXPECT_TRUE(torch::equal(b2.detach(), br.detach())) << kind;
    EXPECT_EQ(resumed->steps_taken(), 6);

    // A checkpoint from another optimizer is refused.
    OptimConfig other = c;
    other.kind = kind == "sgd" ? "adam" : "sgd";
    auto wrong = make_optimizer(other, {group("w", leaf(w0)), group("b", leaf(b0))});
    ss.clear();
    ss.seekg(0);
    torch::serialize::InputArchive ar;
    ar.load_from(ss);
    expect_user_error([&] { wrong->load(ar); }, "optim.kind");
  }
}

// The fused Adam/AdamW path (CUDA's multi-tensor kernels; on the CPU only inside a
// compat::FusedAdamScope of AlsoCpu, libtorch >= 2.4) against the per-tensor loop: plain groups,
// and ensemble groups ([E, ...] with per-member LR and weight decay) whose member slices go into
// per-member sets. With a scope of Off, the same groups take the loop: no kernel is launched.
// Both paths compute the same float32 formulas in another order, so they differ by rounding only:
// a few ulps of |p| per step plus a few ulps of the update, i.e. below steps x 16 x 2^-24 x
// (max |p| + max step size) with |p| <= 2 and step sizes <= 0.1 here. A wrong member LR or decay
// moves p by at least lr x wd >= 1e-3 a step, far above that.
TEST(OptimAdam, FusedPathIsTheLoopsUpdate) {
  if (!compat::has_fused_adam()) GTEST_SKIP() << "no fused Adam kernels in libtorch " << compat::torch_version();
  const int steps = 5;
  const int64_t E = 3;
  const std::vector<double> member_lr = {0.01, 0.03, 0.01}, member_wd = {0.1, 0.1, 0.3};
  auto per_member = [&](const std::vector<double>& v, int64_t dims) {
    std::vector<int64_t> shape(static_cast<size_t>(dims), 1);
    shape[0] = E;
    return torch::tensor(v, torch::kFloat64).to(torch::kFloat32).view(shape);
  };
  const double tol = steps * 16 * std::ldexp(1.0, -24) * (2.0 + 0.1);
  for (const bool ensemble : {false, true})
    for (const std::string kind : {"adam", "adamw"})
      for (const std::string mode : {"coupled", "independent"}) {
        SCOPED_TRACE(kind + " " + mode + (ensemble ? " ensemble" : " plain"));
        OptimConfig c;
        c.kind = kind;
        c.lr = 0.02;
        c.weight_decay = 0.2;
        c.wd_mode = mode;
        torch::manual_seed(11);
        // (shape, lr_mult, wd_mult, eps_mult): plain "a" and "c" share a set; "b" is another.
        struct Spec {
          const char* name;
          std::vector<int64_t> shape;
          double lr, wd, eps;
        };
        const std::vector<Spec> specs =
            ensemble ? std::vector<Spec>{{"x", {E, 4, 5}, 1.0, 1.0, 1.0}, {"y", {E, 6}, 0.5, 1.0, 10.0}}
                     : std::vector<Spec>{{"a", {4, 5}, 1.0, 1.0, 1.0}, {"b", {6}, 2.0, 0.5, 1.0}, {"c", {3}, 1.0, 1.0, 1.0}};
        std::vector<torch::Tensor> p0;
        std::vector<std::vector<torch::Tensor>> grads(specs.size());
        for (size_t i = 0; i < specs.size(); ++i) {
          p0.push_back(torch::rand(specs[i].shape) * 2 - 1);
          for (int s = 0; s < steps; ++s) grads[i].push_back(torch::randn(specs[i].shape));
        }
        auto make = [&](std::vector<torch::Tensor>* ps) {
          std::vector<ParamGroup> groups;
          for (size_t i = 0; i < specs.size(); ++i) {
            ps->push_back(leaf(p0[i]));
            ParamGroup g = group(specs[i].name, ps->back(), specs[i].lr, specs[i].wd, specs[i].eps);
            if (ensemble) {
              g.member_lr = per_member(member_lr, ps->back().dim());
              g.member_wd = per_member(member_wd, ps->back().dim());
            }
            groups.push_back(std::move(g));
          }
          return make_optimizer(c, std::move(groups));
        };
        const std::vector<double> lr_factor = {1.0, 0.5, 0.5, 0.25, 1.0};  // a schedule's factors
        std::vector<torch::Tensor> loop_p, fused_p;
        auto loop = make(&loop_p);
        auto fused = make(&fused_p);
        const int64_t before = compat::fused_adam_launches();
        for (int s = 0; s < steps; ++s) {
          for (size_t i = 0; i < specs.size(); ++i) {
            loop_p[i].mutable_grad() = grads[i][size_t(s)].clone();
            fused_p[i].mutable_grad() = grads[i][size_t(s)].clone();
          }
          const compat::FusedAdamScope on_cpu(compat::FusedAdamUse::AlsoCpu);
          {
            const compat::FusedAdamScope off(compat::FusedAdamUse::Off);  // inner scope: the loop
            loop->step(lr_factor[size_t(s)]);
          }
          fused->step(lr_factor[size_t(s)]);  // AlsoCpu again
        }
        // One kernel per set and step, none for the loop: plain {a, c} and {b}; ensemble, per
        // tensor, members 0 and 2 share an LR but not a decay, so 3 sets each (for Adam's L2 too:
        // the coefficient differs).
        EXPECT_EQ(compat::fused_adam_launches() - before, steps * (ensemble ? 6 : 2));
        EXPECT_EQ(loop->steps_taken(), steps);
        EXPECT_EQ(fused->steps_taken(), steps);
        for (size_t i = 0; i < specs.size(); ++i) {
          const double diff = (fused_p[i] - loop_p[i]).abs().max().item<double>();
          EXPECT_LT(diff, tol) << specs[i].name;
          EXPECT_GT((loop_p[i] - p0[i]).abs().max().item<double>(), 1e-3) << specs[i].name;  // it moved
        }
      }
}

TEST(OptimStep, SkipsParamsWithoutGradAndZeroGradClears) {
  OptimConfig c;
  c.kind = "adamw";
  torch::Tensor a = leaf(dvec({1.0})), b = leaf(dvec({2.0}));
  auto opt = make_optimizer(c, {group("a", a), group("b", b)});
  a.mutable_grad() = dvec({1.0});
  opt->step();
  EXPECT_NE(a.item<double>(), 1.0);
  EXPECT_EQ(b.item<double>(), 2.0);
  opt->zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(OptimStep, ClipsTheGlobalGradientNorm) {
  OptimConfig c;
  c.kind = "sgd";
  c.lr = 1.0;
  c.clip_grad_norm = 1.0;
  torch::Tensor a = leaf(dvec({0.0, 0.0})), b = leaf(dvec({0.0}));
  auto opt = make_optimizer(c, {group("a", a), group("b", b)});
  a.mutable_grad() = dvec({3.0, 0.0});
  b.mutable_grad() = dvec({4.0});  // global norm 5
  opt->step();
  EXPECT_NEAR(a[0].item<double>(), -0.6, 1e-6);
  EXPECT_NEAR(b[0].item<double>(), -0.8, 1e-6);
}

TEST(OptimSchedule, EndpointsAndShapes) {
  OptimConfig c;
  c.total_steps = 100;
  c.warmup_steps = 10;
  c.min_lr_ratio = 0.1;
  c.schedule = "constant";
  EXPECT_DOUBLE_EQ(schedule_factor(c, 0), 0.1);  // (step + 1) / warmup
  EXPECT_DOUBLE_EQ(schedule_factor(c, 4), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 100), 1.0);
  for (const std::string s : {"cosine", "linear"}) {
    c.schedule = s;
    EXPECT_DOUBLE_EQ(schedule_factor(c, 0), 0.1) << s;
    EXPECT_DOUBLE_EQ(schedule_factor(c, 10), 1.0) << s;
    EXPECT_NEAR(schedule_factor(c, 55), 0.55, 1e-12) << s;  // halfway: (1 + min) / 2 for both
    EXPECT_NEAR(schedule_factor(c, 100), 0.1, 1e-15) << s;
    EXPECT_NEAR(schedule_factor(c, 1000), 0.1, 1e-15) << s;
  }
  c.schedule = "cosine";
  EXPECT_NEAR(schedule_factor(c, 32), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 22.0 / 90)), 1e-12);
  c.schedule = "linear";
  EXPECT_NEAR(schedule_factor(c, 40), 0.1 + 0.9 * (1 - 30.0 / 90), 1e-12);
  // wsd, decay_fraction 0.2 of the 90 post-warmup steps: 1 until step 10 + 72 = 82, then linear to
  // min_lr_ratio at 100 (held after).
  c.schedule = "wsd";
  c.decay_fraction = 0.2;
  EXPECT_DOUBLE_EQ(schedule_factor(c, 0), 0.1);  // warmup as every shape
  EXPECT_DOUBLE_EQ(schedule_factor(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 82), 1.0);
  EXPECT_NEAR(schedule_factor(c, 91), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through the cool-down
  EXPECT_NEAR(schedule_factor(c, 100), 0.1, 1e-12);
  EXPECT_NEAR(schedule_factor(c, 1000), 0.1, 1e-12);
  c.decay_fraction = 1.0;  // the whole run: linear
  for (int s : {10, 37, 64, 99}) {
    OptimConfig lin = c;
    lin.schedule = "linear";
    EXPECT_NEAR(schedule_factor(c, s), schedule_factor(lin, s), 1e-12) << s;
  }
  for (double bad : {0.0, -0.1, 1.5, std::nan("")}) {
    c.decay_fraction = bad;
    expect_user_error([&] { validate_schedule(c); }, "optim.decay_fraction");
  }
  c.decay_fraction = 0.2;
  c.warmup_steps = 0;
  c.schedule = "constant";
  EXPECT_DOUBLE_EQ(schedule_factor(c, 0), 1.0);
  c.schedule = "exponential";
  expect_user_error([&] { schedule_factor(c, 0); }, "optim.schedule");
  expect_user_error([&] { validate_schedule(c); }, "optim.schedule");
}

// decay_fraction is read under every schedule but written (and so part of a sweep point's identity)
// only under wsd: the ids of sweeps with other schedules are what they were before wsd existed.
TEST(OptimSchedule, WsdFieldOnlyInAWsdConfigsIdentity) {
  const TrainConfig cos = train_config_from_toml_text("[optim]\nschedule = \"cosine\"\n", "t");
  EXPECT_FALSE(train_config_to_json(cos).at("optim").contains("decay_fraction"));
  const TrainConfig wsd = train_config_from_toml_text("[optim]\nschedule = \"wsd\"\ndecay_fraction = 0.3\n", "t");
  EXPECT_DOUBLE_EQ(train_config_to_json(wsd).at("optim").at("decay_fraction").get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(train_config_from_json(train_config_to_json(wsd)).optim.decay_fraction, 0.3);
}

TEST(OptimTorchParity, AdamAdamWAndSgdMatchLibtorchBitForBit) {
  // Same kernels in the same order as torch::optim, so float32 results agree exactly. One row per
  // optimizer: libtorch's reference and the same settings as an OptimConfig.
  struct Case {
    const char* kind;
    std::function<std::unique_ptr<torch::optim::Optimizer>(torch::Tensor)> reference;
    std::function<void(OptimConfig&)> settings;  // the same settings, over OptimConfig's defaults
  };
  const auto adam_settings = [](OptimConfig& c) {
    c.lr = 0.01;
    c.beta2 = 0.99;
    c.eps = 1e-6;
    c.weight_decay = 0.1;
  };
  const std::vector<Case> cases = {
      {"adamw",
       [](torch::Tensor w) {
         return std::make_unique<torch::optim::AdamW>(
             std::vector<torch::Tensor>{w}, torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-6).weight_decay(0.1));
       },
       adam_settings},
      {"adam",
       [](torch::Tensor w) {
         return std::make_unique<torch::optim::Adam>(
             std::vector<torch::Tensor>{w}, torch::optim::AdamOptions(0.01).betas({0.9, 0.99}).eps(1e-6).weight_decay(0.1));
       },
       adam_settings},
      {"sgd",
       [](torch::Tensor w) {
         return std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{w},
                                                    torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
       },
       [](OptimConfig& c) {
         c.lr = 0.05;
         c.momentum = 0.9;
         c.weight_decay = 0.01;
       }},
  };
  torch::manual_seed(9);
  const torch::Tensor w0 = torch::randn({16, 8});
  std::vector<torch::Tensor> gs;
  for (int s = 0; s < 5; ++s) gs.push_back(torch::randn({16, 8}));
  for (const Case& c : cases) {
    torch::Tensor a = leaf(w0), b = leaf(w0);
    auto ref = c.reference(a);
    for (int s = 0; s < 5; ++s) {
      a.mutable_grad() = gs[s].clone();
      ref->step();
    }
    OptimConfig cfg;
    cfg.kind = c.kind;
    c.settings(cfg);
    auto mine = make_optimizer(cfg, {group("w", b)});
    run_steps(*mine, 0, 5, [&](int s, size_t) { return gs[s].clone(); });
    EXPECT_TRUE(torch::equal(a.detach(), b.detach())) << c.kind;
  }
}
