// Unit scaling (issue 7): the scaled ops' gradients against their definitions, unit scale at init,
// the tau rule keeping the true gradient's direction, the unit / u-mup table rows, and the models
// under them (scales at init, gradient direction, low precision on the KJV GPT).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "engine/data/data.h"
#include "engine/models/model.h"
#include "brain/param/table.h"
#include "engine/opcheck/precision_report.h"
#include "brain/train/config.h"
#include "engine/unit/scaled_ops.h"
#include "engine/opcheck/unit_scales.h"

using namespace scaleinv;
using namespace scaleinv::unit;

namespace {

double rms(const torch::Tensor& t) { return std::sqrt(t.to(torch::kDouble).pow(2).mean().item<double>()); }

// Tolerance for the RMS of a sum of n_in unit products, estimated from n entries: RMS^2 has a
// relative standard deviation ~ sqrt(2/n_eff) with n_eff the smallest independent count (rows of
// x, rows of W, fan-in); 6 sigma on RMS = 6 * sqrt(2 / n_eff) / 2.
double rms_tol(double n_eff) { return 3.0 * std::sqrt(2.0 / n_eff); }

double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kDouble).flatten(), y = b.to(torch::kDouble).flatten();
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

}  // namespace

// ---- ops -------------------------------------------------------------------------------------

TEST(UnitOps, ScaledLinearGradientsFollowTheirDefinitions) {
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({3, 5, 8}, torch::requires_grad());
  torch::Tensor w = torch::randn({6, 8}, torch::requires_grad());
  torch::Tensor g = torch::randn({3, 5, 6});
  torch::Tensor rw = torch::tensor({1.0f, 2.0f, 0.5f, 1.0f, 1.0f, 3.0f});
  torch::Tensor y = scaled_linear(x, w, 0.3, 0.7, 0.11, rw);
  EXPECT_TRUE(torch::allclose(y, torch::linear(x, w) * 0.3, 1e-5, 1e-6));
  y.backward(g);
  EXPECT_TRUE(torch::allclose(x.grad(), torch::matmul(g * rw, w) * 0.7, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w.grad(), torch::mm(g.reshape({-1, 6}).t(), x.reshape({-1, 8})) * 0.11, 1e-5, 1e-6));
  // With backward scales equal to the forward one it is torch's own gradient.
  torch::Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  (torch::linear(x2, w2) * 0.3).backward(g);
  torch::Tensor x3 = x.detach().clone().requires_grad_(), w3 = w.detach().clone().requires_grad_();
  scaled_linear(x3, w3, 0.3, 0.3, 0.3).backward(g);
  EXPECT_TRUE(torch::allclose(x3.grad(), x2.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w3.grad(), w2.grad(), 1e-5, 1e-6));
}

TEST(UnitOps, ScaledLinearEnsembleIsPerMember) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({2, 4, 3, 8}, torch::requires_grad());  // [E, B, T, in]
  torch::Tensor w = torch::randn({2, 6, 8}, torch::requires_grad());     // [E, out, in]
  torch::Tensor g = torch::randn({2, 4, 3, 6});
  torch::Tensor y = scaled_linear(x, w, 0.5, 0.25, 0.125);
  y.backward(g);
  for (int e = 0; e < 2; ++e) {
    torch::Tensor xe = x[e].detach().clone().requires_grad_(), we = w[e].detach().clone().requires_grad_();
    torch::Tensor ye = scaled_linear(xe, we, 0.5, 0.25, 0.125);
    EXPECT_TRUE(torch::allclose(y[e], ye, 1e-5, 1e-6));
    ye.backward(g[e]);
    EXPECT_TRUE(torch::allclose(x.grad()[e], xe.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(w.grad()[e], we.grad(), 1e-5, 1e-6));
  }
}

TEST(UnitOps, UnitLinearHasUnitOutputGradInputAndGradWeightAtInit) {
  // seed 003 "Proof": sum_i theta_i x_i / sqrt(d) ~ N(0, sigma_x^2 sigma_theta^2).
  torch::manual_seed(2);
  const int64_t N = 2048, in = 256, out = 512;
  torch::Tensor x = torch::randn({N, in}, torch::requires_grad());
  torch::Tensor w = torch::randn({out, in}, torch::requires_grad());
  torch::Tensor y = scaled_linear(x, w, 1.0 / std::sqrt(double(in)), unit_bwd_x(out), unit_bwd_w(N));
  y.backward(torch::randn({N, out}));
  const double tol = rms_tol(double(in) * 64);  // n_eff >= fan_in x 64 independent rows
  EXPECT_NEAR(rms(y), 1.0, tol);
  EXPECT_NEAR(rms(x.grad()), 1.0, tol);
  EXPECT_NEAR(rms(w.grad()), 1.0, tol);
}

TEST(UnitOps, ScaledMatmulAndScaleGrad) {
  torch::manual_seed(3);
  torch::Tensor a = torch::randn({2, 3, 4, 5}, torch::requires_grad());
  torch::Tensor b = torch::randn({2, 3, 5, 6}, torch::requires_grad());
  torch::Tensor g = torch::randn({2, 3, 4, 6});
  torch::Tensor c = scaled_matmul(a, b, 0.5, 2.0, 3.0);
  EXPECT_TRUE(torch::allclose(c, torch::matmul(a, b) * 0.5, 1e-5, 1e-6));
  c.backward(g);
  EXPECT_TRUE(torch::allclose(a.grad(), torch::matmul(g, b.transpose(-2, -1)) * 2.0, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(b.grad(), torch::matmul(a.transpose(-2, -1), g) * 3.0, 1e-5, 1e-6));

  torch::Tensor x = torch::randn({7}, torch::requires_grad());
  torch::Tensor y = scale_grad(x, 4.0);
  EXPECT_TRUE(torch::equal(y, x));
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({7}, 4.0f)));
}

// Under bf16 autocast (CUDA's train.autocast = "bf16"; the CPU's autocast here, which lowers the
// same products), scoped to the forward pass as the trainer scopes it (a backward inside the scope
// would be autocast too and hide the bug), a unit-scaled product's output and incoming gradient are
// bf16 while its saved
// inputs (parameters, a softmax output) stay fp32: the backward must not mix the two in a matmul
// (it threw "expected ... same dtype" on the first backward of u-mup under bf16). The gradients
// come back in their inputs' dtype and match the fp32 ones to bf16's precision: each operand is
// rounded to 8 significant bits (relative 2^-9), so a product of three rounded factors and a
// rounded result is off by about 4 x 2^-9 = 0.8% per term; 3% of the norm bounds that with room,
// while a wrong scale (bwd factors 2 and 3 here) or a dropped term is off by 50% or more.
TEST(UnitOps, BackwardUnderBf16AutocastKeepsEachInputsDtype) {
  torch::manual_seed(5);
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a.to(torch::kFloat) - b).norm() / b.norm()).item<double>();
  };
  for (const std::vector<int64_t>& wshape : {std::vector<int64_t>{12, 16}, std::vector<int64_t>{3, 12, 16}}) {
    SCOPED_TRACE(wshape.size() == 2 ? "linear" : "per-member linear (bmm)");
    const torch::Tensor x0 = torch::randn(wshape.size() == 2 ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{3, 8, 16});
    const torch::Tensor w0 = torch::randn(wshape);
    std::vector<int64_t> yshape = x0.sizes().vec();
    yshape.back() = 12;
    const torch::Tensor g = torch::randn(yshape);
    torch::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    scaled_linear(x, w, 0.5, 2.0, 3.0).backward(g);
    torch::Tensor xa = x0.clone().requires_grad_(), wa = w0.clone().requires_grad_();
    torch::Tensor y;
    {
      const compat::CpuAutocastForTests autocast;  // the forward pass only, as the trainer scopes it
      y = scaled_linear(xa, wa, 0.5, 2.0, 3.0);
    }
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16) << "autocast did not lower the product: the test checks nothing";
    EXPECT_NO_THROW(y.backward(g.to(torch::kBFloat16)));
    ASSERT_TRUE(xa.grad().defined() && wa.grad().defined());
    EXPECT_EQ(xa.grad().scalar_type(), torch::kFloat);
    EXPECT_EQ(wa.grad().scalar_type(), torch::kFloat);
    EXPECT_LT(rel(xa.grad(), x.grad()), 3e-2);
    EXPECT_LT(rel(wa.grad(), w.grad()), 3e-2);
  }
  // Attention's p @ v: p from a softmax, which autocast keeps in fp32, times a bf16 v.
  const torch::Tensor p0 = torch::softmax(torch::randn({2, 4, 6, 6}), -1), v0 = torch::randn({2, 4, 6, 8});
  const torch::Tensor g = torch::randn({2, 4, 6, 8});
  torch::Tensor p = p0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  scaled_matmul(p, v, 0.5, 2.0, 3.0).backward(g);
  torch::Tensor pa = p0.clone().requires_grad_(), va = v0.clone().requires_grad_();
  torch::Tensor c;
  {
    const compat::CpuAutocastForTests autocast;
    c = scaled_matmul(pa, va.to(torch::kBFloat16), 0.5, 2.0, 3.0);
  }
  ASSERT_EQ(c.scalar_type(), torch::kBFloat16);
  EXPECT_NO_THROW(c.backward(g.to(torch::kBFloat16)));
  ASSERT_TRUE(pa.grad().defined() && va.grad().defined());
  EXPECT_EQ(pa.grad().scalar_type(), torch::kFloat);
  EXPECT_LT(rel(pa.grad(), p.grad()), 3e-2);
  EXPECT_LT(rel(va.grad(), v.grad()), 3e-2);
}

TEST(UnitOps, ActivationVarianceCorrections) {
  // ReLU: E relu(z)^2 = E relu'(z)^2 = 1/2 exactly. GELU: RMS(gelu(z)) = 0.652090 and
  // RMS(gelu'(z)) = 0.675167, computed independently (trapezoid rule, 200001 points on [-12, 12]).
  EXPECT_DOUBLE_EQ(unit_act_scales(UnitAct::Relu).fwd, std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(unit_act_scales(UnitAct::Relu).bwd, std::sqrt(2.0));
  EXPECT_NEAR(1.0 / unit_act_scales(UnitAct::Gelu).fwd, 0.6520901, 1e-6);
  EXPECT_NEAR(1.0 / unit_act_scales(UnitAct::Gelu).bwd, 0.6751673, 1e-6);
  torch::manual_seed(4);
  const int64_t n = 1 << 20;
  const double tol = 6.0 * std::sqrt(2.0 / n);  // RMS of n iid terms with kurtosis <= 3 of a normal
  for (UnitAct a : {UnitAct::Relu, UnitAct::Gelu}) {
    torch::Tensor z = torch::randn({n}, torch::requires_grad());
    const ActScales s = unit_act_scales(a);
    torch::Tensor y = scaled_activation(a, z, s.fwd, s.bwd);
    y.backward(torch::randn({n}));
    EXPECT_NEAR(rms(y), 1.0, tol);
    EXPECT_NEAR(rms(z.grad()), 1.0, tol);
  }
  // The gradient is bwd * phi'(x) g.
  torch::Tensor x = torch::randn({50}, torch::requires_grad());
  torch::Tensor g = torch::randn({50});
  scaled_activation(UnitAct::Gelu, x, 2.0, 3.0).backward(g);
  torch::Tensor x2 = x.detach().clone().requires_grad_();
  torch::gelu(x2).backward(g);
  EXPECT_TRUE(torch::allclose(x.grad(), x2.grad() * 3.0, 1e-5, 1e-6));
}

TEST(UnitOps, CrossEntropyValueIsExactAndGradientScaled) {
  torch::manual_seed(5);
  const int64_t N = 512, V = 64;
  torch::Tensor logits = (torch::randn({N, V}) * 0.01).requires_grad_();
  torch::Tensor y = torch::randint(0, V, {N});
  torch::Tensor l = scaled_cross_entropy(logits, y, unit_ce_bwd(N, V));
  torch::Tensor l2_in = logits.detach().clone().requires_grad_();
  torch::Tensor l2 = torch::nn::functional::cross_entropy(l2_in, y);
  EXPECT_EQ(l.item<double>(), l2.item<double>());
  l.backward();
  l2.backward();
  EXPECT_TRUE(torch::allclose(logits.grad(), l2_in.grad() * unit_ce_bwd(N, V), 1e-4, 1e-6));
  // Near-uniform softmax: each row (p - onehot) has squared norm (1 - 1/V), RMS sqrt((1 - 1/V)/V) * sqrt(V).
  EXPECT_NEAR(rms(logits.grad()), std::sqrt(1.0 - 1.0 / V), 0.01);
}

TEST(UnitOps, AttentionCorrectionsMakeOutputAndGradientsUnit) {
  EXPECT_DOUBLE_EQ(attention_avg_correction(1, true), 1.0);
  EXPECT_DOUBLE_EQ(attention_avg_correction(2, true), std::sqrt(2.0 / 1.5));
  EXPECT_DOUBLE_EQ(attention_avg_correction(16, false), 4.0);
  // Zero logits (uniform causal softmax), unit v and q, k and output gradient: the corrected
  // average and the gradients of v, q, k are unit.
  torch::manual_seed(6);
  const int64_t B = 64, T = 32, dh = 16;
  const double ls = 0.01;  // a small logit scale keeps the softmax uniform at first order
  const double c = attention_avg_correction(T, true);
  const double sb = attention_score_grad_scale(T, true, ls, dh, c);
  torch::Tensor q = torch::randn({B, 1, T, dh}, torch::requires_grad());
  torch::Tensor k = torch::randn({B, 1, T, dh}, torch::requires_grad());
  torch::Tensor v = torch::randn({B, 1, T, dh}, torch::requires_grad());
  torch::Tensor s = scaled_matmul(q, k.transpose(-2, -1), ls, ls, ls);
  torch::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
  s = scale_grad(s.masked_fill(mask, -INFINITY), sb);
  torch::Tensor o = scaled_matmul(torch::softmax(s, -1), v, c, c, c);
  o.backward(torch::randn({B, 1, T, dh}));
  const double tol = rms_tol(double(B) * dh);
  EXPECT_NEAR(rms(o), 1.0, tol);
  EXPECT_NEAR(rms(v.grad()), 1.0, tol);
  EXPECT_NEAR(rms(q.grad()), 1.0, 0.1);  // first order in ls: the softmax is uniform up to O(ls sqrt(dh))
  EXPECT_NEAR(rms(k.grad()), 1.0, 0.1);
}

TEST(UnitOps, TauRuleKeepsTheStreamUnitAndTheGradientDirection) {
  // tau_l = beta^2 / (1 + l beta^2): a^2 + b^2 = 1 and x^_l = x_l / sqrt(1 + l beta^2).
  for (double beta : {0.5, 1.0, 2.0})
    for (int l = 1; l <= 8; ++l) {
      ResidualRule r = residual_rule(l, beta, 1.0, true);
      EXPECT_NEAR(r.a * r.a + r.b * r.b, 1.0, 1e-12);
      EXPECT_NEAR(r.b, beta / std::sqrt(1.0 + l * beta * beta), 1e-12);
      EXPECT_NEAR(r.skip_bwd * r.skip_bwd + r.split_bwd * r.split_bwd, 1.0, 1e-12);  // K = 1
    }
  // A 4-add residual stack of linear branches: with unit backward scales (branch ratio K != 1), the
  // gradient of every weight and of the input is the true gradient times a positive constant.
  torch::manual_seed(7);
  const int64_t N = 64, d = 32;
  const double beta = 0.8;
  std::vector<torch::Tensor> ws;
  for (int l = 0; l < 4; ++l) ws.push_back(torch::randn({d, d}));
  torch::Tensor x0 = torch::randn({N, d});
  torch::Tensor target = torch::randn({N, d});
  auto run = [&](bool unit_bwd, std::vector<torch::Tensor>* grads) {
    torch::Tensor x = x0.clone().requires_grad_();
    std::vector<torch::Tensor> w;
    for (const auto& t : ws) w.push_back(t.clone().requires_grad_());
    torch::Tensor h = x;
    const double fwd = 1.0 / std::sqrt(double(d));
    for (int l = 0; l < 4; ++l) {
      const double bx = unit_bwd ? 0.37 : fwd;  // any backward scale: K = bx / fwd
      const ResidualRule r = residual_rule(l + 1, beta, bx / fwd, unit_bwd);
      torch::Tensor f = scaled_linear(torch::tanh(scale_grad(h, r.split_bwd)), w[l], fwd, bx, unit_bwd ? 0.05 : fwd);
      h = residual_add(h, f, r.a, r.b, r.skip_bwd, r.branch_bwd);
    }
    torch::Tensor loss = (h - target).pow(2).sum();
    loss.backward();
    grads->push_back(x.grad());
    for (auto& t : w) grads->push_back(t.grad());
    return h.detach();
  };
  std::vector<torch::Tensor> gu, gt;
  torch::Tensor hu = run(true, &gu), ht = run(false, &gt);
  EXPECT_TRUE(torch::allclose(hu, ht, 1e-5, 1e-6));  // the same forward
  for (size_t i = 0; i < gu.size(); ++i) {
    EXPECT_NEAR(cosine(gu[i], gt[i]), 1.0, 1e-5) << "tensor " << i;  // the same direction
  }
}

// ---- the table rows --------------------------------------------------------------------------

TEST(UnitTable, PresetsAreDataAndRoundTrip) {
  for (const char* n : {"unit", "u-mup"}) {
    ParamTable t = preset(n);
    EXPECT_TRUE(t.unit.backward && t.unit.nonlin && t.unit.residual && t.unit.loss) << n;
    EXPECT_EQ(t.row(Role::Hidden).unit, 1.0) << n;
    EXPECT_EQ(t.row(Role::Hidden).b, 0.0) << n;  // unit-variance init
    EXPECT_EQ(param_from_toml_string(param_to_toml(t), "rt.toml"), t) << n;
    EXPECT_EQ(param_from_json(param_to_json(t)), t) << n;
    EXPECT_EQ(param_fingerprint(param_from_json(param_to_json(t))), param_fingerprint(t)) << n;
  }
  const ParamTable u = preset("u-mup");
  // u-muP's Adam rules (Blake et al. 2024): hidden eta fan_in^-1/2 and depth^-1/2; readout eta.
  EXPECT_EQ(u.row(Role::Hidden).c[1], 0.5);
  EXPECT_EQ(u.row(Role::Hidden).depth_lr[1], 0.5);
  EXPECT_EQ(u.row(Role::Readout).c[1], 0.0);
  EXPECT_EQ(u.row(Role::Readout).a, 1.0);
  // The unit-scaling columns change the fingerprint; tables without them keep theirs.
  ParamTable m = preset("mup");
  ParamTable m2 = m;
  m2.unit.loss = true;
  EXPECT_NE(param_fingerprint(m), param_fingerprint(m2));
  EXPECT_FALSE(param_to_json(m).contains("unit"));
  // A custom TOML can switch the ops on and carry the fan-in scale in the op.
  ParamTable c = param_from_toml_string(param_to_toml(m) + "", "c.toml");
  EXPECT_EQ(c, m);
  EXPECT_THROW(param_from_toml_string("[unit]\nbackwards = true\n[roles.embedding]\na=0\nb=0\nlr={sgd=0,adam=0,adafactor=0}\n",
                                      "bad.toml"),
               UserError);
}

TEST(UnitTable, ParamShowPrintsTheUnitColumns) {
  auto r = scaleinv::testing::run_cli("param show u-mup");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("unit scaling"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hidden=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("residual tau rule on"), std::string::npos) << r.out;
  auto m = scaleinv::testing::run_cli("param show mup");
  EXPECT_EQ(m.out.find("unit scaling"), std::string::npos) << m.out;  // unchanged for other tables
}

// ---- the models under the unit tables ----------------------------------------------------------

namespace {

TrainConfig small_config(const std::string& kind, const std::string& param) {
  std::vector<std::string> sets = {"model.kind=\"" + kind + "\"", "param.name=\"" + param + "\""};
  if (kind == "resmlp") {
    for (const char* s : {"data.source=\"markov\"", "model.in_dim=784"}) sets.push_back(s);
  } else {
    for (const char* s : {"data.source=\"markov\"", "data.vocab=64", "data.markov_length=20000", "model.seq_len=16",
                          "train.batch_size=8"})
      sets.push_back(s);
  }
  return train_config_from_toml_text("", "(test)", sets);
}

// Learning rates of the KJV precision test (AdamW, 100 steps): one plausible value per table, not
// tuned for the verdicts; the claims compare each format with fp32 at the same LR.
constexpr double kUMupLr = 0.01;
constexpr double kStandardLr = 0.003;
// Standard's worst gradient underflow must exceed these (E4M3, E5M2): set below the measured figures.
// (measured: E4M3 100%, E5M2 84%)
constexpr double kStandardGradUnderflowAtLeast[2] = {0.9, 0.5};

std::shared_ptr<Model> build_with(const ModelConfig& mc, const ParamTable& t, uint64_t seed) {
  torch::manual_seed(seed);
  return build_model(mc, ScaleContext{t, OptFamily::Adam, mc.width, mc.depth}, Hyper{});
}

}  // namespace

TEST(UnitModels, UnitBackwardGivesTheTrueGradientDirectionPerTensor) {
  // The same forward (nonlinearity corrections and tau rule on) with and without the unit backward
  // scales: every tensor's gradient differs by a positive constant only (Adam then takes the same
  // step, up to epsilon), through residual splits, the q/k/v fan-out, GELU and the loss.
  for (const char* kind : {"gpt", "bigram"}) {
    TrainConfig c = small_config(kind, "u-mup");
    c.model.width = 64;
    c.model.depth = 2;
    if (std::string(kind) == "bigram") c.model.activation = "gelu";
    ParamTable unit = preset("u-mup");
    ParamTable truth = unit;
    truth.unit.backward = false;
    truth.unit.loss = false;
    auto data = make_data(c.data);
    Batch b = data->batch(Split::Train, 0, 8);
    auto mu = build_with(c.model, unit, 3), mt = build_with(c.model, truth, 3);
    torch::Tensor lu = mu->loss(b.x, b.y), lt = mt->loss(b.x, b.y);
    EXPECT_NEAR(lu.item<double>(), lt.item<double>(), 1e-5) << kind;
    lu.backward();
    lt.backward();
    auto pu = mu->tagged_parameters(), pt = mt->tagged_parameters();
    ASSERT_EQ(pu.size(), pt.size());
    for (size_t i = 0; i < pu.size(); ++i) {
      if (pt[i].tensor.grad().norm().item<double>() == 0) continue;
      EXPECT_NEAR(cosine(pu[i].tensor.grad(), pt[i].tensor.grad()), 1.0, 1e-4) << kind << " " << pu[i].name;
    }
  }
}

TEST(UnitModels, ScalesAtInitUMupPassesStandardAndMupDoNot) {
  // Measured, not assumed (docs/unit_scaling.md): every op output, gradient,
  // weight and weight gradient of the GPT within a factor 2 of 1 under u-mup at widths 64 and 128;
  // standard and mup leave the gradients (and, for mup, the init) far from 1.
  for (const char* param : {"u-mup", "standard", "mup"}) {
    ScalesConfig sc;
    sc.train = small_config("gpt", param);
    sc.widths = {64, 128};
    sc.depths = {2};
    const ScalesResult r = run_scales(sc);
    int grad_rows = 0, grad_pass = 0;
    for (const auto& row : r.rows)
      if (row.kind == "grad" && row.judged) {
        ++grad_rows;
        grad_pass += row.pass ? 1 : 0;
      }
    if (std::string(param) == "u-mup") {
      // Every op output, every gradient, every weight and every weight's gradient is unit, the
      // LayerNorm gains' too: their gradient, a sum over B T rows, gets the 1/sqrt(rows) rule
      // (without it they sat at sqrt(rows) scale: 27-73 on the KJV, 11-24 here; unit-scaling's
      // LayerNorm gives its gains the same rule: bench/unit_scaling_peer.py, docs/unit_scaling.md).
      // The final norm's gain is the exception, measured, not tuned: its gradient is the readout's
      // input gradient, whose rows share W_R (2.13 at width 64, 1.10 at 128); it stays below 3.
      for (const auto& row : r.rows) {
        if (!row.judged) continue;
        if (row.kind == "W'" && row.name == "ln_f.gain") {
          for (double v : row.rms) EXPECT_LT(v, 3.0) << render_scales(r);
          continue;
        }
        EXPECT_TRUE(row.pass) << row.kind << " " << row.name << "\n" << render_scales(r);
      }
    } else {
      EXPECT_FALSE(r.pass()) << param;
      EXPECT_EQ(grad_pass, 0) << param << "\n" << render_scales(r);  // gradients ~ 1/(B T sqrt(V)) scale
    }
    EXPECT_GT(grad_rows, 10) << param;
  }
}

TEST(UnitPrecision, KjvGptInFp8UnderUMupAndStandard) {
  // The byte-level KJV GPT (width 64, depth 2, 32 bytes x batch 8, AdamW), 100 steps in fp32, E4M3
  // and E5M2 (each linear's input, weight and output gradient rounded, saturating).
  const auto t0 = std::chrono::steady_clock::now();
  auto config = [](const std::string& param, double lr) {
    return train_config_from_toml_text(
        "", "(test)",
        {"model.kind=\"gpt\"", "model.width=64", "model.depth=2", "model.seq_len=32", "train.batch_size=8",
         "train.steps=100", "train.eval_every=0", "train.eval_batches=1", "data.source=\"kjv\"",
         "param.name=\"" + param + "\"", fmt::format("optim.lr={}", lr)});
  };
  const PrecisionReport u = run_precision(config("u-mup", kUMupLr), {"e4m3", "e5m2", "fp8"}, false);
  const PrecisionReport s = run_precision(config("standard", kStandardLr), {"e4m3", "e5m2"}, false);
  std::cout << render_precision(u, 12) << "\n" << render_precision(s, 12) << std::endl;
  ASSERT_EQ(u.runs.size(), 4u);
  for (size_t i = 1; i < u.runs.size(); ++i) {
    const PrecisionRun& run = u.runs[i];
    EXPECT_NEAR(run.final_loss_ratio, 1.0, 0.02) << run.format;
    EXPECT_NEAR(run.mean_loss_ratio, 1.0, 0.02) << run.format;
    for (const auto& [point, st] : run.stats) {
      const bool grad = point.size() > 5 && point.compare(point.size() - 5, 5, ":grad") == 0;
      // E5M2 and the FP8 recipe (E4M3 forward, E5M2 gradients): every tensor below 1%. E4M3
      // everywhere (2^-9 smallest subnormal): the forward tensors only; the claim does not hold for
      // its gradients: as training sharpens the softmax, the unit-scaled logit gradient
      // (p - onehot) * sqrt(V) has entries below 2^-9 (measured: readout gradient 20% over the run,
      // 47% at the worst step; the MLP input gradients 2-3%; docs/unit_scaling.md).
      if (run.format != "e4m3" || !grad) {
        EXPECT_LT(st.underflow_fraction(), 0.01) << run.format << " " << point;
      }
    }
  }
  {
    const auto& e4 = u.runs[1].stats;
    EXPECT_GT(e4.at("readout.weight:grad").underflow_fraction(), 0.05);  // the measured failure, kept visible
  }
  // Under standard the gradients underflow (figures in docs/unit_scaling.md).
  for (size_t i = 1; i < s.runs.size(); ++i) {
    const PrecisionRun& run = s.runs[i];
    double worst_grad = 0;
    for (const auto& [point, st] : run.stats)
      if (point.size() > 5 && point.compare(point.size() - 5, 5, ":grad") == 0)
        worst_grad = std::max(worst_grad, st.underflow_fraction());
    EXPECT_GT(worst_grad, kStandardGradUnderflowAtLeast[i - 1]) << run.format;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "wall " << wall << " s" << std::endl;
}
