// Weights packed side by side (src/engine/models/packed_rows.h) and the attention's packed q, k, v path:
// the values and gradients of linear_packed against linear of the cat, what ends a packing, a
// packed attention against finite differences, a packed GPT training as the unpacked one, its
// checkpoint written as the unpacked one's, and backward after a bf16 autocast forward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/runtime/torch_compat.h"
#include "cli_util.h"
#include "fd_check.h"
#include "engine/models/layers.h"
#include "engine/models/model.h"
#include "engine/models/packed_rows.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "engine/train/checkpoint.h"
#include "fixtures.h"

using namespace scaleinv;
using scaleinv::testing::diff_over_largest;
using scaleinv::testing::fd_check;
using scaleinv::testing::packed_attention_layers;
using scaleinv::testing::slurp;
using scaleinv::testing::temp_dir;

namespace {

ModelConfig tiny_gpt(int width, bool qk_norm) {
  ModelConfig c;
  c.kind = "gpt";
  c.width = width;
  c.depth = 2;
  c.vocab = 32;
  c.seq_len = 8;
  c.head_dim = 16;
  c.qk_norm = qk_norm;
  return c;
}

// A preset, or "mup+q": mup with W_q's forward multiplier m^-1/2 (1/sqrt(2) at width 128), so
// that the packed path's move of that multiplier into the attention product is checked.
ParamTable table_named(const std::string& param) {
  if (param != "mup+q") return preset(param);
  ParamTable t = preset("mup");
  t.row(Role::AttnQ).a = 0.5;
  return t;
}

std::shared_ptr<Model> gpt(const std::string& param, const ModelConfig& c, const Hyper& hp = {}) {
  ScaleContext ctx;
  ctx.table = table_named(param);
  ctx.family = OptFamily::Adam;
  ctx.width = c.width;
  ctx.depth = c.depth;
  torch::manual_seed(5);
  return build_model(c, ctx, hp);
}

// Packs every module as Model::move_to does on CUDA (here on the CPU, so the suite checks the path).
int pack_all(Model& m) {
  for (const auto& sub : m.modules(/*include_self=*/false))
    if (auto* tm = dynamic_cast<TaggedModule*>(sub.get())) tm->pack_weights();
  return packed_attention_layers(m);
}

struct Tokens {
  torch::Tensor x, y;
};
Tokens tokens(const ModelConfig& c, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return {torch::randint(c.vocab, {4, c.seq_len}, gen, torch::kLong), torch::randint(c.vocab, {4, c.seq_len}, gen, torch::kLong)};
}

}  // namespace

TEST(PackedRows, LinearPackedEqualsLinearOfTheCatAndGivesEachBlockItsGradient) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> ws = {torch::randn({4, 8}).requires_grad_(), torch::randn({6, 8}).requires_grad_(),
                                   torch::randn({5, 8}).requires_grad_()};
  std::vector<torch::Tensor> ref;
  for (const auto& w : ws) ref.push_back(w.detach().clone().requires_grad_());
  EXPECT_FALSE(rows_adjacent(ws));
  ASSERT_TRUE(pack_rows(ws));
  ASSERT_TRUE(rows_adjacent(ws));
  for (size_t i = 0; i < ws.size(); ++i) {
    EXPECT_TRUE(torch::equal(ws[i], ref[i])) << "packing changed block " << i;
    EXPECT_TRUE(ws[i].requires_grad());
    EXPECT_TRUE(ws[i].is_leaf());
  }
  EXPECT_TRUE(ws[1].storage().is_alias_of(ws[0].storage()));

  torch::Tensor x = torch::randn({2, 3, 8}).requires_grad_(), xr = x.detach().clone().requires_grad_();
  torch::Tensor r = torch::randn({2, 3, 15});
  torch::Tensor y = linear_packed(x, ws), yr = torch::linear(xr, torch::cat(ref, 0));
  EXPECT_LT(diff_over_largest(y, yr), 1e-6);
  (y * r).sum().backward();
  (yr * r).sum().backward();
  EXPECT_LT(diff_over_largest(x.grad(), xr.grad()), 1e-6);
  for (size_t i = 0; i < ws.size(); ++i) {
    ASSERT_TRUE(ws[i].grad().defined()) << i;
    EXPECT_EQ(ws[i].grad().sizes(), ws[i].sizes());
    EXPECT_LT(diff_over_largest(ws[i].grad(), ref[i].grad()), 1e-6) << "block " << i;
  }
  // A second backward accumulates into each block's gradient as autograd does for any leaf.
  linear_packed(x, ws).mul(r).sum().backward();
  for (size_t i = 0; i < ws.size(); ++i) EXPECT_LT(diff_over_largest(ws[i].grad(), 2 * ref[i].grad()), 1e-6) << i;
  // In-place updates (an optimizer's) keep the packing.
  {
    torch::NoGradGuard ng;
    for (auto& w : ws) w.sub_(0.1 * w.grad());
  }
  EXPECT_TRUE(rows_adjacent(ws));
  // Giving one block storage of its own ends it: rows_adjacent says so and linear_packed refuses.
  torch::Tensor(ws[1]).set_data(ws[1].detach().clone());
  EXPECT_FALSE(rows_adjacent(ws));
  EXPECT_THROW(linear_packed(x, ws), std::invalid_argument);
  // Shapes that cannot stack are left alone.
  std::vector<torch::Tensor> odd = {torch::randn({4, 8}), torch::randn({4, 7})};
  EXPECT_FALSE(pack_rows(odd));
  EXPECT_FALSE(pack_rows({torch::randn({2, 4, 8}), torch::randn({2, 4, 8})}));
  EXPECT_FALSE(rows_adjacent(odd));
}

// The packed attention's gradients (input and every weight) against central differences, with
// and without QK-norm, causal or not, under a table whose q multiplier and logit scale are not 1.
TEST(PackedRows, APackedAttentionMatchesFiniteDifferences) {
  ScaleContext ctx;
  ctx.table = preset("completep");
  ctx.width = 32;
  ctx.depth = 8;
  Hyper hp;
  hp.attn_mult = 1.3;
  HeadShape hs{4, 8, 8};
  for (bool causal : {true, false})
    for (bool qk : {false, true}) {
      const std::string what = fmt::format("causal={} qk_norm={}", causal, qk);
      torch::manual_seed(2);
      Attention att(32, hs, causal, qk, false, ctx, hp);
      att.to(torch::kDouble);
      att.pack_weights();
      ASSERT_TRUE(att.packed()) << what;
      torch::Tensor x = torch::randn({2, 5, 32}, torch::kDouble).requires_grad_(true);
      auto gen = at::detail::createCPUGenerator(99);
      torch::Tensor r = torch::randn({2, 5, 32}, gen, torch::kDouble);
      auto loss = [&] { return (att.forward(x) * r).sum(); };
      auto rx = fd_check(loss, x);
      EXPECT_TRUE(rx.ok) << what << " input: " << rx.message;
      for (const auto& p : att.named_parameters()) {
        auto rp = fd_check(loss, p.value());
        EXPECT_TRUE(rp.ok) << what << " " << p.key() << ": " << rp.message;
      }
      EXPECT_TRUE(att.packed()) << what << ": the checks' in-place nudges ended the packing";
    }
}

// A GPT with its attention packed trains as the unpacked one: the same losses over Adam steps
// (fp32 rounding apart: the logit scale moves from W_q into the attention product), every
// parameter within the same bound after them, still packed; its checkpoint is the same size and
// loads into an unpacked model.
TEST(PackedRows, APackedGptTrainsAsTheUnpackedOneAndCheckpointsTheSame) {
  for (const std::string param : {"standard", "mup", "completep", "mup+q"})
    for (bool qk : {false, true}) {
      const std::string what = fmt::format("{} qk_norm={}", param, qk);
      const ModelConfig c = tiny_gpt(128, qk);
      auto plain = gpt(param, c), packed = gpt(param, c);
      ASSERT_EQ(packed_attention_layers(*plain), 0) << what;
      // Under QK-norm a W_q multiplier other than 1 keeps the cat (packed() is false there).
      const int expect = param == "mup+q" && qk ? 0 : c.depth;
      ASSERT_EQ(pack_all(*packed), expect) << what;
      EXPECT_EQ(pack_all(*packed), expect) << what << ": packing again";
      OptimConfig oc;
      oc.kind = "adam";
      oc.lr = 3e-3;
      ScaleContext ctx = plain->context();
      auto opt_plain = make_optimizer(oc, param_groups(plain->tagged_parameters(), ctx));
      auto opt_packed = make_optimizer(oc, param_groups(packed->tagged_parameters(), ctx));
      double worst = 0;
      for (int step = 0; step < 6; ++step) {
        const Tokens b = tokens(c, 100 + step);
        opt_plain->zero_grad();
        opt_packed->zero_grad();
        torch::Tensor lp = plain->loss(b.x, b.y), lk = packed->loss(b.x, b.y);
        worst = std::max(worst, std::abs(lk.item<double>() - lp.item<double>()) / lp.item<double>());
        lp.backward();
        lk.backward();
        opt_plain->step();
        opt_packed->step();
      }
      // fp32 rounding of a different but equal product, carried through 6 Adam steps.
      EXPECT_LT(worst, 1e-5) << what;
      const auto pp = plain->tagged_parameters(), pk = packed->tagged_parameters();
      ASSERT_EQ(pp.size(), pk.size());
      // Each tensor as a whole (Frobenius norm): Adam divides by sqrt(v), so at an entry whose
      // gradient is near zero a reassociation-sized difference becomes a visible one in that
      // entry alone (2.7e-4 of the largest entry under valgrind's arithmetic); the norm weighs
      // those few entries against the whole tensor, where a wrong update would show at 1e-2.
      for (size_t i = 0; i < pp.size(); ++i)
        EXPECT_LT(((pk[i].tensor - pp[i].tensor).norm() / pp[i].tensor.norm().clamp_min(1e-30)).item<double>(), 1e-4)
            << what << " " << pp[i].name;
      EXPECT_EQ(packed_attention_layers(*packed), expect) << what << ": the optimizer's updates ended the packing";

      // The checkpoint writes each parameter's own values, not the buffer it shares.
      // (temp_dir and slurp, not std::filesystem's remove_all and file_size: pip's libtorch
      // exports broken copies of some of them, brain/util/atomic_file.h's remove_tree says which.)
      const std::string dir = temp_dir("packed_ckpt");
      CheckpointMeta meta;
      meta.table = ctx.table;
      meta.fingerprint = param_fingerprint(ctx.table);
      save_checkpoint(dir + "/packed.pt", meta, *packed, nullptr);
      save_checkpoint(dir + "/plain.pt", meta, *plain, nullptr);
      EXPECT_EQ(slurp(dir + "/packed.pt").size(), slurp(dir + "/plain.pt").size()) << what;
      auto fresh = gpt(param, c);
      load_checkpoint(dir + "/packed.pt", *fresh, nullptr);
      const auto pf = fresh->tagged_parameters();
      for (size_t i = 0; i < pk.size(); ++i)
        EXPECT_TRUE(torch::equal(pf[i].tensor, pk[i].tensor)) << what << " " << pk[i].name;
    }
}

// Under bf16 autocast (the CPU's, standing in for CUDA's) the packed path casts once in forward
// and its backward multiplies bf16 by bf16: every gradient comes back defined, finite and fp32, and
// the loss is the unpacked model's within bf16 rounding (2^-8 relative per product; the loss is
// an average, so a few times that bounds it).
TEST(PackedRows, APackedGptBackpropagatesAfterABf16AutocastForward) {
  const ModelConfig c = tiny_gpt(64, false);
  auto plain = gpt("mup", c), packed = gpt("mup", c);
  ASSERT_EQ(pack_all(*packed), c.depth);
  const Tokens b = tokens(c, 7);
  torch::Tensor lp, lk;
  {
    compat::CpuAutocastForTests bf16;
    lp = plain->loss(b.x, b.y);
    lk = packed->loss(b.x, b.y);
  }
  lk.backward();
  EXPECT_LT(std::abs(lk.item<double>() - lp.item<double>()) / lp.item<double>(), 4.0 / 256);
  for (const auto& p : packed->tagged_parameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
    EXPECT_EQ(p.tensor.grad().scalar_type(), torch::kFloat32) << p.name;
    EXPECT_TRUE(torch::isfinite(p.tensor.grad()).all().item<bool>()) << p.name;
  }
}

// An ensemble's [E, d, d] weights are not packed (each member's rows are not adjacent to the
// next tensor's): pack_weights leaves them, forward keeps the cat.
TEST(PackedRows, EnsemblesStayUnpacked) {
  const ModelConfig c = tiny_gpt(64, false);
  ScaleContext ctx;
  ctx.table = preset("mup");
  ctx.width = c.width;
  ctx.depth = c.depth;
  ctx.members = 3;
  torch::manual_seed(5);
  auto m = build_model(c, ctx, {});
  EXPECT_EQ(pack_all(*m), 0);
}
