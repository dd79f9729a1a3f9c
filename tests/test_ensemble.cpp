// Batched ensembles (engine/train/ensemble.h): every member must reproduce its own separate run.
//
// Tolerance: the batched path computes the same sums as the single model but through bmm instead
// of sgemm (and one cross-entropy reduction per member), so the two differ by float32
// reassociation, a relative ~1e-7 per op at these sizes. Adam normalises every update, so such
// a difference in the gradient moves each parameter by at most ~lr * 1e-7 / eps-scale per step and
// the loss curves separate slowly; over 15-20 steps a relative 1e-4 is two orders of magnitude
// above what reassociation produces and two below any real difference (a wrong LR or a wrong
// batch moves the loss by > 1e-2 in these runs).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "engine/runtime/torch_compat.h"
#include "fixtures.h"
#include "engine/train/ensemble.h"
#include "engine/train/trainer.h"

using namespace scaleinv;
using scaleinv::testing::small_gpt;

namespace {

// The batched path itself (Auto runs members one by one on a CPU).
EnsembleOptions batched_opts() {
  EnsembleOptions o;
  o.batching = Batching::On;
  return o;
}


// tests/fixtures/small_gpt.toml under AdamW (weight decay 0.1), 15 steps, evaluated every 5.
TrainConfig cfg(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"optim.kind=\"adamw\"", "optim.weight_decay=0.1", "train.steps=15", "train.eval_every=5",
                             "train.log_every=10"});
  return small_gpt(sets);
}

std::vector<RunResult> separate(const std::vector<TrainConfig>& ms) {
  RunOptions ro;
  ro.write_files = false;
  ro.show_progress = false;
  ro.data_parallel = false;
  std::vector<RunResult> out;
  for (const auto& m : ms) out.push_back(train_run(m, ro));
  return out;
}

void expect_same_runs(const std::vector<RunResult>& a, const std::vector<RunResult>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t e = 0; e < a.size(); ++e) {
    SCOPED_TRACE("member " + std::to_string(e));
    EXPECT_EQ(a[e].diverged, b[e].diverged);
    EXPECT_EQ(a[e].diverged_step, b[e].diverged_step);
    ASSERT_EQ(a[e].losses.size(), b[e].losses.size());
    for (size_t t = 0; t < a[e].losses.size(); ++t)
      EXPECT_NEAR(a[e].losses[t], b[e].losses[t], rel * std::abs(b[e].losses[t])) << "step " << t;
    if (std::isfinite(b[e].final_val_loss)) {
      EXPECT_NEAR(a[e].final_val_loss, b[e].final_val_loss, rel * 10);
    }
    EXPECT_EQ(a[e].params, b[e].params);
  }
}

}  // namespace

TEST(Ensemble, GptMembersReproduceSeparateRuns) {
  // Different LRs, weight decays, init seeds and data seeds in one ensemble.
  std::vector<TrainConfig> ms = {cfg({"optim.lr=0.003"}),
                                 cfg({"optim.lr=0.01", "train.seed=1"}),
                                 cfg({"optim.lr=0.03", "optim.weight_decay=0.0", "data.seed=7"})};
  ASSERT_TRUE(ensemble_supported(ms[0]));
  const auto batched = train_ensemble(ms, batched_opts());
  const auto ref = separate(ms);
  expect_same_runs(batched, ref, 1e-4);
  // The members really differ (the comparison above is not vacuous).
  EXPECT_GT(std::abs(ref[0].losses.back() - ref[2].losses.back()), 1e-2);
}

// The same with the fused AdamW kernels (CUDA's path; on the CPU of a libtorch >= 2.4 build inside
// a compat::FusedAdamScope of AlsoCpu): each member's slices of the stacked tensors step in the set
// of that member's LR and decay, and reproduce the member's separate (fused) run to the tolerance
// above.
TEST(Ensemble, FusedAdamMembersReproduceSeparateRuns) {
  if (!compat::has_fused_adam()) GTEST_SKIP() << "no fused Adam kernels in libtorch " << compat::torch_version();
  const compat::FusedAdamScope on_cpu(compat::FusedAdamUse::AlsoCpu);
  std::vector<TrainConfig> ms = {cfg({"optim.lr=0.003"}),
                                 cfg({"optim.lr=0.01", "train.seed=1"}),
                                 cfg({"optim.lr=0.03", "optim.weight_decay=0.0", "data.seed=7"})};
  const int64_t before = compat::fused_adam_launches();
  const auto batched = train_ensemble(ms, batched_opts());
  // At least one kernel per member and step (three LRs: three sets or more each step).
  EXPECT_GE(compat::fused_adam_launches() - before, 15 * 3);
  const auto ref = separate(ms);
  expect_same_runs(batched, ref, 1e-4);
  EXPECT_GT(std::abs(ref[0].losses.back() - ref[2].losses.back()), 1e-2);
}

TEST(Ensemble, AutoBatchesOnlyWhereItPays) {
  // Auto: one train_run per member on a CPU (batching measured slower there), so the results are
  // the separate runs' bit for bit; a CUDA config would batch.
  std::vector<TrainConfig> ms = {cfg({"optim.lr=0.003"}), cfg({"optim.lr=0.01", "train.seed=1"})};
  EXPECT_FALSE(batching_pays(ms[0]));
  EXPECT_TRUE(batching_pays(cfg({"train.device=\"cuda\""})));
  EnsembleOptions o;
  std::vector<int64_t> seen;  // member-steps reported after each step
  o.on_step = [&](int64_t n) { seen.push_back(n); };
  const auto autod = train_ensemble(ms, o);
  const auto ref = separate(ms);
  ASSERT_EQ(autod.size(), ref.size());
  for (size_t e = 0; e < ref.size(); ++e) EXPECT_EQ(autod[e].losses, ref[e].losses) << "member " << e;
  // One report per step of every member, counting up by one to the members' total.
  const int64_t total = ms[0].train.steps + ms[1].train.steps;
  ASSERT_EQ(static_cast<int64_t>(seen.size()), total);
  for (int64_t i = 0; i < total; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i + 1);
}

TEST(Ensemble, SgdMomentumBigramAndSignDescent) {
  const char* bigram = R"(
[model]
kind = "bigram"
width = 128
depth = 2
activation = "relu"
vocab = 32
[param]
name = "sp"
[optim]
kind = "sgd"
momentum = 0.9
lr = 0.1
[data]
source = "markov"
vocab = 32
markov_length = 20000
[train]
steps = 20
batch_size = 8
eval_every = 0
eval_batches = 2
)";
  std::vector<TrainConfig> ms = {train_config_from_toml_text(bigram, "test config", {"optim.lr=0.05"}), train_config_from_toml_text(bigram, "test config", {"optim.lr=0.2", "train.seed=3"})};
  expect_same_runs(train_ensemble(ms, batched_opts()), separate(ms), 1e-4);
  std::vector<TrainConfig> sg = {train_config_from_toml_text(bigram, "test config", {"optim.kind=\"sign\"", "optim.lr=0.001"}),
                                 train_config_from_toml_text(bigram, "test config", {"optim.kind=\"sign\"", "optim.lr=0.004"})};
  expect_same_runs(train_ensemble(sg, batched_opts()), separate(sg), 1e-4);
}

TEST(Ensemble, DivergedMemberIsRecordedAndOthersGoOn) {
  // Plain SGD at a huge LR blows up within a few steps; its neighbours must not notice.
  std::vector<TrainConfig> ms = {cfg({"optim.kind=\"sgd\"", "optim.lr=0.5", "param.name=\"sp\""}),
                                 cfg({"optim.kind=\"sgd\"", "optim.lr=1e6", "param.name=\"sp\""}),
                                 cfg({"optim.kind=\"sgd\"", "optim.lr=1.0", "param.name=\"sp\""})};
  const auto batched = train_ensemble(ms, batched_opts());
  const auto ref = separate(ms);
  ASSERT_TRUE(ref[1].diverged);
  EXPECT_FALSE(ref[0].diverged);
  expect_same_runs(batched, ref, 1e-4);
  EXPECT_EQ(batched[0].steps_done, 15);
  EXPECT_EQ(batched[1].steps_done, ref[1].steps_done);
}

TEST(Ensemble, LossReadBackIntervalChangesNothing) {
  // CUDA reads the members' losses back every log_every steps, the CPU after every step; the
  // divergence mask acts on the device at its step either way, so every interval (here 1, 4 and
  // 7 on the CPU, through a member that diverges in between read-backs) gives the same runs, bit
  // for bit: same losses, same diverged step, same final validation loss.
  std::vector<TrainConfig> ms = {cfg({"optim.kind=\"sgd\"", "optim.lr=0.5", "param.name=\"sp\""}),
                                 cfg({"optim.kind=\"sgd\"", "optim.lr=1e6", "param.name=\"sp\""}),
                                 cfg({"optim.kind=\"sgd\"", "optim.lr=1.0", "param.name=\"sp\""})};
  EnsembleOptions o = batched_opts();
  o.readback_every = 1;
  const auto each = train_ensemble(ms, o);
  ASSERT_TRUE(each[1].diverged);
  ASSERT_GT(each[1].diverged_step, 0);  // it diverges after the first read-back, not at step 0
  for (int64_t every : {4, 7}) {
    SCOPED_TRACE("every " + std::to_string(every));
    o.readback_every = every;
    const auto r = train_ensemble(ms, o);
    expect_same_runs(r, each, 0.0);
    for (size_t e = 0; e < r.size(); ++e) {
      EXPECT_EQ(r[e].steps_done, each[e].steps_done);
      EXPECT_EQ(std::isnan(r[e].final_val_loss), std::isnan(each[e].final_val_loss));
      if (!std::isnan(each[e].final_val_loss)) {
        EXPECT_EQ(r[e].final_val_loss, each[e].final_val_loss);
      }
    }
  }
}

TEST(Ensemble, MembersMustShareShapes) {
  std::vector<TrainConfig> ms = {cfg({}), cfg({"model.width=128"})};
  EXPECT_NE(ensemble_key(ms[0]), ensemble_key(ms[1]));
  EXPECT_EQ(ensemble_key(ms[0]), ensemble_key(cfg({"optim.lr=0.5", "train.seed=9", "data.seed=2"})));
  EXPECT_THROW(train_ensemble(ms, batched_opts()), std::invalid_argument);
  // Adafactor and gradient clipping take the one-by-one path, with the same results.
  EXPECT_FALSE(ensemble_supported(cfg({"optim.kind=\"adafactor\"", "optim.eps=1e-15"})));
  EXPECT_FALSE(ensemble_supported(cfg({"optim.clip_grad_norm=1.0"})));
  EXPECT_FALSE(ensemble_supported(cfg({"train.precision=\"e4m3\""})));
  EXPECT_FALSE(ensemble_supported(cfg({"param.name=\"u-mup\""})));
  EXPECT_TRUE(ensemble_supported(cfg({"param.name=\"depth-mup\""})));
}
