// Role-tagged models (src/engine/models): gradients against finite differences, every preset on every
// model, the base-shape identity, width scaling of the init, tagging errors, bad configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "fd_check.h"
#include "engine/models/layers.h"
#include "engine/models/model.h"
#include "brain/models/model_kinds.h"
#include "brain/train/config.h"
#include "engine/models/zoo.h"
#include "brain/param/table.h"
#include "fixtures.h"

using namespace scaleinv;
using scaleinv::testing::user_error_of;
using scaleinv::testing::fd_check;

namespace {

const std::vector<std::string> kKinds = {"bigram", "mlp", "resmlp", "gpt", "vit"};

// Tiny shapes: vocab 32, seq 8, batch 2, in_dim 16, 8x8 images with 4x4 patches.
ModelConfig tiny(const std::string& kind, int width, int depth) {
  ModelConfig c;
  c.kind = kind;
  c.width = width;
  c.depth = depth;
  c.vocab = 32;
  c.seq_len = 8;
  c.in_dim = 16;
  c.n_classes = 10;
  c.image_size = 8;
  c.patch = 4;
  c.channels = 1;
  c.head_dim = 16;
  c.activation = kind == "resmlp" || kind == "mlp" ? "relu" : "linear";
  return c;
}

ScaleContext context_for(const std::string& param, const ModelConfig& c) {
  ScaleContext ctx;
  ctx.table = preset(param);
  ctx.family = OptFamily::Adam;
  ctx.width = c.width;
  ctx.depth = c.depth;
  return ctx;
}

std::shared_ptr<Model> build(const ModelConfig& c, const std::string& param, const Hyper& hp = {}, uint64_t seed = 0) {
  torch::manual_seed(seed);
  return build_model(c, context_for(param, c), hp);
}

struct Data {
  torch::Tensor x, y;
};

// Fixed inputs for a model kind (own generator: independent of the model's init stream).
Data data_for(const ModelConfig& c, torch::Dtype dtype = torch::kFloat, int64_t batch = 2) {
  auto gen = at::detail::createCPUGenerator(1234);
  Data d;
  if (c.kind == "bigram" || c.kind == "gpt") {
    d.x = torch::randint(c.vocab, {batch, c.seq_len}, gen, torch::kLong);
    d.y = torch::randint(c.vocab, {batch, c.seq_len}, gen, torch::kLong);
  } else if (c.kind == "resmlp" || c.kind == "mlp") {
    d.x = torch::randn({batch, c.in_dim}, gen, torch::TensorOptions().dtype(dtype));
    d.y = torch::randint(c.n_classes, {batch}, gen, torch::kLong);
  } else {
    d.x = torch::randn({batch, c.channels, c.image_size, c.image_size}, gen, torch::TensorOptions().dtype(dtype));
    d.y = torch::randint(c.n_classes, {batch}, gen, torch::kLong);
  }
  return d;
}

double rms(const torch::Tensor& t) { return t.detach().to(torch::kDouble).pow(2).mean().sqrt().item<double>(); }

const TaggedParam& find_param(const std::vector<TaggedParam>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return p;
  throw std::runtime_error("no parameter " + name);
}

// Every parameter (and a floating input) of a model in double precision against finite differences.
void expect_model_grads_match_fd(std::shared_ptr<Model> model, Data d, const std::string& what) {
  model->to(torch::kDouble);
  if (d.x.is_floating_point()) d.x = d.x.to(torch::kDouble);
  auto loss = [&] { return model->loss(d.x, d.y); };
  for (const auto& p : model->tagged_parameters()) {
    auto r = fd_check(loss, p.tensor);
    EXPECT_TRUE(r.ok) << what << " parameter " << p.name << ": " << r.message;
  }
  if (d.x.is_floating_point()) {
    d.x = d.x.clone().requires_grad_(true);
    auto r = fd_check(loss, d.x);
    EXPECT_TRUE(r.ok) << what << " input: " << r.message;
  }
}

// A context off the base shape so every multiplier and init factor is != 1.
ScaleContext off_base(const std::string& param, int width, int depth) {
  ScaleContext ctx;
  ctx.table = preset(param);
  ctx.width = width;
  ctx.depth = depth;
  return ctx;
}

// Sum of the output against a fixed random projection: a scalar that depends on every output entry.
torch::Tensor project(const torch::Tensor& y) {
  auto gen = at::detail::createCPUGenerator(99);
  torch::Tensor r = torch::randn(y.sizes(), gen, y.options().requires_grad(false));
  return (y * r).sum();
}

// Checks d project(f(x)) / d{x, every parameter of m} against finite differences (double).
void expect_layer_grads_match_fd(torch::nn::Module& m, const std::function<torch::Tensor(const torch::Tensor&)>& f,
                                 torch::Tensor x, const std::string& what) {
  m.to(torch::kDouble);
  x = x.to(torch::kDouble).clone().requires_grad_(true);
  auto loss = [&] { return project(f(x)); };
  auto r = fd_check(loss, x);
  EXPECT_TRUE(r.ok) << what << " input: " << r.message;
  for (const auto& p : m.named_parameters()) {
    auto rp = fd_check(loss, p.value());
    EXPECT_TRUE(rp.ok) << what << " " << p.key() << ": " << rp.message;
  }
}

// Runs `loss_of` under the CPU's bf16 autocast (scoped to the forward pass, as the trainer scopes
// CUDA's), then backward outside it: every parameter's gradient must come back defined, finite and
// fp32 (the optimizer's dtype), and backward must not throw.
void expect_backprop_after_bf16_forward(Model& model, const std::function<torch::Tensor()>& loss_of,
                                        const std::string& what) {
  torch::Tensor loss;
  {
    const compat::CpuAutocastForTests autocast;
    loss = loss_of();
  }
  ASSERT_TRUE(torch::isfinite(loss).all().item<bool>()) << what;
  try {
    loss.sum().backward();
  } catch (const std::exception& e) {
    FAIL() << what << ": " << e.what();
  }
  for (const auto& p : model.tagged_parameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << what << " " << p.name;
    EXPECT_EQ(p.tensor.grad().scalar_type(), torch::kFloat) << what << " " << p.name;
    ASSERT_TRUE(torch::isfinite(p.tensor.grad()).all().item<bool>()) << what << " " << p.name;
  }
}

}  // namespace

// ---- finite differences: layers -------------------------------------------------------------

TEST(ModelsLayers, DenseAndLookupGradientsMatchFiniteDifferences) {
  torch::manual_seed(0);
  ScaleContext ctx = off_base("mup", 128, 4);  // embedding multiplier m^1/2, readout m^-1/2
  Hyper hp;
  hp.output_mult = 1.7;
  Dense emb(12, 128, DenseOptions(Role::Embedding).base_std(1.0 / std::sqrt(12.0)).extra_mult(0.8), ctx, hp);
  EXPECT_NEAR(emb.multiplier(), std::sqrt(2.0) * 0.8, 1e-12);
  expect_layer_grads_match_fd(emb, [&](const torch::Tensor& x) { return emb.forward(x); }, torch::randn({3, 5, 12}),
                              "dense embedding");
  Dense out(128, 7, DenseOptions(Role::Readout).base_std(width_fan_in_std(128, ctx)).extra_mult(hp.output_mult), ctx, hp);
  EXPECT_NEAR(out.multiplier(), 1.7 / std::sqrt(2.0), 1e-12);
  // Few rows: the multiplier goes on the output rather than on W; both paths are checked.
  expect_layer_grads_match_fd(out, [&](const torch::Tensor& x) { return out.forward(x); }, torch::randn({2, 128}),
                              "readout (scaled output)");
  expect_layer_grads_match_fd(out, [&](const torch::Tensor& x) { return out.forward(x); }, torch::randn({300, 128}),
                              "readout (scaled weight)");

  Lookup look(10, 128, 1.3, ctx, hp);
  look.to(torch::kDouble);
  torch::Tensor idx = torch::tensor({3, 3, 0, 9, 5}, torch::kLong).view({1, 5});
  auto r = fd_check([&] { return project(look.forward(idx)) + project(look.first_rows(4)); }, look.weight());
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(ModelsLayers, FdCheckCatchesAWrongGradient) {
  // The helper itself: a function whose autograd gradient is wrong (a detach hides one path).
  torch::Tensor w = torch::randn({5}, torch::kDouble).requires_grad_(true);
  auto good = fd_check([&] { return (w * w.sin()).sum(); }, w);
  EXPECT_TRUE(good.ok) << good.message;
  auto bad = fd_check([&] { return (w * w.detach().sin()).sum(); }, w);
  EXPECT_FALSE(bad.ok);
}

TEST(ModelsLayers, NormsGradientsMatchFiniteDifferences) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({4, 3, 16}) * 2 + 0.5;
  torch::nn::Module none;
  expect_layer_grads_match_fd(none, [](const torch::Tensor& t) { return rms_norm(t); }, x, "rms_norm");
  expect_layer_grads_match_fd(none, [](const torch::Tensor& t) { return layer_norm(t); }, x, "layer_norm");
  expect_layer_grads_match_fd(none, [](const torch::Tensor& t) { return mean_subtract(t); }, x, "mean_subtract");
  ScaleContext ctx = off_base("mup", 16, 8);
  NormGain ln(16, true, ctx);
  {
    torch::NoGradGuard g;
    ln.gain().copy_(torch::randn({16}));  // a non-trivial gain
  }
  expect_layer_grads_match_fd(ln, [&](const torch::Tensor& t) { return ln.forward(t); }, x, "NormGain");
  for (const char* a : {"linear", "relu", "abs", "tanh", "gelu"}) {
    Activation act = parse_activation(a);
    expect_layer_grads_match_fd(none, [&](const torch::Tensor& t) { return activate(act, t); }, x, a);
  }
  // The forward values themselves.
  torch::Tensor y = rms_norm(x.to(torch::kDouble), 0.0);
  EXPECT_NEAR(y.pow(2).mean(-1).max().item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(mean_subtract(x).mean(-1).abs().max().item<double>(), 0.0, 1e-6);
}

TEST(ModelsLayers, AttentionMlpAndBlocksGradientsMatchFiniteDifferences) {
  ScaleContext ctx = off_base("completep", 32, 8);  // beta = (8/4)^-1
  Hyper hp;
  hp.attn_mult = 1.3;
  HeadShape hs{4, 8, 8};
  for (bool causal : {true, false})
    for (bool qk : {false, true}) {
      torch::manual_seed(2);
      Attention att(32, hs, causal, qk, false, ctx, hp);
      expect_layer_grads_match_fd(att, [&](const torch::Tensor& t) { return att.forward(t); },
                                  torch::randn({2, 5, 32}), fmt::format("attention causal={} qk_norm={}", causal, qk));
    }
  torch::manual_seed(3);
  Mlp mlp(32, 2, ctx, hp);
  expect_layer_grads_match_fd(mlp, [&](const torch::Tensor& t) { return mlp.forward(t); }, torch::randn({2, 5, 32}),
                              "mlp");
  ModelConfig cfg = tiny("gpt", 32, 8);
  cfg.mlp_ratio = 2;
  for (const char* param : {"completep", "keel"})
    for (Placement pl : {Placement::Pre, Placement::Post, Placement::Keel}) {
      torch::manual_seed(4);
      ScaleContext c = off_base(param, 32, 8);
      TransformerBlock blk(32, hs, pl, true, cfg, c, hp);
      expect_layer_grads_match_fd(blk, [&](const torch::Tensor& t) { return blk.forward(t); },
                                  torch::randn({2, 5, 32}), fmt::format("{} block {}", param, int(pl)));
    }
}

// ---- finite differences: whole models -------------------------------------------------------

TEST(ModelsGrad, BigramMatchesFiniteDifferences) {
  ModelConfig c = tiny("bigram", 32, 2);
  c.vocab = 16;
  c.seq_len = 4;
  c.activation = "tanh";
  c.rmsnorm = true;
  expect_model_grads_match_fd(build(c, "mup"), data_for(c), "bigram tanh rmsnorm");
  c.activation = "gelu";
  c.rmsnorm = false;
  c.tied = true;
  expect_model_grads_match_fd(build(c, "sp"), data_for(c), "bigram gelu tied");
}

TEST(ModelsGrad, ResMlpMatchesFiniteDifferences) {
  ModelConfig c = tiny("resmlp", 32, 3);
  c.activation = "abs";
  expect_model_grads_match_fd(build(c, "depth-mup"), data_for(c), "resmlp abs");
  c.block_depth = 2;
  c.pre_ln = true;
  c.activation = "relu";
  expect_model_grads_match_fd(build(c, "completep"), data_for(c), "resmlp relu bd2 pre_ln");
}

TEST(ModelsGrad, GptMatchesFiniteDifferences) {
  ModelConfig c = tiny("gpt", 32, 2);
  c.vocab = 16;
  c.seq_len = 4;
  c.mlp_ratio = 2;
  c.head_dim = 8;
  expect_model_grads_match_fd(build(c, "mup"), data_for(c), "gpt pre");
  c.block = "keel";
  c.qk_norm = true;
  expect_model_grads_match_fd(build(c, "keel"), data_for(c), "gpt keel qk_norm");
  c.block = "post";
  c.qk_norm = false;
  c.tied = true;
  c.n_heads = 2;
  expect_model_grads_match_fd(build(c, "completep"), data_for(c), "gpt post tied n_heads");
}

TEST(ModelsGrad, VitMatchesFiniteDifferences) {
  ModelConfig c = tiny("vit", 32, 2);
  c.mlp_ratio = 2;
  c.head_dim = 8;
  expect_model_grads_match_fd(build(c, "dinan-hybrid"), data_for(c), "vit");
}

// ---- every preset builds every model --------------------------------------------------------

TEST(ModelsBuild, EveryPresetBuildsEveryModelAndBackpropagates) {
  for (const auto& param : preset_names())
    for (const auto& kind : kKinds)
      for (int width : {64, 128})
        for (int depth : {2, 4}) {
          if (is_moe_table(preset(param))) continue;  // refused by a dense model (Moe.BadInput); moe: test_moe.cpp
          ModelConfig c = tiny(kind, width, depth);
          if (kind == "gpt") c.block = depth == 2 ? "post" : (width == 64 ? "keel" : "pre");
          const std::string what = fmt::format("{} {} w{} L{} {}", param, kind, width, depth, c.block);
          auto model = build(c, param);
          Data d = data_for(c);
          torch::Tensor loss = model->loss(d.x, d.y);
          ASSERT_TRUE(std::isfinite(loss.item<double>())) << what;
          loss.backward();
          for (const auto& p : model->tagged_parameters()) {
            ASSERT_TRUE(p.tensor.grad().defined()) << what << " " << p.name;
            ASSERT_TRUE(torch::isfinite(p.tensor.grad()).all().item<bool>()) << what << " " << p.name;
          }
        }
}

// CUDA's train.autocast = "bf16" scopes bf16 autocast to each forward pass; backward runs outside it.
// The CPU's autocast lowers the same products (linear, matmul, bmm) to bf16, so the CPU suite runs
// every model under every table that way: a backward that multiplies a bf16 gradient by a saved
// fp32 tensor (u-mup's custom products did, found by reading) throws here as it would on the GPU.
// Every parameter's gradient must come back defined, finite and fp32 (the optimizer's dtype).
TEST(ModelsBuild, EveryPresetAndModelBackpropagatesAfterABf16AutocastForward) {
  for (const auto& param : preset_names())
    for (const auto& kind : kKinds)
      for (int depth : {2, 4}) {
        if (is_moe_table(preset(param))) continue;  // refused by a dense model (Moe.BadInput)
        ModelConfig c = tiny(kind, 64, depth);
        if (kind == "gpt") c.block = depth == 2 ? "post" : "keel";
        const std::string what = fmt::format("{} {} L{} {}", param, kind, depth, c.block);
        auto model = build(c, param);
        Data d = data_for(c);
        expect_backprop_after_bf16_forward(*model, [&] { return model->loss(d.x, d.y); }, what);
      }
}

// The same for batched ensembles (a GPU sweep's chunks: [members, ...] parameters, per-member bmm
// products) under the tables they take (no unit scaling): member_losses after a bf16-autocast
// forward, backward outside it.
TEST(ModelsBuild, EnsemblesBackpropagateAfterABf16AutocastForward) {
  for (const std::string param : {"standard", "mup", "completep", "spectral"})
    for (const std::string kind : {"bigram", "gpt", "resmlp"}) {
      ModelConfig c = tiny(kind, 64, 2);
      const std::string what = fmt::format("{} {} x3", param, kind);
      ScaleContext ctx = context_for(param, c);
      ctx.members = 3;
      torch::manual_seed(0);
      auto model = build_model(c, ctx, {});
      Data d = data_for(c);
      expect_backprop_after_bf16_forward(
          *model,
          [&] {
            torch::Tensor losses = model->member_losses(torch::stack({d.x, d.x, d.x}), torch::stack({d.y, d.y, d.y}));
            EXPECT_EQ(losses.numel(), 3) << what;
            return losses;
          },
          what);
    }
}

// ---- the base shape: every parameterization is the same network ----------------------------

TEST(ModelsBase, EveryPresetIsTheSameNetworkAtTheBaseShape) {
  // docs/design.md "How a table reaches a tensor": at the base shapes (d0 = 64, L0 = 4) every
  // table's factors are 1, so the same seed gives the same logits whatever the parameterization.
  struct Variant {
    std::string name;
    ModelConfig cfg;
    Hyper hp;
    bool skip_keel = false;  // see below
  };
  std::vector<Variant> variants;
  auto base = [](const std::string& kind) { return tiny(kind, 64, 4); };
  {
    ModelConfig c = base("bigram");
    variants.push_back({"bigram", c, {}});
    c.activation = "relu";
    c.rmsnorm = true;
    variants.push_back({"bigram relu rmsnorm", c, {}});
    c.tied = true;
    variants.push_back({"bigram tied", c, {}});
  }
  {
    ModelConfig c = base("resmlp");
    variants.push_back({"resmlp", c, {}});
    c.activation = "abs";
    c.block_depth = 2;
    c.pre_ln = true;
    Hyper hp;
    hp.branch_mult = 2;
    hp.output_mult = 0.5;
    variants.push_back({"resmlp abs bd2 pre_ln", c, hp});
  }
  {
    ModelConfig c = base("gpt");
    variants.push_back({"gpt pre", c, {}});
    c.qk_norm = true;
    c.tied = true;
    variants.push_back({"gpt pre qk_norm tied", c, {}});
    c = base("gpt");
    c.n_heads = 2;
    Hyper hp;
    hp.attn_mult = 2;
    hp.embed_mult = 0.5;
    hp.init_scale = 1.5;
    variants.push_back({"gpt pre n_heads", c, hp});
    // post and keel placements: the KEEL preset's shortcut alpha = L^1 (seed 000 eq. 34) is an
    // absolute function of depth, not of k = L/L0, so at L0 = 4 it is 4, not 1: under the keel
    // preset these placements are a different network even at the base shape. (In the pre
    // placement alpha is unused, and keel coincides with the others: checked above.)
    c = base("gpt");
    c.block = "post";
    variants.push_back({"gpt post", c, {}, true});
    c.block = "keel";
    variants.push_back({"gpt keel", c, {}, true});
  }
  variants.push_back({"vit", base("vit"), {}});

  for (const auto& v : variants) {
    Data d = data_for(v.cfg);
    torch::NoGradGuard no_grad;
    torch::Tensor ref = build(v.cfg, "standard", v.hp, 7)->forward(d.x);
    for (const auto& param : preset_names()) {
      // Unit scaling (unit, u-mup) changes the function by design: its nonlinearities and the
      // attention average carry variance corrections (src/engine/unit/scaled_ops.h).
      if (preset(param).unit.any()) continue;
      if (is_moe_table(preset(param))) continue;  // a dense model refuses it (Moe.BadInput)
      torch::Tensor logits = build(v.cfg, param, v.hp, 7)->forward(d.x);
      const double diff = (logits - ref).abs().max().item<double>();
      if (v.skip_keel && param == "keel") {
        EXPECT_GT(diff, 1e-3) << v.name << ": keel's shortcut should change post/keel placements";
        continue;
      }
      EXPECT_LE(diff, 1e-6) << v.name << " under " << param;
    }
  }
}

// ---- width scaling of the init and the multipliers ------------------------------------------

TEST(ModelsScaling, InitStdIsBaseStdTimesWidthFactor) {
  // Under mup at width 256 (m = 4): every matrix's std is base_std * m^-1/2; the readout's base
  // std is 1/sqrt(fan_in / m) = 1/8, so its std is 1/16 = 1/sqrt(256).
  struct Expect {
    const char* param;
    const char* name;
    double base_std;
    double std;
  };
  const double m = 4;
  const Expect expects[] = {
      {"mup", "readout.weight", 1.0 / 8, 1.0 / 16},
      {"mup", "tok_emb.weight", 1.0, 0.5},
      {"mup", "blocks.0.mlp.fc.weight", 1.0 / 8, 1.0 / 16},
      {"mup", "blocks.0.mlp.proj.weight", 1.0 / 16, 1.0 / 32},
      {"mup", "blocks.0.attn.q.weight", 1.0 / 8, 1.0 / 16},
      {"standard", "tok_emb.weight", 1.0, 1.0},
      {"standard", "readout.weight", 1.0 / 8, 1.0 / 16},
      {"depth-mup", "readout.weight", 1.0 / 8, 1.0 / 32},  // V init n^-2 variance (seed 004 4.2)
      {"mf", "blocks.0.attn.o.weight", 1.0 / 8, 1.0 / 8},  // b = 0
  };
  ModelConfig c = tiny("gpt", 256, 1);
  for (const auto& e : expects) {
    auto model = build(c, e.param);
    auto ps = model->tagged_parameters();
    const TaggedParam& p = find_param(ps, e.name);
    EXPECT_NEAR(p.tag.base_std, e.base_std, 1e-12) << e.param << " " << e.name;
    EXPECT_NEAR(init_std(p.tag, model->context(), {}), e.std, 1e-12) << e.param << " " << e.name;
    const double emp = p.tensor.detach().std().item<double>();
    EXPECT_NEAR(emp / e.std, 1.0, 0.05) << e.param << " " << e.name << " empirical std " << emp;
  }
  // Every normally-initialised tensor of a mup vit at width 256 follows the table within 5%.
  ModelConfig v = tiny("vit", 256, 1);
  auto model = build(v, "mup");
  for (const auto& p : model->tagged_parameters()) {
    if (p.tag.base_std == 0) {
      EXPECT_TRUE(p.tag.role == Role::Vector) << p.name;
      continue;
    }
    if (p.tensor.numel() < 4000) continue;  // std estimate within ~1%
    const double want = p.tag.base_std * std::pow(m, -model->context().table.row(p.tag.role).b);
    EXPECT_NEAR(p.tensor.detach().std().item<double>() / want, 1.0, 0.05) << p.name;
  }
}

TEST(ModelsScaling, MupMultipliersKeepEmbeddingsAndShrinkLogitsAsTheTableSays) {
  // Bigram under mup: h1 = m^1/2 W_0[:, x] with std m^-1/2 -> RMS 1 at every width; the logits
  // carry m^-1/2 (multiplier) times m^-1/2 (init) times sqrt(d) (sum) / sqrt(d0): RMS ~ m^-1/2.
  double h_rms[2], l_rms[2];
  const int widths[2] = {64, 1024};
  for (int i = 0; i < 2; ++i) {
    ModelConfig c = tiny("bigram", widths[i], 2);
    double hs = 0, ls = 0;
    for (int seed = 0; seed < 4; ++seed) {
      auto model = build(c, "mup", {}, seed);
      model->set_recording(true);
      torch::NoGradGuard g;
      model->forward(torch::arange(32, torch::kLong).view({1, 32}));
      hs += rms(model->recorded().front().second) / 4;
      ls += rms(model->recorded().back().second) / 4;
    }
    h_rms[i] = hs;
    l_rms[i] = ls;
  }
  // Tolerances: an RMS over n = 32 d unit-variance entries has relative sd 1/sqrt(2n) (1.6% at
  // d = 64), 0.8% over 4 seeds, so 0.1 is over 10 sd. The logits' RMS adds the readout's random
  // projection of each token's h (32 tokens x vocab 32 outputs: a relative sd of about
  // 1/sqrt(2 x 1024) = 2.2% per seed, 1.1% over 4), so 15% is over 10 sd of the ratio; a wrong
  // exponent (ratio 1, 1/16 or 4) misses it by 75% or more.
  EXPECT_NEAR(h_rms[0], 1.0, 0.1);
  EXPECT_NEAR(h_rms[1] / h_rms[0], 1.0, 0.1);
  EXPECT_NEAR(l_rms[1] / l_rms[0], 0.25, 0.25 * 0.15);
}

TEST(ModelsScaling, DepthAndAttentionFactorsComeFromTheTable) {
  // Residual branch k^-branch (seed 000 eq. 30; seed 004 eq. 1): depth-mup at L = 16 -> (16/4)^-1/2.
  ModelConfig c = tiny("resmlp", 64, 16);
  Hyper hp;
  hp.branch_mult = 3;
  auto model = build(c, "depth-mup", hp);
  model->set_recording(true);
  {
    torch::NoGradGuard g;
    model->forward(data_for(c).x);
  }
  std::map<std::string, torch::Tensor> rec(model->recorded().begin(), model->recorded().end());
  torch::Tensor want = rec["x0"] + 3 * 0.5 * mean_subtract(torch::relu(rec["h1"]));
  EXPECT_LE((rec["x1"] - want).abs().max().item<double>(), 1e-5);

  // KEEL shortcut alpha = L (seed 000 eq. 34) and completep's 1/L branch.
  HeadShape hs{4, 16, 16};
  ModelConfig g = tiny("gpt", 64, 8);
  TransformerBlock keel(64, hs, Placement::Keel, true, g, off_base("keel", 64, 8), {});
  EXPECT_DOUBLE_EQ(keel.alpha(), 8.0);
  EXPECT_DOUBLE_EQ(keel.beta(), 1.0);
  TransformerBlock cp(64, hs, Placement::Pre, true, g, off_base("completep", 64, 8), {});
  EXPECT_DOUBLE_EQ(cp.alpha(), 1.0);
  EXPECT_DOUBLE_EQ(cp.beta(), 0.5);

  // Attention logit scale: fixed head_dim -> d_head^-1/2 at every width; fixed n_heads under mup
  // (p = 1) -> d_head0^-1/2 (d_head/d_head0)^-1, under standard (p = 1/2) -> d_head^-1/2.
  ModelConfig a = tiny("gpt", 256, 1);
  EXPECT_DOUBLE_EQ(head_shape(a, off_base("mup", 256, 1)).d_head, 16);
  Attention fixed_dim(256, head_shape(a, off_base("mup", 256, 1)), true, false, false, off_base("mup", 256, 1), {});
  EXPECT_DOUBLE_EQ(fixed_dim.logit_scale(), 0.25);
  a.n_heads = 4;
  HeadShape h4 = head_shape(a, off_base("mup", 256, 1));
  EXPECT_EQ(h4.d_head, 64);
  EXPECT_DOUBLE_EQ(h4.base_d_head, 16);
  EXPECT_DOUBLE_EQ(Attention(256, h4, true, false, false, off_base("mup", 256, 1), {}).logit_scale(), 1.0 / 16);
  EXPECT_DOUBLE_EQ(Attention(256, h4, true, false, false, off_base("standard", 256, 1), {}).logit_scale(), 1.0 / 8);

  // Tied readout: mult_R * std_R / std_E; under mup at m = 4: 4^-1/2 * (1/8 * 4^-1/2) / 4^-1/2 = 1/16.
  EXPECT_DOUBLE_EQ(tied_readout_factor(256, off_base("mup", 256, 1), {}), 1.0 / 16);
  EXPECT_DOUBLE_EQ(tied_readout_factor(64, off_base("standard", 64, 1), {}), 1.0 / 8);
}

// ---- behaviour --------------------------------------------------------------------------------

TEST(ModelsBehaviour, RecordsEveryLayerInForwardOrderWithGradients) {
  const std::map<std::string, std::vector<std::string>> want = {
      {"bigram", {"h1", "h2", "h3", "logits"}},
      {"mlp", {"h1", "h2", "h3", "logits"}},
      {"resmlp", {"x0", "h1", "x1", "h2", "x2", "logits"}},
      {"gpt", {"embed", "block1", "block2", "logits"}},
      {"vit", {"embed", "block1", "block2", "logits"}}};
  for (const auto& kind : kKinds) {
    ModelConfig c = tiny(kind, 64, 2);
    auto model = build(c, "mup");
    model->set_recording(true);
    Data d = data_for(c);
    model->loss(d.x, d.y).backward();
    std::vector<std::string> names;
    for (const auto& [n, t] : model->recorded()) {
      names.push_back(n);
      EXPECT_TRUE(t.grad().defined()) << kind << " " << n;
    }
    EXPECT_EQ(names, want.at(kind)) << kind;
    model->set_recording(false);
    model->forward(d.x);
    EXPECT_TRUE(model->recorded().empty());
  }
  ModelConfig c = tiny("resmlp", 64, 1);
  c.block_depth = 2;
  auto model = build(c, "mup");
  model->set_recording(true);
  model->forward(data_for(c).x);
  ASSERT_EQ(model->recorded().size(), 5u);
  EXPECT_EQ(model->recorded()[2].first, "g1");
}

TEST(ModelsBehaviour, SameSeedSameModelAndZeroInitOptions) {
  for (const auto& kind : kKinds) {
    ModelConfig c = tiny(kind, 128, 2);
    auto a = build(c, "mup", {}, 5), b = build(c, "mup", {}, 5), other = build(c, "mup", {}, 6);
    auto pa = a->tagged_parameters(), pb = b->tagged_parameters(), po = other->tagged_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    bool any_diff = false;
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].name, pb[i].name);
      EXPECT_TRUE(torch::equal(pa[i].tensor, pb[i].tensor)) << kind << " " << pa[i].name;
      any_diff |= !torch::equal(pa[i].tensor, po[i].tensor);
    }
    EXPECT_TRUE(any_diff) << kind;
  }
  // zero_readout / zero_query: those tensors are 0, every other tensor is unchanged (same stream).
  ModelConfig c = tiny("gpt", 64, 2);
  auto ref = build(c, "mup");
  c.zero_readout = true;
  c.zero_query = true;
  auto z = build(c, "mup");
  auto pr = ref->tagged_parameters(), pz = z->tagged_parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    const bool zeroed = pz[i].name == "readout.weight" || pz[i].name.ends_with("attn.q.weight");
    if (zeroed) {
      EXPECT_EQ(pz[i].tensor.abs().max().item<double>(), 0.0) << pz[i].name;
      EXPECT_EQ(pz[i].tag.base_std, 0.0) << pz[i].name;
    } else {
      EXPECT_TRUE(torch::equal(pr[i].tensor, pz[i].tensor)) << pz[i].name;
    }
  }
  torch::NoGradGuard g;
  EXPECT_EQ(z->forward(data_for(c).x).abs().max().item<double>(), 0.0);
}

TEST(ModelsBehaviour, GptIsCausalAndVitIsNot) {
  ModelConfig c = tiny("gpt", 64, 2);
  auto model = build(c, "mup");
  torch::NoGradGuard g;
  torch::Tensor x = data_for(c).x;
  torch::Tensor x2 = x.clone();
  x2.index_put_({0, 7}, (x2.index({0, 7}) + 1) % c.vocab);
  torch::Tensor a = model->forward(x), b = model->forward(x2);
  EXPECT_LE((a.narrow(1, 0, 7) - b.narrow(1, 0, 7)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((a.narrow(1, 7, 1) - b.narrow(1, 7, 1)).abs().max().item<double>(), 1e-6);
  // Shorter contexts (sampling) see the same logits for the positions they share.
  torch::Tensor s = model->forward(x.narrow(1, 0, 5));
  EXPECT_LE((s - a.narrow(1, 0, 5)).abs().max().item<double>(), 1e-5);
  // A tied model has no readout tensor.
  c.tied = true;
  for (const auto& p : build(c, "mup")->tagged_parameters()) EXPECT_NE(p.name, "readout.weight");
}

TEST(ModelsBehaviour, TaggedParametersCarryRolesAndBlockFlags) {
  ModelConfig c = tiny("gpt", 64, 2);
  c.block = "keel";
  auto ps = build(c, "mup")->tagged_parameters();
  EXPECT_EQ(ps.front().name, "tok_emb.weight");
  const std::map<std::string, std::pair<Role, bool>> want = {
      {"tok_emb.weight", {Role::Embedding, false}},      {"pos_emb.weight", {Role::Embedding, false}},
      {"blocks.1.ln1.gain", {Role::Vector, true}},       {"blocks.1.ln1_out.gain", {Role::Vector, true}},
      {"blocks.0.attn.q.weight", {Role::AttnQ, true}},   {"blocks.0.attn.k.weight", {Role::AttnK, true}},
      {"blocks.0.attn.v.weight", {Role::AttnV, true}},   {"blocks.0.attn.o.weight", {Role::AttnO, true}},
      {"blocks.0.mlp.fc.weight", {Role::Hidden, true}},  {"blocks.0.mlp.proj.weight", {Role::Hidden, true}},
      {"ln_f.gain", {Role::Vector, false}},              {"readout.weight", {Role::Readout, false}}};
  for (const auto& [name, rb] : want) {
    const TaggedParam& p = find_param(ps, name);
    EXPECT_EQ(p.tag.role, rb.first) << name;
    EXPECT_EQ(p.tag.in_block, rb.second) << name;
  }
  auto vp = build(tiny("vit", 64, 1), "mup")->tagged_parameters();
  EXPECT_EQ(find_param(vp, "head_bias").tag.role, Role::Vector);
  EXPECT_EQ(find_param(vp, "stem.weight").tag.role, Role::Embedding);
  EXPECT_NEAR(find_param(vp, "stem.weight").tag.base_std, 0.25, 1e-12);  // 1/sqrt(1*4*4)
}

// ---- errors -----------------------------------------------------------------------------------

namespace {

struct Untagged : TaggedModule {
  Untagged() { register_parameter("foo", torch::zeros({3})); }
};

struct BadModel : Model {
  explicit BadModel(bool plain_linear) {
    if (plain_linear) {
      register_module("lin", torch::nn::Linear(2, 2));
    } else {
      auto list = register_module("blocks", torch::nn::ModuleList());
      list->push_back(std::make_shared<Untagged>());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override { return x; }
  const ModelConfig& config() const override { return cfg; }
  const ScaleContext& context() const override { return ctx; }
  ModelConfig cfg;
  ScaleContext ctx;
};


}  // namespace

TEST(ModelsErrors, UntaggedParameterIsAnErrorNamingIt) {
  std::string msg = user_error_of([] { BadModel(false).tagged_parameters(); });
  EXPECT_NE(msg.find("parameter 'blocks.0.foo' has no role tag"), std::string::npos) << msg;
  EXPECT_NE(msg.find("add_param"), std::string::npos) << msg;
  // A stock torch layer has no tags either.
  msg = user_error_of([] { BadModel(true).tagged_parameters(); });
  EXPECT_NE(msg.find("parameter 'lin.weight' has no role tag"), std::string::npos) << msg;
}

TEST(ModelsErrors, WidthNotDivisibleByHeadsIsAUserError) {
  ModelConfig c = tiny("gpt", 72, 2);  // head_dim 16
  std::string msg = user_error_of([&] { build(c, "mup"); });
  EXPECT_NE(msg.find("model.width"), std::string::npos) << msg;
  EXPECT_NE(msg.find("head_dim"), std::string::npos) << msg;
  c = tiny("vit", 64, 2);
  c.n_heads = 5;
  msg = user_error_of([&] { build(c, "mup"); });
  EXPECT_NE(msg.find("model.width"), std::string::npos) << msg;
  EXPECT_NE(msg.find("n_heads"), std::string::npos) << msg;
}

TEST(ModelsErrors, BadConfigsNameTheField) {
  struct Case {
    std::function<void(ModelConfig&)> edit;
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.kind = "rnn"; }, "model.kind"},
      {[](ModelConfig& c) { c.width = 0; }, "model.width"},
      {[](ModelConfig& c) { c.depth = -1; }, "model.depth"},
      {[](ModelConfig& c) { c.activation = "swish"; }, "model.activation"},
      {[](ModelConfig& c) { c.block = "sandwich"; }, "model.block"},
      {[](ModelConfig& c) { c.kind = "resmlp"; c.block_depth = 3; }, "model.block_depth"},
      {[](ModelConfig& c) { c.kind = "resmlp"; c.tied = true; }, "model.tied"},
      {[](ModelConfig& c) { c.tied = true; c.zero_readout = true; }, "model.zero_readout"},
      {[](ModelConfig& c) { c.kind = "vit"; c.patch = 3; }, "model.patch"},
      {[](ModelConfig& c) { c.vocab = 0; }, "model.vocab"},
      {[](ModelConfig& c) { c.mlp_ratio = 0; }, "model.mlp_ratio"},
  };
  for (const auto& cs : cases) {
    ModelConfig c = tiny("gpt", 64, 2);
    cs.edit(c);
    std::string msg = user_error_of([&] {
      ScaleContext ctx = context_for("mup", c);
      build_model(c, ctx, {});
    });
    EXPECT_NE(msg.find(std::string("'") + cs.field + "'"), std::string::npos) << cs.field << ": " << msg;
  }
  // A ScaleContext whose shape is not the model's is a programming error.
  ModelConfig m = tiny("gpt", 64, 2);
  ScaleContext wrong = context_for("mup", m);
  wrong.width = 128;
  EXPECT_THROW(build_model(m, wrong, {}), std::invalid_argument);
  // Inputs that do not fit the model: a message, not a libtorch trace.
  ModelConfig c = tiny("gpt", 64, 2);
  auto model = build(c, "mup");
  EXPECT_NE(user_error_of([&] { model->forward(torch::full({1, 4}, 40, torch::kLong)); }).find("model.vocab"),
            std::string::npos);
  EXPECT_NE(user_error_of([&] { model->forward(torch::zeros({1, 9}, torch::kLong)); }).find("model.seq_len"),
            std::string::npos);
  auto mlp = build(tiny("resmlp", 64, 2), "mup");
  EXPECT_NE(user_error_of([&] { mlp->forward(torch::zeros({2, 15})); }).find("model.in_dim"), std::string::npos);
  auto vit = build(tiny("vit", 64, 2), "mup");
  EXPECT_NE(user_error_of([&] { vit->forward(torch::zeros({2, 64})); }).find("model.image_size"), std::string::npos);
}

// ---- model kinds as data (brain/models/model_kinds.h) ------------------------------------------------

// Every row builds at its coordinate-check defaults, every tensor tagged, and its parameter
// estimate is within a factor 2 of the real count (matrices only: the estimate leaves out gains).
TEST(ModelKinds, EveryKindBuildsAndItsEstimateHolds) {
  ASSERT_GE(model_kinds().size(), 6u);
  for (const ModelKind& k : model_kinds()) {
    SCOPED_TRACE(k.name);
    std::vector<std::string> sets = k.coordcheck_defaults;
    sets.push_back("model.kind=\"" + k.name + "\"");
    const TrainConfig c = load_train_config("", sets);
    const ParamTable t = load_param("mup");
    ScaleContext ctx{t, OptFamily::Adam, c.model.width, c.model.depth};
    torch::manual_seed(0);
    auto m = build_model(c.model, ctx, c.hp);
    int64_t n = 0;
    for (const auto& tp : m->tagged_parameters()) n += tp.tensor.numel();
    const double est = k.parameters(c.model);
    EXPECT_GT(est, 0.5 * static_cast<double>(n));
    EXPECT_LT(est, 2.0 * static_cast<double>(n));
    EXPECT_EQ(&model_kind(k.name), &k);
  }
  const std::string e = user_error_of([] { model_kind("llamma"); });
  EXPECT_NE(e.find("'model.kind'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama"), std::string::npos) << e;  // the fix names the kinds
  // The lists the fixes print: every kind in the registry's order, or the rows a trait selects.
  EXPECT_EQ(model_kind_list(), "bigram, mlp, resmlp, gpt, vit, llama, moe");
  EXPECT_EQ(model_kind_list([](const ModelKind& k) { return k.gqa; }), "llama, moe");
  EXPECT_EQ(model_kind_list([](const ModelKind&) { return false; }), "");
}

// Llama: GQA's key/value projections keep the base width's ratio of query heads per key/value
// head (kv_heads = 2 of 4 heads at width 64: 4 of 8 at width 128), the SwiGLU hidden width is
// swiglu_hidden(d), the tie leaves one tensor with the embedding role, and rotary positions make
// the model sensitive to order (the GPT's learned positions are absent).
TEST(ModelKinds, LlamaShapesAndTie) {
  ModelConfig mc;
  mc.kind = "llama";
  mc.width = 128;
  mc.kv_heads = 2;
  const ParamTable t = load_param("mup");
  ScaleContext ctx{t, OptFamily::Adam, 128, 2};
  torch::manual_seed(0);
  auto m = build_model(mc, ctx, Hyper{});
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& tp : m->tagged_parameters()) shapes[tp.name] = tp.tensor.sizes().vec();
  EXPECT_EQ(shapes.at("blocks.0.attn.k.weight"), (std::vector<int64_t>{4 * 16, 128}));
  EXPECT_EQ(shapes.at("blocks.0.attn.q.weight"), (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(shapes.at("blocks.0.mlp.gate.weight"), (std::vector<int64_t>{swiglu_hidden(128, 16), 128}));
  EXPECT_EQ(swiglu_hidden(64, 16), 176);
  EXPECT_EQ(swiglu_hidden(512, 16), 1376);
  EXPECT_TRUE(shapes.count("readout.weight"));
  mc.tied = true;
  torch::manual_seed(0);
  auto tied = build_model(mc, ctx, Hyper{});
  int tied_tensors = 0;
  for (const auto& tp : tied->tagged_parameters()) {
    EXPECT_NE(tp.name, "readout.weight");
    tied_tensors += tp.tag.tied;
  }
  EXPECT_EQ(tied_tensors, 1);
  torch::Tensor x = torch::randint(0, mc.vocab, {2, 8}, torch::kLong);
  torch::Tensor y = tied->forward(x);
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 8, mc.vocab}));
  // Order matters: the last position's logits change when the first two tokens swap.
  torch::Tensor xs = x.clone();
  xs.index_put_({torch::indexing::Slice(), 0}, x.index({torch::indexing::Slice(), 1}));
  xs.index_put_({torch::indexing::Slice(), 1}, x.index({torch::indexing::Slice(), 0}));
  torch::NoGradGuard ng;
  const double diff = (tied->forward(xs) - tied->forward(x)).index({torch::indexing::Slice(), -1}).abs().max().item<double>();
  EXPECT_GT(diff, 1e-4);
}

// Bad Llama settings are one-line UserErrors naming the field.
TEST(ModelKinds, LlamaBadInput) {
  const ParamTable t = load_param("mup");
  auto field_of = [&](std::function<void(ModelConfig&)> edit) {
    ModelConfig mc;
    mc.kind = "llama";
    edit(mc);
    ScaleContext ctx{t, OptFamily::Adam, mc.width, mc.depth};
    return user_error_of([&] { build_model(mc, ctx, Hyper{}); });
  };
  auto names = [](const std::string& msg, const std::string& field) {
    return msg.find("'" + field + "'") != std::string::npos;
  };
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.kv_heads = 3; }), "model.kv_heads"));  // 4 heads at width 64
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.kv_heads = 8; }), "model.kv_heads"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.block = "post"; }), "model.block"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.head_dim = 7; m.width = 63; }), "model.head_dim"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.rope_theta = 0.5; }), "model.rope_theta"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.ffn_multiple = 0; }), "model.ffn_multiple"));
  ModelConfig gpt;
  gpt.kv_heads = 2;  // the GPT has no grouped-query attention
  ScaleContext ctx{t, OptFamily::Adam, gpt.width, gpt.depth};
  EXPECT_TRUE(names(user_error_of([&] { build_model(gpt, ctx, Hyper{}); }), "model.kv_heads"));
}
