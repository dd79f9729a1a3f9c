// The mixture of experts (engine/models/moe.cpp, docs/moe.md): the dropless dispatch against a per-token
// reference, the balance loss, the aux loss in the training objective, the selection bias of
// aux-loss-free balancing (its rule, and that it balances in training), the expert-count LR column,
// the router/expert rows of the table, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "brain/util/errors.h"
#include "cli_util.h"
#include "fixtures.h"
#include "engine/models/llama_layers.h"
#include "engine/models/model.h"
#include "brain/models/model_kinds.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "brain/train/config.h"

using namespace scaleinv;
using scaleinv::testing::user_error_of;

namespace {

ModelConfig moe_config(int experts, int top_k) {
  ModelConfig mc;
  mc.kind = "moe";
  mc.width = 64;
  mc.depth = 2;
  mc.vocab = 32;
  mc.seq_len = 8;
  mc.experts = experts;
  mc.top_k = top_k;
  return mc;
}

std::map<std::string, torch::Tensor> params_of(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> p;
  for (const auto& kv : m.named_parameters()) p[kv.key()] = kv.value();
  return p;
}

}  // namespace

// Sorting the (token, expert) pairs by expert and running one matmul per expert gives, token by
// token, sum over the k chosen experts of g_j SwiGLU_j(x) with g the renormalised top-k softmax of
// the logits (the table's router multiplier times hp.router_mult times W_r x).
TEST(Moe, DroplessDispatchMatchesThePerTokenSum) {
  torch::manual_seed(0);
  const ModelConfig mc = moe_config(6, 2);
  const ScaleContext ctx{load_param("mup-moe"), OptFamily::Adam, 64, 2};
  Hyper hp;
  hp.router_mult = 1.7;  // a base-shape constant on the logits, on top of the table's multiplier
  auto ffn = make_moe_feed_forward(64, mc, ctx, hp);
  auto p = params_of(*ffn);
  ASSERT_EQ(p.at("gate").sizes().vec(), (std::vector<int64_t>{6, expert_hidden(64, 16, 1), 64}));
  ASSERT_EQ(p.at("down").sizes().vec(), (std::vector<int64_t>{6, 64, expert_hidden(64, 16, 1)}));
  ASSERT_EQ(p.at("router.weight").sizes().vec(), (std::vector<int64_t>{6, 64}));
  torch::NoGradGuard ng;
  const torch::Tensor x = torch::randn({3, 5, 64});
  const torch::Tensor y = ffn->forward(x).reshape({-1, 64});
  const torch::Tensor flat = x.reshape({-1, 64});
  const double mr = ctx.scale(Role::Router, true).multiplier * 1.7, me = ctx.scale(Role::Expert, true).multiplier;
  for (int64_t t = 0; t < flat.size(0); ++t) {
    const torch::Tensor xt = flat[t];
    const torch::Tensor probs = torch::softmax(torch::mv(p.at("router.weight"), xt) * mr, 0);
    auto [top_p, top_i] = probs.topk(2);
    torch::Tensor want = torch::zeros({64});
    for (int64_t s = 0; s < 2; ++s) {
      const int64_t j = top_i[s].item<int64_t>();
      const torch::Tensor h = torch::silu(torch::mv(p.at("gate")[j], xt) * me) * (torch::mv(p.at("up")[j], xt) * me);
      want += (top_p[s] / top_p.sum()) * torch::mv(p.at("down")[j], h) * me;
    }
    EXPECT_TRUE(torch::allclose(y[t], want, 1e-5, 1e-6)) << "token " << t;
  }
}

// Switch eq. 4: B = E sum_j f_j P_j is 1 when the router is uniform, whatever the top-k ties pick
// (sum_j f_j = 1, P_j = 1/E); B grows when one expert takes most of the probability and the tokens.
TEST(Moe, BalanceLossIsOneForUniformRouting) {
  torch::manual_seed(1);
  const ModelConfig mc = moe_config(8, 2);
  const ScaleContext ctx{load_param("mup-moe"), OptFamily::Adam, 64, 2};
  auto ffn = make_moe_feed_forward(64, mc, ctx, Hyper{});
  torch::NoGradGuard ng;
  params_of(*ffn).at("router.weight").zero_();
  ffn->forward(torch::randn({4, 8, 64}));
  EXPECT_NEAR(ffn->balance().item<double>(), 1.0, 1e-6);
  EXPECT_EQ(ffn->router_logits().sizes().vec(), (std::vector<int64_t>{32, 8}));
  // Expert 0 favoured for every token: f_0 = 1/2 (top-2), P_0 > 1/E, so B > 1.
  params_of(*ffn).at("router.weight")[0].fill_(1.0);
  ffn->forward(torch::ones({4, 8, 64}));
  EXPECT_GT(ffn->balance().item<double>(), 1.5);
}

// The training objective is the cross-entropy plus aux_coef times the blocks' mean balance loss;
// evaluation reads the cross-entropy alone.
TEST(Moe, AuxLossIsInTheTrainingObjectiveOnly) {
  ModelConfig mc = moe_config(4, 2);
  mc.aux_coef = 0.5;
  const ScaleContext ctx{load_param("mup-moe"), OptFamily::Adam, 64, 2};
  torch::manual_seed(2);
  auto m = build_model(mc, ctx, Hyper{});
  EXPECT_EQ(m->context().experts, 4);
  const torch::Tensor x = torch::randint(0, 32, {2, 8}), y = torch::randint(0, 32, {2, 8});
  torch::NoGradGuard ng;
  const double ce = m->cross_entropy(x, y).item<double>();
  const double total = m->loss(x, y).item<double>();
  // B >= 1 (Cauchy-Schwarz on uniform f and P: B = 1 at its minimum over balanced routing; near
  // init the router is almost uniform under muP, logits ~ d^-1/2), so the aux term is about 0.5.
  EXPECT_GT(total - ce, 0.5 * 0.9);
  EXPECT_LT(total - ce, 0.5 * 1.5);
  mc.aux_coef = 0;
  torch::manual_seed(2);
  auto plain = build_model(mc, ctx, Hyper{});
  EXPECT_DOUBLE_EQ(plain->loss(x, y).item<double>(), plain->cross_entropy(x, y).item<double>());
}

// Aux-loss-free balancing (model.bias_rate > 0, ref. [lossfree]): the selection bias decides which
// k experts a token goes to, and the gates still read the router's p, renormalised over those k.
TEST(Moe, SelectionBiasMovesTheChoiceNotTheGates) {
  torch::manual_seed(3);
  ModelConfig mc = moe_config(4, 2);
  mc.bias_rate = 0.001;
  const ScaleContext ctx{load_param("mup-moe"), OptFamily::Adam, 64, 2};
  auto ffn = make_moe_feed_forward(64, mc, ctx, Hyper{});
  auto p = params_of(*ffn);
  torch::Tensor bias;
  for (const auto& b : ffn->named_buffers()) bias = b.value();
  ASSERT_TRUE(bias.defined());
  ASSERT_EQ(bias.sizes().vec(), (std::vector<int64_t>{4}));
  torch::NoGradGuard ng;
  // Every token's pick: experts 2 and 3, whatever the router says. Unequal biases, so gates read
  // from z + b (about 1 and 0) would differ from the unbiased p's renormalised share.
  bias[2] = 100.0;
  bias[3] = 50.0;
  const torch::Tensor x = torch::randn({2, 6, 64});
  const torch::Tensor y = ffn->forward(x).reshape({-1, 64});
  const torch::Tensor flat = x.reshape({-1, 64});
  EXPECT_TRUE(torch::equal(ffn->take_counts(), torch::tensor({0, 0, 12, 12}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(ffn->take_counts(), torch::zeros({4}, torch::kInt64)));  // taken: zeroed
  const double mr = ctx.scale(Role::Router, true).multiplier, me = ctx.scale(Role::Expert, true).multiplier;
  for (int64_t t = 0; t < flat.size(0); ++t) {
    const torch::Tensor xt = flat[t];
    const torch::Tensor probs = torch::softmax(torch::mv(p.at("router.weight"), xt) * mr, 0);
    const torch::Tensor norm = probs[2] + probs[3];
    torch::Tensor want = torch::zeros({64});
    for (const int64_t j : {2, 3}) {
      const torch::Tensor h = torch::silu(torch::mv(p.at("gate")[j], xt) * me) * (torch::mv(p.at("up")[j], xt) * me);
      want += (probs[j] / norm) * torch::mv(p.at("down")[j], h) * me;
    }
    EXPECT_TRUE(torch::allclose(y[t], want, 1e-5, 1e-6)) << "token " << t;
  }
  // Without a bias rate there is no buffer: the checkpoints of other runs keep their layout.
  mc.bias_rate = 0;
  EXPECT_EQ(make_moe_feed_forward(64, mc, ctx, Hyper{})->named_buffers().size(), 0u);
}

// b_j += bias_rate * sign(mean load - load_j): the overloaded expert's bias falls, the underloaded
// ones' rise, one at the mean stays; Model::balance_experts takes a forward's counts ([blocks, E],
// N k per block) and applies that rule to every block; expert_max_violation reads them.
TEST(Moe, BiasStepsBySignOfTheLoadGap) {
  ModelConfig mc = moe_config(4, 2);
  mc.bias_rate = 0.25;
  const ScaleContext ctx{load_param("mup-moe"), OptFamily::Adam, 64, 2};
  auto ffn = make_moe_feed_forward(64, mc, ctx, Hyper{});
  torch::Tensor bias;
  for (const auto& b : ffn->named_buffers()) bias = b.value();
  ffn->shift_bias(torch::tensor({3, 1, 2, 6}, torch::kInt64));  // mean 3
  EXPECT_TRUE(torch::equal(bias, torch::tensor({0.0f, 0.25f, 0.25f, -0.25f})));
  ffn->shift_bias(torch::tensor({0.5, 0.5, 0.5, 0.5}, torch::kFloat64));  // balanced: no move
  EXPECT_TRUE(torch::equal(bias, torch::tensor({0.0f, 0.25f, 0.25f, -0.25f})));

  torch::manual_seed(4);
  auto m = build_model(mc, ctx, Hyper{});
  torch::NoGradGuard ng;
  m->loss(torch::randint(0, 32, {3, 8}), torch::randint(0, 32, {3, 8}));
  const torch::Tensor c = m->balance_experts();
  ASSERT_EQ(c.sizes().vec(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(torch::equal(c.sum(1), torch::full({2}, 3 * 8 * 2, torch::kInt64)));
  std::vector<torch::Tensor> biases;
  for (const auto& b : m->named_buffers()) biases.push_back(b.value());
  ASSERT_EQ(biases.size(), 2u);
  for (int64_t l = 0; l < 2; ++l) {
    const torch::Tensor cl = c[l].to(torch::kFloat64);
    EXPECT_TRUE(torch::equal(biases[static_cast<size_t>(l)], (torch::sign(cl.mean() - cl) * 0.25).to(torch::kFloat32)));
  }
  EXPECT_TRUE(torch::equal(m->take_expert_counts(), torch::zeros({2, 4}, torch::kInt64)));

  EXPECT_DOUBLE_EQ(expert_max_violation(torch::tensor({2, 2, 2, 2, 4, 2, 1, 1}).view({2, 4})), 1.0);
  EXPECT_DOUBLE_EQ(expert_max_violation(torch::tensor({3, 1, 2, 2}).view({1, 4})), 0.5);
  EXPECT_TRUE(std::isnan(expert_max_violation(torch::tensor({2, 2, 0, 0}).view({2, 2}))));
  EXPECT_TRUE(std::isnan(expert_max_violation(torch::Tensor())));
}

// In training: with no balancing at all (aux_coef = 0) the tests' small mixture routes most tokens
// to a few experts (the busiest expert's load at the final evaluation is over twice an even share;
// 3 = E/k - 1 is all tokens on k experts); a selection bias moving 0.05 logits a step (at most 4 in
// 80 steps, against router logits of order 1) brings it under half of that. Seeds 0..2 measured
// 2.16..2.41 without and 0.30..0.50 with it; the test asserts the factor 2, not those figures.
TEST(Moe, SelectionBiasBalancesTheLoadInTraining) {
  using scaleinv::testing::run_cli;
  const std::string dir = scaleinv::testing::temp_dir("moe_bias");
  const std::string cfg = dir + "/c.toml";
  std::ofstream(cfg) << scaleinv::testing::small_gpt_toml({"model.kind=\"moe\"", "param.name=\"mup-moe\"", "model.experts=8",
                                                            "model.aux_coef=0.0", "train.steps=80", "train.eval_batches=4"});
  auto violation = [&](const std::string& rate) {
    const std::string out = dir + "/r" + rate;
    const auto r = run_cli("--threads 1 train --quiet --config " + cfg + " --set model.bias_rate=" + rate +
                           " --set train.out_dir='\"" + out + "\"'");
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(scaleinv::testing::slurp(out + "/run.json")).value("expert_max_violation", -1.0);
  };
  const double none = violation("0.0"), biased = violation("0.05");
  EXPECT_GT(none, 1.0);
  EXPECT_GE(biased, 0.0);
  EXPECT_LT(biased, none / 2) << "without " << none << ", with " << biased;
}

// hp.router_mult is written into a run's config only when it is not 1 (so every store id and
// checkpoint from before it existed is unchanged), reads back, and is refused on a dense model.
TEST(Moe, RouterMultIsWrittenOnlyWhenSetAndNeedsARouter) {
  TrainConfig c = train_config_from_toml_text("[model]\nkind = \"moe\"\n", "t.toml");
  EXPECT_FALSE(train_config_to_json(c).at("hp").contains("router_mult"));
  c = train_config_from_toml_text("[model]\nkind = \"moe\"\n[hp]\nrouter_mult = 2.5\n", "t.toml");
  const nlohmann::json j = train_config_to_json(c);
  EXPECT_DOUBLE_EQ(j.at("hp").at("router_mult").get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(train_config_from_json(j).hp.router_mult, 2.5);
  Hyper hp;
  hp.router_mult = 2.5;
  ModelConfig dense = moe_config(4, 2);
  dense.kind = "llama";
  const ScaleContext ctx{load_param("mup"), OptFamily::Adam, 64, 2};
  EXPECT_NE(user_error_of([&] { build_model(dense, ctx, hp); }).find("'hp.router_mult'"), std::string::npos);
}

// --resume compares the saved config with the new one over the fields either writes: a field that
// is written only away from its default (hp.router_mult, model.bias_rate) and was set for the saved
// run but left out now is named, as is one added now.
TEST(Moe, ResumeNamesAFieldWrittenOnlyWhenSetThatWasRemovedOrAdded) {
  const TrainConfig plain = train_config_from_toml_text("[model]\nkind = \"moe\"\n", "t.toml");
  const TrainConfig set = train_config_from_toml_text(
      "[model]\nkind = \"moe\"\nbias_rate = 0.01\n[hp]\nrouter_mult = 2.0\n", "t.toml");
  const std::vector<std::string> both = {"hp.router_mult", "model.bias_rate"};
  EXPECT_EQ(run_altering_differences(set, plain), both);
  EXPECT_EQ(run_altering_differences(plain, set), both);
  EXPECT_TRUE(run_altering_differences(set, set).empty());
}

// The expert-count column (table.h RoleExponents::experts_lr): under mup-moe an expert's SGD LR
// grows like E / E_0 (its token share k/E shrinks its gradient), Adam's does not; a dense tensor's
// LR does not see E at all.
TEST(Moe, ExpertCountScalesTheSgdLrOfRouterAndExperts) {
  const ParamTable t = load_param("mup-moe");
  EXPECT_EQ(t.base_experts, 4);
  for (const auto& [family, want] : {std::pair{OptFamily::SGD, 4.0}, std::pair{OptFamily::Adam, 1.0}}) {
    ModelConfig mc = moe_config(16, 2);
    ScaleContext ctx{t, family, 64, 2};
    torch::manual_seed(0);
    auto m = build_model(mc, ctx, Hyper{});
    std::map<std::string, double> lr;
    for (const ParamGroup& g : param_groups(m->tagged_parameters(), m->context())) lr[g.name] = g.lr_mult;
    EXPECT_DOUBLE_EQ(lr.at("blocks.0.mlp.gate"), want);
    EXPECT_DOUBLE_EQ(lr.at("blocks.0.mlp.router.weight"), want);
    EXPECT_DOUBLE_EQ(lr.at("blocks.0.attn.q.weight"), 1.0);  // base width: no width factor either
  }
}

// The router takes the dense table's readout row and the experts its hidden row; a dense table
// writes neither (its JSON, and so its fingerprint, are what they were before the roles existed);
// the MoE rows survive TOML and JSON.
TEST(Moe, RouterAndExpertRowsOfTheTable) {
  const ParamTable mup = load_param("mup"), moe = load_param("mup-moe");
  EXPECT_TRUE(role_is_default(mup, Role::Router));
  EXPECT_TRUE(role_is_default(mup, Role::Expert));
  EXPECT_FALSE(is_moe_table(mup));
  EXPECT_TRUE(is_moe_table(moe));
  EXPECT_FALSE(param_to_json(mup).at("roles").contains("router"));
  EXPECT_FALSE(param_to_json(mup).contains("base_experts"));
  EXPECT_EQ(moe.row(Role::Router).a, mup.row(Role::Readout).a);
  EXPECT_EQ(moe.row(Role::Router).c, mup.row(Role::Readout).c);
  EXPECT_EQ(moe.row(Role::Expert).c[static_cast<int>(OptFamily::Adam)], mup.row(Role::Hidden).c[static_cast<int>(OptFamily::Adam)]);
  EXPECT_EQ(moe.row(Role::Expert).experts_lr[static_cast<int>(OptFamily::SGD)], -1.0);
  EXPECT_TRUE(param_to_json(moe).at("roles").contains("router"));
  EXPECT_EQ(param_from_json(param_to_json(moe)), moe);
  EXPECT_EQ(param_from_toml_string(param_to_toml(moe), "moe.toml"), moe);
  EXPECT_EQ(param_from_json(param_to_json(mup)), mup);
  EXPECT_EQ(param_from_toml_string(param_to_toml(mup), "mup.toml"), mup);
  // CompleteP-MoE: the router inside a block takes the block's depth exponents.
  const ParamTable cp = load_param("completep-moe");
  EXPECT_EQ(cp.row(Role::Router).depth_lr, cp.row(Role::Hidden).depth_lr);
  EXPECT_EQ(cp.row(Role::Router).depth_eps, 1.0);
  EXPECT_EQ(cp.branch, 1.0);
  // A partial [roles.router] row sits over the readout row.
  const ParamTable part = param_from_toml_string(param_to_toml(mup) + "\n[roles.router]\nb = 1\n", "p.toml");
  EXPECT_EQ(part.row(Role::Router).b, 1.0);
  EXPECT_EQ(part.row(Role::Router).a, mup.row(Role::Readout).a);
}

TEST(Moe, BadInput) {
  const ParamTable t = load_param("mup-moe");
  auto field_of = [&](std::function<void(ModelConfig&)> edit) {
    ModelConfig mc = moe_config(4, 2);
    edit(mc);
    ScaleContext ctx{t, OptFamily::Adam, mc.width, mc.depth};
    return user_error_of([&] { build_model(mc, ctx, Hyper{}); });
  };
  auto names = [](const std::string& msg, const std::string& field) {
    return msg.find("'" + field + "'") != std::string::npos;
  };
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.experts = 0; }), "model.experts"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.top_k = 5; }), "model.top_k"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.top_k = 0; }), "model.top_k"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.aux_coef = -0.1; }), "model.aux_coef"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.granularity = 0; }), "model.granularity"));
  EXPECT_TRUE(names(field_of([](ModelConfig& m) { m.kv_heads = 3; }), "model.kv_heads"));
  // A mixture-of-experts table on a dense model.
  ModelConfig llama;
  llama.kind = "llama";
  ScaleContext ctx{t, OptFamily::Adam, llama.width, llama.depth};
  const std::string msg = user_error_of([&] { build_model(llama, ctx, Hyper{}); });
  EXPECT_TRUE(names(msg, "param.name")) << msg;
  EXPECT_NE(msg.find("moe"), std::string::npos) << msg;
  // base_experts must be positive.
  EXPECT_NE(user_error_of([] { param_from_toml_string("base_experts = 0\n[roles]\n", "x.toml"); }).find("base_experts"),
            std::string::npos);
}

// The two new models go through every file path a dense one does (issue 36): a run stopped at step 12
// resumes to the uninterrupted curve bit for bit; a checkpoint exported to safetensors, imported and
// exported again carries the same tensor bytes (the imported run starts at step 0, the only metadata
// that differs); two data-parallel ranks follow one process on the same global batch. The mixture's
// balance loss is a mean over each rank's own batch (as Switch computes it per device), so the
// two-rank comparison uses aux_coef = 0; with it the curves differ by that term. The third run
// balances by a selection bias (model.bias_rate) instead: the bias is in the checkpoint and the
// safetensors file, and the two ranks move it by the global batch's counts, as one process does;
// its curve differs from the second's, so the bias is exercised.
TEST(Moe, LlamaAndMoeResumeExportImportAndTrainOnTwoRanks) {
  using scaleinv::testing::run_cli;
  using scaleinv::testing::losses_in;
  std::vector<std::vector<double>> curves;
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{"model.kind=\"llama\"", "model.tied=true"},
        std::vector<std::string>{"model.kind=\"moe\"", "model.experts=4", "model.aux_coef=0.0", "param.name=\"mup-moe\""},
        std::vector<std::string>{"model.kind=\"moe\"", "model.experts=4", "model.aux_coef=0.0", "model.bias_rate=0.05",
                                 "param.name=\"mup-moe\""}}) {
    const std::string dir = scaleinv::testing::temp_dir("moe_files");
    const std::string cfg = dir + "/c.toml";
    std::vector<std::string> all = sets;
    all.push_back("train.checkpoint_every=5");
    std::ofstream(cfg) << scaleinv::testing::small_gpt_toml(all);
    const std::string train = "--threads 1 train --quiet --config " + cfg + " --set train.out_dir=";
    ASSERT_EQ(run_cli(train + "'\"" + dir + "/full\"'").code, 0) << sets[0];
    ASSERT_EQ(run_cli(train + "'\"" + dir + "/part\"' --stop-after 12").code, 0);
    ASSERT_EQ(run_cli(train + "'\"" + dir + "/part\"' --resume").code, 0);
    const auto full = losses_in(dir + "/full/metrics.jsonl");
    ASSERT_EQ(full.size(), 20u) << sets[0];
    EXPECT_EQ(losses_in(dir + "/part/metrics.jsonl"), full) << sets[0];
    curves.push_back(full);

    ASSERT_EQ(run_cli("export --checkpoint " + dir + "/full/checkpoint.pt --out " + dir + "/a.safetensors").code, 0);
    ASSERT_EQ(run_cli("import --safetensors " + dir + "/a.safetensors --out " + dir + "/imp/checkpoint.pt").code, 0);
    ASSERT_EQ(run_cli("export --checkpoint " + dir + "/imp/checkpoint.pt --out " + dir + "/b.safetensors").code, 0);
    auto body = [](const std::string& path) {  // the tensor bytes after the JSON header
      std::ifstream in(path, std::ios::binary);
      std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(s[static_cast<size_t>(i)]);
      return s.substr(8 + n);
    };
    const std::string a = body(dir + "/a.safetensors");
    EXPECT_GT(a.size(), 100000u) << sets[0];
    EXPECT_EQ(a, body(dir + "/b.safetensors")) << sets[0];
    const bool biased = curves.size() == 3;
    EXPECT_EQ(scaleinv::testing::slurp(dir + "/a.safetensors").find("blocks.1.mlp.expert_bias") != std::string::npos,
              biased);

    const auto r = run_cli("--threads 1 launch --nproc 2 -- train --quiet --config " + cfg + " --set train.out_dir='\"" +
                           dir + "/dp\"'");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto dp = losses_in(dir + "/dp/metrics.jsonl");
    ASSERT_EQ(dp.size(), 20u);
    // Float32 sums in another order (two half batches, then the all-reduce): ~1e-7 a step, as the
    // dense model's DistTrain test bounds it.
    EXPECT_LT(scaleinv::testing::max_rel_diff(dp, full), 1e-5) << sets[0];
  }
  ASSERT_EQ(curves.size(), 3u);
  EXPECT_GT(scaleinv::testing::max_rel_diff(curves[2], curves[1]), 1e-4);
}
