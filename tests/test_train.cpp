// The trainer: determinism, resume, divergence, equivalence in practice, bad input, real data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "fixtures.h"
#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "engine/train/checkpoint.h"
#include "brain/train/config.h"
#include "engine/train/trainer.h"

using namespace scaleinv;
using scaleinv::testing::losses_in;
using scaleinv::testing::max_rel_diff;
using scaleinv::testing::model_from_checkpoint;
using scaleinv::testing::run_cli;
using scaleinv::testing::small_gpt;
using scaleinv::testing::temp_dir;
using scaleinv::testing::validation_loss;

namespace {


// tests/fixtures/small_gpt.toml at width 128 (head_dim 32), checkpointing every 5 steps.
TrainConfig tiny_config(std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), {"model.width=128", "model.head_dim=32", "train.checkpoint_every=5"});
  return small_gpt(sets);
}

RunOptions in_memory() {
  RunOptions o;
  o.write_files = false;
  o.show_progress = false;
  return o;
}

}  // namespace

TEST(Train, SameSeedSameLossCurveBitForBit) {
  RunResult a = train_run(tiny_config(), in_memory());
  RunResult b = train_run(tiny_config(), in_memory());
  ASSERT_EQ(a.losses.size(), 20u);
  EXPECT_EQ(a.losses, b.losses);  // exact equality, not a tolerance
  RunResult c = train_run(tiny_config({"train.seed=1"}), in_memory());
  EXPECT_NE(a.losses, c.losses);
  EXPECT_LT(a.losses.back(), a.losses.front());  // it learns
}

TEST(Train, ResumeReproducesTheUninterruptedRun) {
  const std::string dir = temp_dir("resume");
  TrainConfig full = tiny_config({"train.out_dir=\"" + dir + "/full\""});
  TrainConfig part = tiny_config({"train.out_dir=\"" + dir + "/part\""});
  RunOptions o;
  o.show_progress = false;
  train_run(full, o);
  RunOptions first = o;
  first.stop_after = 12;  // checkpoints at 5 and 10, and at the stop
  train_run(part, first);
  // Continue from the stop's checkpoint (step 12) to the end.
  RunOptions again = o;
  again.resume = true;
  train_run(part, again);
  const auto lf = losses_in(dir + "/full/metrics.jsonl"), lp = losses_in(dir + "/part/metrics.jsonl");
  ASSERT_EQ(lf.size(), 20u);
  EXPECT_EQ(lf, lp);  // bit for bit
  // Without --resume an existing checkpoint is refused rather than overwritten.
  EXPECT_THROW(train_run(part, o), UserError);
}

// A checkpoint holds the same moments whichever path stepped them: a run trained on the fused Adam
// kernels (the GPU's path; here the CPU kernels of libtorch >= 2.4, inside a FusedAdamScope of
// AlsoCpu) resumes on the per-tensor loop (the CPU's path), and the reverse, and follows the
// uninterrupted loop run. The two paths differ by float32 rounding of the update only (~1e-7
// relative a step, see OptimAdam.FusedPathIsTheLoopsUpdate), which 20 steps of Adam keep far below
// 1e-5 of the loss; a step count or moment lost at the switch changes Adam's bias correction by a
// factor of up to 10 and the loss by far more.
TEST(Train, FusedAndLoopCheckpointsResumeEachOther) {
  if (!compat::has_fused_adam()) GTEST_SKIP() << "no fused Adam kernels in libtorch " << compat::torch_version();
  const std::string dir = temp_dir("resume_fused");
  const std::vector<std::string> adamw = {"optim.kind=\"adamw\"", "optim.weight_decay=0.1"};
  auto cfg = [&](const std::string& out) {
    std::vector<std::string> sets = adamw;
    sets.push_back("train.out_dir=\"" + dir + "/" + out + "\"");
    return tiny_config(sets);
  };
  RunOptions o;
  o.show_progress = false;
  train_run(cfg("loop"), o);
  const auto want = losses_in(dir + "/loop/metrics.jsonl");
  ASSERT_EQ(want.size(), 20u);
  for (const bool fused_first : {true, false}) {
    SCOPED_TRACE(fused_first ? "fused, then the loop" : "the loop, then fused");
    const TrainConfig part = cfg(fused_first ? "fused_loop" : "loop_fused");
    auto leg = [&](bool fused, const RunOptions& ro, int64_t steps) {
      std::optional<compat::FusedAdamScope> scope;
      if (fused) scope.emplace(compat::FusedAdamUse::AlsoCpu);
      const int64_t before = compat::fused_adam_launches();
      train_run(part, ro);
      const int64_t launched = compat::fused_adam_launches() - before;
      if (fused) {
        EXPECT_GE(launched, steps);  // the kernel stepped every step of this leg
      } else {
        EXPECT_EQ(launched, 0);
      }
    };
    RunOptions first = o;
    first.stop_after = 12;
    leg(fused_first, first, 12);
    RunOptions again = o;
    again.resume = true;
    leg(!fused_first, again, 8);
    const auto got = losses_in(part.train.out_dir + "/metrics.jsonl");
    ASSERT_EQ(got.size(), 20u);
    EXPECT_LT(max_rel_diff(got, want), 1e-5);
    EXPECT_NE(got, want);  // (the paths did differ: the comparison is not of one path with itself)
  }
}

TEST(Train, KilledRunResumesWithoutLosingACheckpoint) {
  // kill -9 at an arbitrary moment; --resume redoes only the steps after the last checkpoint, and
  // the resulting curve is the uninterrupted one.
  const std::string dir = temp_dir("kill");
  const std::string common = "train --quiet --config /dev/null --set model.kind=\\\"bigram\\\" "
                             "--set data.source=\\\"markov\\\" --set data.vocab=32 --set model.width=128 "
                             "--set model.seq_len=16 --set train.steps=300 --set train.log_every=1 --set train.checkpoint_every=7 ";
  ASSERT_EQ(run_cli(common + "--set train.out_dir=\\\"" + dir + "/full\\\"").code, 0);
  const std::string cmd = std::string(SCALEINV_BIN) + " " + common + "--set train.out_dir=\\\"" + dir +
                          "/killed\\\" >/dev/null 2>&1 & pid=$!; "
                          "while [ \"$(wc -l < " + dir + "/killed/metrics.jsonl 2>/dev/null || echo 0)\" -lt 60 ]; "
                          "do sleep 0.05; done; kill -9 $pid; wait $pid";
  std::system(cmd.c_str());
  ASSERT_FALSE(std::filesystem::exists(dir + "/killed/run.json")) << "the run finished before the kill";
  auto r = run_cli(common + "--resume --set train.out_dir=\\\"" + dir + "/killed\\\"");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(losses_in(dir + "/full/metrics.jsonl"), losses_in(dir + "/killed/metrics.jsonl"));
}

TEST(Train, CheckpointCarriesTheTableAndLoadingAppliesNothingTwice) {
  const std::string dir = temp_dir("ckpt");
  TrainConfig cfg = tiny_config({"train.out_dir=\"" + dir + "\"", "train.steps=5", "param.name=\"ntk\""});
  RunOptions o;
  o.show_progress = false;
  train_run(cfg, o);
  CheckpointMeta meta = read_checkpoint_meta(dir + "/checkpoint.pt");
  EXPECT_EQ(meta.step, 5);
  EXPECT_EQ(meta.table, preset("ntk"));
  ScaleContext ctx{meta.table, OptFamily::Adam, cfg.model.width, cfg.model.depth};
  torch::manual_seed(123);  // a different init, overwritten by the load
  auto m1 = build_model(meta.config.model, ctx, meta.config.hp);
  load_checkpoint(dir + "/checkpoint.pt", *m1, nullptr);
  auto m2 = build_model(meta.config.model, ctx, meta.config.hp);
  load_checkpoint(dir + "/checkpoint.pt", *m2, nullptr);
  load_checkpoint(dir + "/checkpoint.pt", *m2, nullptr);  // twice: still the same model
  torch::Tensor x = torch::randint(0, 32, {2, 16}, torch::kLong);
  torch::NoGradGuard ng;
  EXPECT_TRUE(torch::equal(m1->forward(x), m2->forward(x)));
}

// The deferred loss read-back (the default on one CUDA process, RunOptions::loss_readback) checked
// on the CPU, where both modes run the same kernels. Read-backs at logged (6), checkpointed (8) and
// evaluated (12) steps. A run that trains through: the same losses bit for bit, the same metrics
// rows but for the clock, the same checkpoint, every step reported to on_step. A run whose SGD
// warm-up sends it to NaN mid-run (step 14 on the machines tried), between two read-backs: it ends
// as diverged at the same step with the same rows, and the updates the deferred mode ran past the
// NaN leave no trace (its last checkpoint is the one before the divergence, as without deferral).
TEST(Train, DeferredLossReadBackIsTheSameRun) {
  auto rows = [](const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("elapsed_s");
      j.erase("items_per_s");
      out.push_back(j);
    }
    return out;
  };
  for (const bool diverging : {false, true}) {
    SCOPED_TRACE(diverging ? "diverging run" : "run that trains through");
    std::vector<std::string> sets = {"train.steps=24", "train.log_every=6", "train.checkpoint_every=8",
                                     "train.eval_every=12"};
    if (diverging) sets.insert(sets.end(), {"optim.kind=\"sgd\"", "optim.lr=10", "optim.warmup_steps=20"});
    RunResult out[2];
    std::string dir[2];
    std::vector<int64_t> calls[2];
    for (int k = 0; k < 2; ++k) {
      dir[k] = temp_dir(fmt::format("deferred_{}_{}", diverging, k));
      std::vector<std::string> s = sets;
      s.push_back("train.out_dir=\"" + dir[k] + "\"");
      RunOptions o;
      o.show_progress = false;
      o.data_parallel = false;
      o.loss_readback = k == 0 ? RunOptions::LossReadBack::EveryStep : RunOptions::LossReadBack::AtReports;
      o.on_step = [&calls, k](int64_t done) { calls[k].push_back(done); };
      out[k] = train_run(small_gpt(s), o);
    }
    EXPECT_EQ(out[1].losses, out[0].losses);
    EXPECT_EQ(out[1].diverged, out[0].diverged);
    EXPECT_EQ(out[1].diverged_step, out[0].diverged_step);
    EXPECT_EQ(out[1].steps_done, out[0].steps_done);
    EXPECT_EQ(out[1].final_loss, out[0].final_loss);
    EXPECT_EQ(std::isnan(out[1].final_val_loss), std::isnan(out[0].final_val_loss));
    if (!std::isnan(out[0].final_val_loss)) {
      EXPECT_EQ(out[1].final_val_loss, out[0].final_val_loss);
    }
    EXPECT_EQ(rows(dir[1] + "/metrics.jsonl"), rows(dir[0] + "/metrics.jsonl"));
    const CheckpointMeta a = read_checkpoint_meta(dir[0] + "/checkpoint.pt"),
                         b = read_checkpoint_meta(dir[1] + "/checkpoint.pt");
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.losses, a.losses);
    const TrainConfig cfg = small_gpt(sets);
    ScaleContext ctx{a.table, optimizer_family(cfg.optim.kind), cfg.model.width, cfg.model.depth};
    auto ma = build_model(cfg.model, ctx, cfg.hp), mb = build_model(cfg.model, ctx, cfg.hp);
    load_checkpoint(dir[0] + "/checkpoint.pt", *ma, nullptr);
    load_checkpoint(dir[1] + "/checkpoint.pt", *mb, nullptr);
    const auto pa = ma->tagged_parameters(), pb = mb->tagged_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].tensor, pb[i].tensor)) << pa[i].name;
    if (diverging) {
      ASSERT_TRUE(out[0].diverged) << "the SGD warm-up did not diverge: pick a larger optim.lr";
      EXPECT_GT(out[0].diverged_step, 0);
      EXPECT_LT(a.step, out[0].diverged_step + 1);  // no checkpoint at or after the NaN step
      // The deferred run ran past the NaN up to its next read-back; the other stopped at it.
      EXPECT_GE(calls[1].size(), calls[0].size());
    } else {
      EXPECT_FALSE(out[0].diverged);
      EXPECT_EQ(a.step, 24);
      ASSERT_EQ(calls[1].size(), 24u);
      EXPECT_EQ(calls[1], calls[0]);
    }
  }
}

TEST(Train, DivergenceIsRecordedNotACrash) {
  const std::string dir = temp_dir("diverge");
  auto r = run_cli("train --quiet --config /dev/null --set model.kind=\\\"bigram\\\" --set data.source=\\\"markov\\\" "
                   "--set data.vocab=16 --set optim.kind=\\\"sgd\\\" --set optim.lr=1e6 --set param.name=\\\"standard\\\" "
                   "--set train.steps=50 --set train.out_dir=\\\"" + dir + "\\\"");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("diverged at step"), std::string::npos) << r.err;
  std::ifstream in(dir + "/run.json");
  nlohmann::json j;
  in >> j;
  EXPECT_TRUE(j.at("diverged").get<bool>());
  EXPECT_GE(j.at("diverged_step").get<int64_t>(), 0);
}

// seed 000 1.2.2 in practice: equivalent parameterizations train identically. Momentumless Adam
// (beta1 = 0) with the table's epsilon exponents, width 256 (m = 4), 20 steps.
TEST(TrainEquivalence, SpNtkAndMupMfUnderMomentumlessAdam) {
  for (auto [p, q] : {std::pair{"sp", "ntk"}, std::pair{"mup", "mf"}}) {
    auto cfg = [&](const char* name) {
      return tiny_config({"model.width=256", "optim.beta1=0.0", "optim.eps=1e-6", std::string("param.name=\"") + name + "\""});
    };
    RunResult a = train_run(cfg(p), in_memory()), b = train_run(cfg(q), in_memory());
    ASSERT_EQ(a.losses.size(), 20u);
    EXPECT_LT(max_rel_diff(a.losses, b.losses), 1e-4) << p << " vs " << q;
    EXPECT_NE(a.losses.front(), a.losses.back());
  }
}

TEST(TrainEquivalence, SpNtkUnderSgdAfterTheSgdShift) {
  // The presets' SGD columns carry the 2*theta shift (brain/param/presets.cpp).
  auto cfg = [&](const char* name) {
    return tiny_config({"model.width=256", "optim.kind=\"sgd\"", "optim.lr=0.1", std::string("param.name=\"") + name + "\""});
  };
  for (auto [p, q] : {std::pair{"sp", "ntk"}, std::pair{"mup", "mf"}}) {
    RunResult a = train_run(cfg(p), in_memory()), b = train_run(cfg(q), in_memory());
    EXPECT_LT(max_rel_diff(a.losses, b.losses), 1e-4) << p << " vs " << q;
  }
}

TEST(TrainEquivalence, NonEquivalentParameterizationsDiffer) {
  // The check can fail: sp and mup are not in one class (seed 000 Table 1, readout a+b differs).
  auto cfg = [&](const char* name) {
    return tiny_config({"model.width=256", "optim.beta1=0.0", std::string("param.name=\"") + name + "\""});
  };
  RunResult a = train_run(cfg("sp"), in_memory()), b = train_run(cfg("mup"), in_memory());
  EXPECT_GT(max_rel_diff(a.losses, b.losses), 1e-3);
}

TEST(TrainData, GptOnKjvBeatsTheUnigramEntropy) {
  const std::string dir = temp_dir("kjv");
  setenv("SCALEINV_DATA_DIR", dir.c_str(), 1);
  // The fixture's GPT on KJV bytes (256 tokens, 32-byte context), AdamW, 150 steps of 16.
  TrainConfig cfg = small_gpt({"model.vocab=256", "model.seq_len=32", "optim.kind=\"adamw\"", "data.source=\"kjv\"",
                               "train.steps=150", "train.batch_size=16", "train.eval_batches=8"});
  RunResult s = train_run(cfg, in_memory());
  // English bytes: the unigram entropy of the KJV is ~3.0 nats/byte (measured by the data module).
  EXPECT_GT(s.unigram_entropy, 2.5);
  EXPECT_LT(s.unigram_entropy, 3.5);
  // "Well below": at least half a nat per byte better than any model that ignores context.
  EXPECT_LT(s.final_val_loss, s.unigram_entropy - 0.5) << "val " << s.final_val_loss;
}

TEST(TrainBadInput, OneLineMessagesAndExitCode2) {
  const std::string dir = temp_dir("badinput");
  std::ofstream(dir + "/wrongtype.toml") << "[model]\nwidth = \"wide\"\n";
  std::ofstream(dir + "/heads.toml") << "[model]\nkind = \"gpt\"\nwidth = 100\nhead_dim = 16\n[data]\nsource=\"markov\"\n";
  std::ofstream(dir + "/unknown.toml") << "[model]\nkind = \"transformerXL\"\n";
  std::ofstream(dir + "/nodata.toml") << "[data]\nsource = \"text\"\npath = \"/nonexistent/corpus.txt\"\n";
  std::ofstream(dir + "/typo.toml") << "[optim]\nlearning_rate = 0.1\n";
  struct Case { std::string args, must_contain; };
  const Case cases[] = {
      {"--config " + dir + "/wrongtype.toml", "model.width"},
      {"--config " + dir + "/heads.toml", "model.width"},
      {"--config " + dir + "/unknown.toml", "model.kind"},
      {"--config " + dir + "/nodata.toml", "/nonexistent/corpus.txt"},
      {"--config " + dir + "/typo.toml", "optim.learning_rate"},
      {"--config " + dir + "/missing.toml", "missing.toml"},
      {"--config /dev/null --set param.name=\\\"nosuch\\\"", "nosuch"},
  };
  for (const Case& c : cases) {
    auto r = run_cli("train --quiet " + c.args + " --set train.out_dir=\\\"" + dir + "/run\\\"");
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.must_contain), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("fix:"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// `sample` rebuilds the model from the checkpoint's own table. At width 128 under mup (m = 2) the
// multipliers differ from 1, so a model rebuilt with other ones computes other logits. Checked
// against a model built here from the training config (resolve_param, not the checkpoint's
// table) with the checkpoint's weights: it reproduces the run's final validation loss (the eval
// the trainer did; another thread count may reassociate sgemm: 1e-5 relative), while the same
// weights under `standard` (multipliers 1) miss it by far more; and the CLI's greedy continuation
// is this model's argmax continuation, byte for byte (vocab 256: every byte, NUL included).
TEST(TrainCli, TrainThenSampleAppliesTheTrainingMultipliers) {
  const std::string dir = temp_dir("sample");
  const std::vector<std::string> sets = {"data.source=\"markov\"", "data.vocab=256", "model.seq_len=16",
                                         "model.width=128", "param.name=\"mup\"", "train.steps=30",
                                         "train.out_dir=\"" + dir + "\""};
  std::string args;
  for (const auto& s : sets) args += " --set '" + s + "'";  // (run_cli goes through the shell)
  auto r = run_cli("train --quiet --config /dev/null" + args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("run summary"), std::string::npos);
  r = run_cli("sample --checkpoint " + dir + "/checkpoint.pt --prompt abc --tokens 20 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;

  const TrainConfig cfg = load_train_config("", sets);
  const std::string ckpt = dir + "/checkpoint.pt";
  const double recorded = nlohmann::json::parse(scaleinv::testing::slurp(dir + "/run.json")).at("final_val_loss").get<double>();
  auto model = model_from_checkpoint(cfg, resolve_param(cfg), ckpt);
  EXPECT_NEAR(validation_loss(*model, cfg), recorded, 1e-5 * recorded);
  EXPECT_GT(std::abs(validation_loss(*model_from_checkpoint(cfg, preset("standard"), ckpt), cfg) - recorded), 1e-3);

  std::vector<int64_t> ids = {'a', 'b', 'c'};
  std::string want = "abc";
  {
    torch::NoGradGuard ng;
    for (int i = 0; i < 20; ++i) {
      const auto ctx = std::min<size_t>(ids.size(), static_cast<size_t>(cfg.model.seq_len));
      const torch::Tensor x = torch::tensor(std::vector<int64_t>(ids.end() - static_cast<std::ptrdiff_t>(ctx), ids.end())).unsqueeze(0);
      ids.push_back(model->forward(x).index({0, -1}).argmax().item<int64_t>());
      want.push_back(static_cast<char>(ids.back()));
    }
  }
  EXPECT_EQ(r.out, want + "\n");
  // A vanishing temperature sharpens sampling to that same continuation (the logits are shifted
  // to a maximum of 0 first; unshifted, 1e-320 turned them into inf and the softmax into NaN).
  for (const char* t : {"1e-300", "1e-320"}) {
    const auto cold = run_cli("sample --checkpoint " + ckpt + " --prompt abc --tokens 20 --temperature " + t);
    ASSERT_EQ(cold.code, 0) << cold.err;
    EXPECT_EQ(cold.out, r.out) << "temperature " << t;
  }
}

// Issue 36: a tied Llama (one tensor for the embedding and the readout, the readout's multiplier and
// init ratio in the forward; engine/models/zoo.h tied_logits) trains to the loss of the untied one at the
// base shape, where every multiplier of mup is 1. Four seeds each; the two means may differ by no
// more than Welch's 95% bound on the difference (t_{0.975, 6} = 2.447: 4 + 4 seeds, equal sizes), and
// both must have learned (below the chain's unigram entropy).
TEST(Train, TiedLlamaTrainsToTheUntiedLossAtTheBaseShape) {
  auto losses = [](bool tied) {
    std::vector<double> v;
    double entropy = 0;
    for (int seed = 0; seed < 4; ++seed) {
      const RunResult s = train_run(
          small_gpt({"model.kind=\"llama\"", fmt::format("model.tied={}", tied), fmt::format("train.seed={}", seed),
                     "train.steps=150", "train.eval_batches=8"}),
          in_memory());
      v.push_back(s.final_val_loss);
      entropy = s.unigram_entropy;
    }
    return std::make_pair(v, entropy);
  };
  auto mean_var = [](const std::vector<double>& v) {
    double m = 0, q = 0;
    for (double x : v) m += x / static_cast<double>(v.size());
    for (double x : v) q += (x - m) * (x - m) / static_cast<double>(v.size() - 1);
    return std::make_pair(m, q);
  };
  const auto [tied, entropy] = losses(true);
  const auto [untied, entropy2] = losses(false);
  const auto [mt, vt] = mean_var(tied);
  const auto [mu, vu] = mean_var(untied);
  const double bound = 2.447 * std::sqrt(vt / 4 + vu / 4);
  std::printf("tied %.4f, untied %.4f (4 seeds each); |difference| bound %.4f; unigram entropy %.4f\n", mt, mu, bound,
              entropy);
  EXPECT_LE(std::fabs(mt - mu), bound) << "tied " << mt << " untied " << mu;
  EXPECT_LT(mt, entropy);
  EXPECT_LT(mu, entropy2);
}
