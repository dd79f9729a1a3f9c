// The GPU paths (issue 14), checked against the CPU and against each other. Every test here needs
// a CUDA build on a machine with a GPU (scripts/build_cuda.sh --tests; bench/gpu_check.sh runs
// them) and is skipped elsewhere, so the CPU suite and CI only compile them.
//
// Tolerances. TF32 is switched off wherever a CUDA result is compared with the CPU, so both sides
// compute in fp32 and differ only by float reassociation (other kernels, other summation orders):
// a relative ~1e-7 per operation at these sizes. As in test_ensemble.cpp, Adam normalises every
// update, so such differences separate 20-step loss curves slowly; a relative 1e-4 is two orders
// above what reassociation produces and two below a real difference (a wrong LR, batch or mask
// moves these losses by > 1e-2). Where TF32 stays on (`demo --device cuda`, as a user runs it),
// its 10-bit mantissa rounds each product to a relative 2^-11 = 4.9e-4, and losses are compared to
// 1e-2 (20 units of that rounding). bf16 (8-bit mantissa, 2^-8 = 3.9e-3) is compared to 5e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/sqlite_db.h"
#include "engine/runtime/torch_compat.h"
#include "engine/data/data.h"
#include "engine/dist/c10d_compat.h"
#include "fixtures.h"
#include "engine/models/expert_dispatch.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"
#include "engine/sweep/sweep_runner.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/train/config.h"
#include "engine/train/ensemble.h"
#include "engine/train/trainer.h"

using namespace scaleinv;
using scaleinv::testing::diff_over_largest;
using scaleinv::testing::losses_in;
using scaleinv::testing::max_rel_diff;
using scaleinv::testing::user_error_of;
using scaleinv::testing::model_from_checkpoint;
using scaleinv::testing::packed_attention_layers;
using scaleinv::testing::run_cli;
using scaleinv::testing::ScopedEnv;
using scaleinv::testing::slurp;
using scaleinv::testing::small_gpt;
using scaleinv::testing::small_gpt_toml;
using scaleinv::testing::temp_dir;
using scaleinv::testing::train_args;
using scaleinv::testing::validation_loss;

namespace {

#define REQUIRE_GPU()                                                                           \
  if (!torch::cuda::is_available())                                                            \
  GTEST_SKIP() << "no CUDA device here (a CUDA build on a GPU machine runs these: bench/gpu_check.sh)"

// One process, nothing on disk, no bar.
RunOptions in_memory() {
  RunOptions ro;
  ro.write_files = false;
  ro.show_progress = false;
  ro.data_parallel = false;
  return ro;
}

RunResult run(const TrainConfig& c) {
  return train_run(c, in_memory());
}

// small_gpt under AdamW for 20 steps on `device`, TF32 off (so CUDA computes in fp32 as the CPU does).
TrainConfig gpt_on(const std::string& device, std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), {"optim.kind=\"adamw\"", "optim.weight_decay=0.1", "train.eval_every=10",
                             fmt::format("train.device=\"{}\"", device), "train.tf32=false"});
  return small_gpt(sets);
}

// Mean of the first 5 losses minus the mean of the last 5: how far a curve fell.
double fell(const std::vector<double>& l) {
  if (l.size() < 10) return std::nan("");
  double a = 0, b = 0;
  for (size_t i = 0; i < 5; ++i) a += l[i], b += l[l.size() - 1 - i];
  return (a - b) / 5;
}

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                                 double scale) {
  auto s = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (causal) {
    const int64_t t = q.size(-2);
    s = s.masked_fill(torch::ones({t, t}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(s, -1), v);
}

}  // namespace

TEST(CudaKernels, FusedAttentionIsTheExplicitProduct) {
  REQUIRE_GPU();
  // libtorch >= 2.1 takes at::scaled_dot_product_attention on CUDA tensors (docs/gpu.md).
  EXPECT_TRUE(compat::has_fused_attention()) << "libtorch " << compat::torch_version();
  compat::set_tf32(false);
  torch::manual_seed(0);
  const auto q = torch::randn({2, 4, 32, 16}), k = torch::randn({2, 4, 32, 16}), v = torch::randn({2, 4, 32, 16});
  const torch::Device gpu(torch::kCUDA);
  for (bool causal : {true, false})
    for (double scale : {1.0 / 16, 1.0 / 4}) {  // the table's 1/d and the standard 1/sqrt(d)
      torch::Tensor mask;
      const auto got = compat::attention(q.to(gpu), k.to(gpu), v.to(gpu), causal, scale, &mask).cpu();
      const auto want = explicit_attention(q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64), causal,
                                           scale);
      // Outputs are averages of unit-variance values: fp32's 1e-7 per op over 32-term sums.
      EXPECT_LT((got.to(torch::kFloat64) - want).abs().max().item<double>(), 1e-5)
          << "causal " << causal << " scale " << scale;
    }
}

// Model::move_to on CUDA packs every attention's W_q, W_k, W_v into one buffer (engine/models/packed_rows.h),
// read in place by one GEMM each step; the loss and every gradient are the CPU's unpacked model's
// (fp32, TF32 off: reassociation only, 1e-5 relative as in FusedAttentionIsTheExplicitProduct),
// and under bf16 autocast the backward gives fp32 gradients within bf16's 5e-2.
TEST(CudaKernels, MoveToPacksTheAttentionAndGivesTheCpusLossAndGradients) {
  REQUIRE_GPU();
  compat::set_tf32(false);
  const TrainConfig c = small_gpt({"model.width=128"});
  const ParamTable table = resolve_param(c);
  const ScaleContext ctx{table, optimizer_family(c.optim.kind), c.model.width, c.model.depth};
  auto cpu = build_model_seeded(3, c.model, ctx, c.hp), gpu = build_model_seeded(3, c.model, ctx, c.hp);
  gpu->move_to(torch::Device(torch::kCUDA));
  EXPECT_EQ(packed_attention_layers(*gpu), c.model.depth);
  auto gen = at::detail::createCPUGenerator(11);
  const torch::Tensor x = torch::randint(c.model.vocab, {4, c.model.seq_len}, gen, torch::kLong);
  const torch::Tensor y = torch::randint(c.model.vocab, {4, c.model.seq_len}, gen, torch::kLong);
  const torch::Tensor lc = cpu->loss(x, y);
  lc.backward();
  for (bool bf16 : {false, true}) {
    gpu->zero_grad();
    torch::Tensor lg;
    {
      compat::CudaAutocast ac(bf16);
      lg = gpu->loss(x.cuda(), y.cuda());
    }
    lg.backward();
    const double tol = bf16 ? 5e-2 : 1e-5;
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), tol * lc.item<double>()) << "bf16 " << bf16;
    const auto pc = cpu->tagged_parameters(), pg = gpu->tagged_parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      ASSERT_TRUE(pg[i].tensor.grad().defined()) << pg[i].name;
      EXPECT_EQ(pg[i].tensor.grad().scalar_type(), torch::kFloat32) << pg[i].name;
      const torch::Tensor gc = pc[i].tensor.grad(), gg = pg[i].tensor.grad().cpu();
      // Relative to the gradient's largest entry (a zero-initialised W_q's gradient has many tiny ones).
      EXPECT_LT(diff_over_largest(gg, gc), bf16 ? 5e-2 : 1e-4)
          << pg[i].name << " bf16 " << bf16;
    }
  }
}

// The mixture's experts on CUDA run batched over zero-padded slices (engine/models/expert_dispatch.h), on
// the CPU one matmul per expert: the same rows and gradients (fp32, TF32 off: reassociation only, the
// 1e-5 of FusedAttentionIsTheExplicitProduct, relative to the largest entry), uneven counts and an
// expert given no token included.
TEST(CudaKernels, PaddedExpertsOnTheGpuAreTheCpusLoopedExperts) {
  REQUIRE_GPU();
  compat::set_tf32(false);
  torch::manual_seed(4);
  const std::vector<int64_t> per = {5, 0, 17, 2, 9, 1, 0, 30};
  const int64_t E = static_cast<int64_t>(per.size()), d = 32, n = 48;
  const torch::Tensor counts = torch::tensor(per, torch::kInt64);
  const torch::Tensor expert_of = torch::repeat_interleave(torch::arange(E, torch::kInt64), counts);
  const torch::Tensor xs = torch::randn({expert_of.size(0), d});
  const torch::Tensor gate = torch::randn({E, n, d}) / 6, up = torch::randn({E, n, d}) / 6, down = torch::randn({E, d, n}) / 7;
  const torch::Tensor cot = torch::randn({expert_of.size(0), d});
  auto run = [&](const torch::Device& dev, bool padded) {
    std::vector<torch::Tensor> leaves;
    // detach(): on the CPU to() returns the tensor itself, whose requires_grad the first pass would
    // set, making the GPU pass's copies non-leaves with no .grad (the H200 run of 2026-11-28).
    for (const auto& t : {xs, gate, up, down}) leaves.push_back(t.to(dev).detach().requires_grad_(true));
    const ExpertWeights w{leaves[1], leaves[2], leaves[3], 0.8};
    const torch::Tensor y = padded ? experts_padded(leaves[0], expert_of.to(dev), counts.to(dev), 30, w)
                                   : experts_looped(leaves[0], counts, w);
    (y * cot.to(dev)).sum().backward();
    std::vector<torch::Tensor> out = {y.detach().cpu()};
    for (const auto& l : leaves) out.push_back(l.grad().cpu());
    return out;
  };
  const auto cpu = run(torch::Device(torch::kCPU), false), gpu = run(torch::Device(torch::kCUDA), true);
  const char* what[] = {"output", "d xs", "d gate", "d up", "d down"};
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(diff_over_largest(gpu[i], cpu[i]), 1e-5) << what[i];
}

TEST(CudaKernels, FusedAdamAndAdamwAreTheStepsTheirHeaderStates) {
  REQUIRE_GPU();
  const torch::Device gpu(torch::kCUDA);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, wd = 0.1, eps = 1e-8;
  for (auto decay : {compat::WeightDecay::Decoupled, compat::WeightDecay::Coupled}) {
    SCOPED_TRACE(decay == compat::WeightDecay::Decoupled ? "AdamW" : "Adam + L2");
    torch::manual_seed(1);
    std::vector<torch::Tensor> p, g, m, v, p64, m64, v64;
    for (auto shape : {std::vector<int64_t>{64, 32}, std::vector<int64_t>{32}, std::vector<int64_t>{3, 5, 7}}) {
      p.push_back(torch::randn(shape).to(gpu));
      p64.push_back(p.back().cpu().to(torch::kFloat64));
      m.push_back(torch::zeros(shape).to(gpu)), v.push_back(torch::zeros(shape).to(gpu));
      m64.push_back(torch::zeros(shape, torch::kFloat64)), v64.push_back(torch::zeros(shape, torch::kFloat64));
      g.push_back(torch::empty(shape).to(gpu));
    }
    for (int64_t t = 1; t <= 5; ++t) {
      for (size_t i = 0; i < p.size(); ++i) g[i].copy_(torch::randn(p[i].sizes()));
      ASSERT_TRUE(compat::fused_adam(decay, p, g, m, v, t, lr, b1, b2, wd, eps)) << "libtorch " << compat::torch_version();
      for (size_t i = 0; i < p.size(); ++i) {  // the header's formula, in double
        auto gi = g[i].cpu().to(torch::kFloat64);
        if (decay == compat::WeightDecay::Decoupled) {
          p64[i].mul_(1 - lr * wd);
        } else {
          gi = gi + wd * p64[i];
        }
        m64[i] = b1 * m64[i] + (1 - b1) * gi;
        v64[i] = b2 * v64[i] + (1 - b2) * gi * gi;
        p64[i] -= lr / (1 - std::pow(b1, t)) * m64[i] / ((v64[i] / (1 - std::pow(b2, t))).sqrt() + eps);
      }
    }
    for (size_t i = 0; i < p.size(); ++i) {
      // Each step moves a parameter by <= lr (Adam's normalised update); fp32 rounds that to ~1e-7 of |p| + lr.
      const double d = (p[i].cpu().to(torch::kFloat64) - p64[i]).abs().max().item<double>();
      EXPECT_LT(d, 1e-5) << "tensor " << i;
      EXPECT_LT((m[i].cpu().to(torch::kFloat64) - m64[i]).abs().max().item<double>(), 1e-6);
    }
  }
}

TEST(CudaTrain, AdamWithL2OnTheFusedKernelFollowsTheCpuCurve) {
  REQUIRE_GPU();
  const auto adam = std::vector<std::string>{"optim.kind=\"adam\""};
  const RunResult cpu = run(gpt_on("cpu", adam));
  const int64_t launches = compat::fused_adam_launches();
  const RunResult gpu = run(gpt_on("cuda", adam));
  // The loop gives the same curve: the kernel must have run, at least once per step.
  EXPECT_GE(compat::fused_adam_launches() - launches, 20);
  ASSERT_FALSE(gpu.diverged);
  EXPECT_LT(max_rel_diff(gpu.losses, cpu.losses), 1e-4);
}

TEST(CudaTrain, Fp32FollowsTheCpuCurve) {
  REQUIRE_GPU();
  const RunResult cpu = run(gpt_on("cpu"));
  const int64_t launches = compat::fused_adam_launches();
  const RunResult gpu = run(gpt_on("cuda"));
  EXPECT_GE(compat::fused_adam_launches() - launches, 20);  // AdamW took the fused kernel every step
  ASSERT_FALSE(gpu.diverged);
  ASSERT_EQ(gpu.losses.size(), 20u);
  const double d = max_rel_diff(gpu.losses, cpu.losses);
  EXPECT_LT(d, 1e-4);
  EXPECT_NEAR(gpu.final_val_loss, cpu.final_val_loss, 1e-4 * cpu.final_val_loss);
  std::printf("  CUDA fp32 vs CPU over 20 steps: max relative loss difference %.2e\n", d);
}

// The mixture of experts trained on CUDA (experts padded and batched, counts by scatter, one host
// read per layer) follows the CPU's curve (experts looped), as the GPT does in Fp32FollowsTheCpuCurve.
// (A routing choice could flip between devices only where two probabilities tie to fp32's rounding,
// which 20 steps of 2 x 64 tokens do not meet at this tolerance's scale.)
TEST(CudaTrain, MoeFollowsTheCpuCurve) {
  REQUIRE_GPU();
  const std::vector<std::string> moe = {"model.kind=\"moe\"", "model.experts=8", "model.top_k=2", "param.name=\"mup-moe\""};
  const RunResult cpu = run(gpt_on("cpu", moe)), gpu = run(gpt_on("cuda", moe));
  ASSERT_FALSE(gpu.diverged);
  ASSERT_EQ(gpu.losses.size(), 20u);
  const double d = max_rel_diff(gpu.losses, cpu.losses);
  EXPECT_LT(d, 1e-4);
  EXPECT_GT(fell(gpu.losses), 0.1);
  std::printf("  moe on CUDA vs CPU over 20 steps: max relative loss difference %.2e\n", d);
}

TEST(CudaTrain, Bf16AutocastFollowsFp32AndKeepsLearning) {
  REQUIRE_GPU();
  const RunResult f32 = run(gpt_on("cuda")), bf16 = run(gpt_on("cuda", {"train.autocast=\"bf16\""}));
  ASSERT_FALSE(bf16.diverged);
  const double d = max_rel_diff(bf16.losses, f32.losses);
  EXPECT_LT(d, 5e-2);
  // A forward served stale bf16 weight copies (autocast's cast cache kept across updates) stays
  // near its first loss while fp32 falls: the bf16 curve must fall at least half as far.
  EXPECT_GT(fell(f32.losses), 0.05) << "the reference run did not learn";
  EXPECT_GT(fell(bf16.losses), 0.5 * fell(f32.losses));
  std::printf("  bf16 vs fp32 on CUDA: max relative loss difference %.2e; fell %.4f vs %.4f\n", d, fell(bf16.losses),
              fell(f32.losses));
}

TEST(CudaTrain, GraphReplayIsTheEagerRun) {
  REQUIRE_GPU();
  ASSERT_TRUE(compat::has_cuda_graphs());
  const RunResult eager = run(gpt_on("cuda")), graph = run(gpt_on("cuda", {"train.cuda_graph=true"}));
  ASSERT_FALSE(graph.diverged);
  // The replayed kernels are the eager ones on the same data; only scheduling differs.
  const double d = max_rel_diff(graph.losses, eager.losses);
  EXPECT_LT(d, 1e-4);
  EXPECT_NE(graph.losses.front(), graph.losses.back());  // it trained (replays saw the new batches)
  std::printf("  CUDA graph vs eager over 20 steps: max relative loss difference %.2e\n", d);
}

// Autocast inside a capture: the bf16 casts of the weights are recorded into the graph (autocast's
// cache is empty at the capture, its scope being one forward) and redone by every replay, so the
// replayed run must follow the eager bf16 run and keep learning; a graph that replayed step 3's
// weight copies would stay near its fourth loss.
TEST(CudaTrain, GraphReplayUnderBf16AutocastIsTheEagerBf16Run) {
  REQUIRE_GPU();
  const std::vector<std::string> bf16 = {"train.autocast=\"bf16\""};
  std::vector<std::string> graph_bf16 = bf16;
  graph_bf16.push_back("train.cuda_graph=true");
  const RunResult eager = run(gpt_on("cuda", bf16)), graph = run(gpt_on("cuda", graph_bf16));
  ASSERT_FALSE(graph.diverged);
  const double d = max_rel_diff(graph.losses, eager.losses);
  EXPECT_LT(d, 5e-2);
  EXPECT_GT(fell(eager.losses), 0.05) << "the reference run did not learn";
  EXPECT_GT(fell(graph.losses), 0.5 * fell(eager.losses));
  std::printf("  CUDA graph vs eager under bf16: max relative loss difference %.2e; fell %.4f vs %.4f\n", d,
              fell(graph.losses), fell(eager.losses));
}

// A capture that fails (here a host read-back, which cannot be captured) throws and leaves the
// allocator as it was: libtorch's capture_end throws before it ends the routing to the graph's
// pool, and without compat::CudaGraph's clean-up emptyCache (what the allocator also runs before it
// reports out of memory) would fail its no-capture-underway assert for the rest of the process.
// What the failed capture allocated in the graph's pool (here 64 MiB) goes back to the driver with
// the next emptyCache: libtorch releases a graph's pool only for a capture that ended, so without
// the release the segment stayed reserved for the rest of the process (a sweep's later points).
// Then a capture on the same stream still records and replays.
TEST(CudaGraphs, AFailedCaptureLeavesTheAllocatorAsItWas) {
  REQUIRE_GPU();
  ASSERT_TRUE(compat::has_cuda_graphs());
  const torch::Device dev("cuda");
  const compat::CudaSideStream side(true, dev);
  torch::Tensor x = torch::ones({256}, torch::TensorOptions().device(dev));
  compat::empty_cuda_cache();
  const int64_t reserved_before = compat::cuda_reserved_bytes();
  EXPECT_ANY_THROW(compat::CudaGraph([&] {
    torch::Tensor big = torch::zeros({16 << 20}, x.options());  // 64 MiB from the graph's pool
    (void)(big + x.sum()).sum().item<float>();
  }));
  EXPECT_NO_THROW(compat::empty_cuda_cache());
  EXPECT_LT(compat::cuda_reserved_bytes() - reserved_before, int64_t{32} << 20)
      << "the failed capture's pool is still reserved";
  torch::Tensor y;
  compat::CudaGraph graph([&] { y = x * 2; });
  x.fill_(3);
  graph.replay();
  EXPECT_EQ(y.sum().item<float>(), 6.0f * 256);  // the replay read the refilled input
}

// A step callback (a sweep's progress bar when its points run one by one) gets every step while
// the losses stay on the device between read-backs: the same curve, every step counted.
TEST(CudaTrain, AStepCallbackKeepsTheDeferredReadBack) {
  REQUIRE_GPU();
  RunOptions ro = in_memory();
  std::vector<int64_t> calls;
  ro.on_step = [&](int64_t done) { calls.push_back(done); };
  const TrainConfig c = gpt_on("cuda", {"train.log_every=7"});
  const RunResult with = train_run(c, ro), without = run(c);
  ASSERT_EQ(calls.size(), 20u);
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], static_cast<int64_t>(i) + 1);
  ASSERT_EQ(with.losses.size(), 20u);
  EXPECT_LT(max_rel_diff(with.losses, without.losses), 1e-4);
}

// Issue 14: "nothing in the hot loop that synchronizes the device per step". CUDA's sync debug mode
// makes every host wait (a .item(), a copy to pageable memory, a synchronize) throw; it is switched
// on from the step after warm-up (3 eager steps before a graph's capture, and the first step's lazy
// set-up) to the step before the last, whose read-back is the one wait the run needs (log_every and
// the ensemble's read-back interval are past the 20 steps, no evaluation before the end). Each
// variant of the loop a user can pick runs its steps 6-19 under it: fp32 with the fused AdamW, bf16
// autocast, a replayed CUDA graph, Muon, Adafactor, simulated bf16 rounding (its counts stay on
// the device), and a batched ensemble of three LRs.
TEST(CudaTrain, TheStepsBetweenReadBacksNeverWaitForTheDevice) {
  REQUIRE_GPU();
  struct Unforbid {
    ~Unforbid() { compat::forbid_cuda_syncs(false); }
  } unforbid;
  const std::vector<std::string> quiet = {"train.log_every=1000", "train.eval_every=0"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> variants = {
      {"fp32, fused AdamW", {}},
      {"bf16 autocast", {"train.autocast=\"bf16\""}},
      {"CUDA graph", {"train.cuda_graph=true"}},
      {"Muon", {"optim.kind=\"muon\"", "optim.lr=0.02"}},
      {"Adafactor", {"optim.kind=\"adafactor\""}},
      {"simulated bf16", {"train.precision=\"bf16\""}},
  };
  for (const auto& [name, sets] : variants) {
    SCOPED_TRACE(name);
    std::vector<std::string> all = quiet;
    all.insert(all.end(), sets.begin(), sets.end());
    RunOptions ro = in_memory();
    ro.on_step = [](int64_t done) { compat::forbid_cuda_syncs(done >= 5 && done < 19); };
    RunResult s;
    try {
      s = train_run(gpt_on("cuda", all), ro);
    } catch (const std::exception& e) {  // the synchronizing operation, with its backtrace
      ADD_FAILURE() << e.what();
    }
    compat::forbid_cuda_syncs(false);
    EXPECT_EQ(s.steps_done, 20);
    EXPECT_EQ(s.losses.size(), 20u);
  }
  std::vector<TrainConfig> members;
  for (const char* lr : {"0.003", "0.01", "0.03"})
    members.push_back(gpt_on("cuda", {quiet[0], quiet[1], std::string("optim.lr=") + lr}));
  EnsembleOptions o;
  o.batching = Batching::On;
  o.readback_every = 1000;
  o.on_step = [](int64_t member_steps) { compat::forbid_cuda_syncs(member_steps >= 5 * 3 && member_steps < 19 * 3); };
  std::vector<RunResult> ens;
  try {
    ens = train_ensemble(members, o);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "batched ensemble: " << e.what();
  }
  compat::forbid_cuda_syncs(false);
  ASSERT_EQ(ens.size(), 3u);
  for (const RunResult& m : ens) EXPECT_EQ(m.losses.size(), 20u);
}

// A checkpoint written by a CUDA run holds CUDA tensors; it must load where there is no GPU (the
// CPU model of `sample`, an export): loaded onto the CPU, the weights reproduce the run's final
// validation loss (computed on CUDA in fp32 with TF32 off: reassociation only, 1e-4 relative as
// above), and `sample` reads it.
TEST(CudaTrain, ACheckpointWrittenOnTheGpuLoadsIntoACpuModel) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_ckpt");
  const TrainConfig c = gpt_on("cuda", {"train.out_dir=\"" + dir + "\""});
  RunOptions ro;
  ro.show_progress = false;
  ro.data_parallel = false;
  const RunResult s = train_run(c, ro);
  ASSERT_TRUE(std::isfinite(s.final_val_loss));
  const auto model = model_from_checkpoint(c, resolve_param(c), dir + "/checkpoint.pt");
  EXPECT_NEAR(validation_loss(*model, c), s.final_val_loss, 1e-4 * s.final_val_loss);
  const auto r = run_cli("sample --checkpoint " + dir + "/checkpoint.pt --prompt ab --tokens 8 --temperature 0");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(CudaEnsemble, BatchedMembersAreTheirOwnRunsAndReadBackChangesNothing) {
  REQUIRE_GPU();
  std::vector<TrainConfig> members;
  for (const char* lr : {"0.003", "0.01", "0.03"}) members.push_back(gpt_on("cuda", {std::string("optim.lr=") + lr}));
  EnsembleOptions o;
  o.batching = Batching::On;
  o.readback_every = 1;
  const int64_t launches = compat::fused_adam_launches();
  const auto every = train_ensemble(members, o);
  // Each member's slices step on the fused kernel, in its own set (three LRs), every one of the 20
  // steps: the loop gives the same runs, so only the count tells the paths apart.
  EXPECT_GE(compat::fused_adam_launches() - launches, 20 * 3);
  o.readback_every = 7;
  const auto seventh = train_ensemble(members, o);
  // The optimizer's per-tensor loop (what `bench` times against the fused kernels): no kernel
  // launched, the same runs up to reassociation.
  std::vector<RunResult> looped;
  {
    const compat::FusedAdamScope loop(compat::FusedAdamUse::Off);
    const int64_t before = compat::fused_adam_launches();
    looped = train_ensemble(members, o);
    EXPECT_EQ(compat::fused_adam_launches(), before);
  }
  ASSERT_EQ(every.size(), 3u);
  ASSERT_EQ(looped.size(), 3u);
  for (size_t e = 0; e < members.size(); ++e) {
    SCOPED_TRACE("member " + std::to_string(e));
    const RunResult own = run(members[e]);
    EXPECT_LT(max_rel_diff(every[e].losses, own.losses), 1e-4);
    EXPECT_LT(max_rel_diff(looped[e].losses, every[e].losses), 1e-4);
    EXPECT_EQ(seventh[e].losses, every[e].losses);  // the same kernels; only when the host reads differs
    EXPECT_EQ(seventh[e].diverged, every[e].diverged);
  }
}

namespace {

// small_gpt on CUDA (TF32 off) with global batch 8, as a config file for the CLI.
std::string cuda_config(const std::string& dir) {
  const std::string path = dir + "/gpt.toml";
  std::ofstream(path) << small_gpt_toml({"train.batch_size=8", "train.device=\"cuda\"", "train.tf32=false"});
  return path;
}

// Two sweep databases of the same grid of n points: every point in both, each final loss within
// `rel` of the other's. Returns the worst relative difference.
double compare_final_losses(const std::string& a_db, const std::string& b_db, size_t n, double rel) {
  auto read = [](const std::string& db) {
    std::map<std::string, double> out;
    SqliteDb d(db);
    for (const auto& r : d.query("SELECT id, final_loss FROM points")) out[std::get<std::string>(r[0])] = std::get<double>(r[1]);
    return out;
  };
  const auto a = read(a_db), b = read(b_db);
  EXPECT_EQ(a.size(), n);
  EXPECT_EQ(b.size(), n);
  double worst = 0;
  for (const auto& [id, l] : a) {
    const auto it = b.find(id);
    if (it == b.end()) {
      ADD_FAILURE() << id << " is missing from " << b_db;
      continue;
    }
    EXPECT_NEAR(it->second, l, rel * std::abs(l)) << id;
    worst = std::max(worst, std::abs(it->second - l) / std::abs(l));
  }
  return worst;
}

}  // namespace

// Sweep jobs on CUDA each queue on a stream of their own (run_sweep): three jobs must store what one
// job stores. Other streams may give cuBLAS other workspaces and so other summation orders: a
// relative 1e-5 on the final losses (reassociation after 20 Adam steps, see the top of this file),
// every point present once.
// TF32 is a process-wide switch: a grid that varies train.tf32 cannot run as side-by-side jobs
// (each run would set it for the others); --jobs 2 is refused by name before anything runs, and
// the default (4 jobs on CUDA) runs such a grid one chunk at a time.
TEST(CudaSweep, JobsRefuseAGridThatVariesTf32) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_sweep_tf32");
  const SweepSpec spec = sweep_from_toml_text(R"(
[sweep]
name = "cuda_tf32"
[model]
kind = "bigram"
width = 32
depth = 2
[data]
source = "markov"
vocab = 16
[train]
steps = 2
device = "cuda"
[grid]
"train.tf32" = [true, false]
)",
                                              "cuda_tf32.toml", ".");
  SweepRunOptions ro;
  ro.db_path = dir + "/t.db";
  ro.show_progress = false;
  ro.jobs = 2;
  const std::string err = user_error_of([&] { run_sweep(spec, ro); });
  EXPECT_NE(err.find("train.tf32"), std::string::npos) << err;
  ro.jobs = 1;
  EXPECT_EQ(run_sweep(spec, ro).run, 2);
  ro.jobs = 0;
  ro.db_path = dir + "/auto.db";
  const SweepRunSummary s = run_sweep(spec, ro);
  EXPECT_EQ(s.jobs, 1);
  EXPECT_EQ(s.run, 2);
}

TEST(CudaSweep, JobsOnTheirOwnStreamsStoreWhatOneJobStores) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_sweep_jobs");
  const SweepSpec spec = sweep_from_toml_text(R"(
[sweep]
name = "cuda_jobs"
ensemble = 4
[model]
kind = "bigram"
width = 32
depth = 2
[data]
source = "markov"
vocab = 16
[train]
steps = 20
device = "cuda"
tf32 = false
[grid]
param = ["standard", "mup"]
"model.width" = [32, 64, 128]
lr_log2 = [-8, -6]
seed = [0, 1]
)",
                                              "cuda_jobs.toml", ".");
  for (int k = 0; k < 2; ++k) {
    SweepRunOptions ro;
    ro.db_path = fmt::format("{}/j{}.db", dir, k);
    ro.show_progress = false;
    ro.jobs = k == 0 ? 1 : 3;
    const SweepRunSummary s = run_sweep(spec, ro);
    EXPECT_EQ(s.jobs, ro.jobs);
    EXPECT_EQ(s.run, static_cast<int64_t>(spec.points.size()));
  }
  const double worst = compare_final_losses(dir + "/j0.db", dir + "/j1.db", spec.points.size(), 1e-5);
  std::printf("  sweep on CUDA, 3 jobs on their own streams vs 1 job: max relative final-loss difference %.2e\n", worst);
}

// A real out-of-memory on the GPU (SweepRunner.AChunkOutOfMemoryBesideOthersIsRerunWithFewerJobs
// simulates it on the CPU). Four chunks of a 4-member GPT ensemble (several GB each) and the
// default 4 jobs on their own streams, with the allocator capped at what one chunk held (measured
// by a 1-job sweep first) times 1.6 plus 256 MiB for the other streams' cuBLAS workspaces: two
// chunks at once cannot fit, so at least one runs out beside another, is given back and rerun.
// Every point must be stored, with the 1-job sweep's final losses (to 1e-5, as above).
TEST(CudaSweep, AChunkOutOfMemoryBesideOthersIsRerunOnTheGpu) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_sweep_oom");
  const SweepSpec spec = sweep_from_toml_text(R"(
[sweep]
name = "cuda_oom"
ensemble = 4
[model]
kind = "gpt"
width = 512
depth = 2
seq_len = 256
head_dim = 64
vocab = 64
[data]
source = "markov"
vocab = 64
[train]
steps = 4
batch_size = 64
device = "cuda"
tf32 = false
eval_batches = 1
[grid]
lr_log2 = [-10, -9, -8, -7]
seed = [0, 1, 2, 3]
)",
                                              "cuda_oom.toml", ".");
  struct Uncap {
    ~Uncap() { compat::limit_cuda_memory(1.0); }
  } uncap;
  SweepRunOptions ro;
  ro.show_progress = false;
  ro.jobs = 1;
  ro.db_path = dir + "/one.db";
  ASSERT_EQ(run_sweep(spec, ro).run, 16);
  const int64_t one_chunk = compat::cuda_reserved_bytes(), total = compat::cuda_total_bytes();
  ASSERT_GT(one_chunk, 256ll << 20) << "the chunk is too small to measure an out-of-memory with";
  const double cap = (1.6 * static_cast<double>(one_chunk) + static_cast<double>(256ll << 20)) / static_cast<double>(total);
  compat::empty_cuda_cache();
  compat::limit_cuda_memory(cap);
  ro.jobs = 0;  // the default: 4 on CUDA
  ro.db_path = dir + "/four.db";
  const SweepRunSummary s = run_sweep(spec, ro);
  compat::limit_cuda_memory(1.0);
  EXPECT_EQ(s.jobs, 4);
  EXPECT_EQ(s.run, 16);
  EXPECT_GE(s.out_of_memory, 1);
  EXPECT_GE(s.jobs_at_end, 1);
  const double worst = compare_final_losses(dir + "/one.db", dir + "/four.db", 16, 1e-5);
  EXPECT_LT(worst, 1e-5);
  std::printf("  sweep out of memory on CUDA: one chunk held %.2f GB, cap %.2f GB; %lld chunks rerun, %d jobs at the "
              "end; max relative final-loss difference vs 1 job %.2e\n",
              static_cast<double>(one_chunk) / 1e9, cap * static_cast<double>(total) / 1e9,
              static_cast<long long>(s.out_of_memory), s.jobs_at_end, worst);
}

TEST(CudaDist, OneRankOnNcclAndTwoRanksSharingTheGpuMatchOneProcess) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_dist");
  const std::string cfg = cuda_config(dir);
  auto r = run_cli(train_args(cfg, dir + "/one"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = losses_in(dir + "/one/metrics.jsonl");
  ASSERT_EQ(ref.size(), 20u);
  // NCCL at world size 1 (`launch --nproc 1` joins a one-rank group): its all-reduce of one rank
  // returns the input, so only the kernels' own run-to-run differences remain. A build without
  // NCCL (scripts/build_cuda.sh found no nccl.h of torch's NCCL version) takes Gloo there instead.
  const char* one = compat::has_nccl() ? "nccl" : "gloo";
  const ScopedEnv verbose("SCALEINV_DIST_VERBOSE", "1");  // each rank prints its gradient group
  r = run_cli("launch --nproc 1 -- " + train_args(cfg, dir + "/nccl1"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("gradient buckets on {}", one)), std::string::npos) << r.err;
  // The NCCL group is shut down at the run's end (compat::shutdown_if_nccl), not left to its
  // destructor's warning that the process group was not destroyed.
  EXPECT_EQ(r.err.find("NOT been destroyed"), std::string::npos) << r.err;
  EXPECT_LT(max_rel_diff(losses_in(dir + "/nccl1/metrics.jsonl"), ref), 1e-5);
  // Two ranks on one GPU cannot each own it: Gloo over host buckets (NCCL where there are 2 GPUs).
  const char* group = torch::cuda::device_count() >= 2 && compat::has_nccl() ? "nccl" : "gloo";
  r = run_cli("launch --nproc 2 -- " + train_args(cfg, dir + "/two"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("rank 0: 1 gradient buckets on {}", group)), std::string::npos) << r.err;
  const double d = max_rel_diff(losses_in(dir + "/two/metrics.jsonl"), ref);
  EXPECT_LT(d, 1e-4);  // two half-batches' gradients averaged: reassociation (as the CPU test, 1e-5 there)
  std::printf("  2 ranks (%s) vs 1 process on CUDA: max relative loss difference %.2e\n", group, d);
}

TEST(CudaCli, DemoOnTheGpuGivesTheCpuDemosOptimaAndVerdicts) {
  REQUIRE_GPU();
  // The demo's depth sweep trains on Fashion-MNIST (bench/gpu_check.sh unpacks the carried .deb).
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (bench/gpu_check.sh unpacks it from .deps/debs)";
  // Its width sweep trains on the KJV text: cached (SCALEINV_DATA_DIR=.deps/data in gpu_check.sh),
  // or made by bible-kjv's program.
  if (!std::filesystem::exists(kjv_cache_path()) && std::system("command -v bible >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no KJV text here (carry .deps/data: bench/gpu_check.sh points SCALEINV_DATA_DIR at it)";
  const std::string cpu = temp_dir("cuda_demo_cpu"), gpu = temp_dir("cuda_demo_gpu");
  auto r = run_cli("demo --quick --out " + cpu);
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("demo --quick --device cuda --out " + gpu);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* cc : {"coordcheck-mup", "coordcheck-standard"}) {
    const auto a = nlohmann::json::parse(slurp(cpu + "/" + cc + "/coordcheck.json"));
    const auto b = nlohmann::json::parse(slurp(gpu + "/" + cc + "/coordcheck.json"));
    EXPECT_EQ(b.at("pass"), a.at("pass")) << cc;
  }
  const auto a = nlohmann::json::parse(slurp(cpu + "/transfer.json"));
  const auto b = nlohmann::json::parse(slurp(gpu + "/transfer.json"));
  ASSERT_EQ(a.at("groups").size(), b.at("groups").size());
  for (size_t gi = 0; gi < a["groups"].size(); ++gi)
    for (size_t pi = 0; pi < a["groups"][gi]["params"].size(); ++pi) {
      const auto &pa = a["groups"][gi]["params"][pi], &pb = b["groups"][gi]["params"][pi];
      SCOPED_TRACE(fmt::format("{} {}", a["groups"][gi]["label"].get<std::string>(), pa["param"].get<std::string>()));
      EXPECT_EQ(pb.at("transfer_holds"), pa.at("transfer_holds"));
      for (size_t ci = 0; ci < pa["curves"].size(); ++ci) {
        const auto &ca = pa["curves"][ci], &cb = pb["curves"][ci];
        // TF32 (on in `demo --device cuda`): losses to 1e-2; an optimum to a quarter of the grid's step.
        // The exception is the point on the edge of divergence: the curve's largest LR, past its
        // optimum, where training is unstable and amplifies any rounding difference step after
        // step. There one device may diverge and the other not, or both land far apart (H200,
        // 2026-11-26: the --quick depth sweep's LR 2^-7, loss 1.80 on the CPU and 1.97 on the GPU,
        // against 0.93 at the optimum). One such point per curve is allowed, only there.
        ASSERT_EQ(cb["points"].size(), ca["points"].size());
        const size_t n = ca["points"].size();
        double best = std::numeric_limits<double>::infinity();
        for (const auto& p : ca["points"])
          if (!p["mean_loss"].is_null()) best = std::min(best, p["mean_loss"].get<double>());
        for (size_t k = 0; k < n; ++k) {
          const auto &la = ca["points"][k]["mean_loss"], &lb = cb["points"][k]["mean_loss"];
          const bool agree = la.is_null() == lb.is_null() &&
                             (la.is_null() || std::abs(lb.get<double>() - la.get<double>()) <= 1e-2 * la.get<double>());
          if (agree) continue;
          const bool edge = k + 1 == n && (la.is_null() || la.get<double>() > best);
          EXPECT_TRUE(edge) << "point " << k << " of " << n << ": CPU " << la.dump() << ", GPU " << lb.dump()
                            << " (beyond 1e-2 away from the edge of divergence)";
          if (edge)
            std::printf("  demo on CUDA: edge-of-divergence point (largest LR) CPU %s, GPU %s, curve best %.4f\n",
                        la.dump().c_str(), lb.dump().c_str(), best);
        }
        EXPECT_NEAR(cb["optimum_lr_log2"].get<double>(), ca["optimum_lr_log2"].get<double>(), 0.25);
      }
    }
}

// Issue 14: a coordinate check on the GPU gives the CPU's verdicts. The models are initialised on
// the CPU under the same seeds and moved, and coordcheck leaves TF32 off, so both sides measure the
// same networks in fp32 and their RMS values differ by reassociation only (~1e-6 relative after a
// few Adam steps, see the top of this file). A fitted slope is a difference of logs over a width
// ratio of 4 (ln 4 = 1.39), so it moves by ~1e-6 too; 1e-3 is three orders above that and far below
// what a wrong scaling shows (the smallest exponent step in the table is 1/2). A verdict is compared
// where the CPU's row is decided by more than that margin (|slope - predicted| or slope against its
// tolerance); a row closer to its boundary than 1e-3 could flip on reassociation alone.
TEST(CudaCli, CoordcheckOnTheGpuGivesTheCpusVerdicts) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_coordcheck");
  const std::string args = "coordcheck --model gpt --param mup --widths 64,128,256 --seeds 2 --steps 2 --quiet --json ";
  auto r = run_cli(args + dir + "/cpu.json");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli(args + dir + "/cuda.json --device cuda");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = nlohmann::json::parse(slurp(dir + "/cpu.json"));
  const auto b = nlohmann::json::parse(slurp(dir + "/cuda.json"));
  ASSERT_EQ(a.at("rows").size(), b.at("rows").size());
  EXPECT_EQ(b.at("config").at("train").at("device"), "cuda");
  int compared = 0, borderline = 0;
  double worst = 0;
  for (size_t i = 0; i < a["rows"].size(); ++i) {
    const auto &ra = a["rows"][i], &rb = b["rows"][i];
    SCOPED_TRACE(fmt::format("{} {} step {}", ra["quantity"].get<std::string>(), ra["layer"].get<std::string>(),
                             ra["step"].get<int>()));
    ASSERT_EQ(rb["layer"], ra["layer"]);
    ASSERT_EQ(rb["valid"], ra["valid"]);
    if (!ra["valid"].get<bool>()) continue;
    const double sa = ra["slope"].get<double>(), sb = rb["slope"].get<double>(), tol = ra["tolerance"].get<double>();
    EXPECT_NEAR(sb, sa, 1e-3);
    worst = std::max(worst, std::abs(sb - sa));
    bool decided = true;
    if (!ra["predicted"].is_null()) decided = std::abs(std::abs(sa - ra["predicted"].get<double>()) - tol) > 1e-3;
    if (!ra["stable"].is_null()) decided = decided && std::abs(sa - tol) > 1e-3;
    if (!decided) {
      ++borderline;
      continue;
    }
    EXPECT_EQ(rb["matches"], ra["matches"]);
    EXPECT_EQ(rb["stable"], ra["stable"]);
    ++compared;
  }
  EXPECT_GT(compared, 0);
  if (borderline == 0) {
    EXPECT_EQ(b.at("pass"), a.at("pass"));
  }
  std::printf("  coordcheck on CUDA vs CPU: %d verdict rows equal, %d borderline, worst slope difference %.2e\n",
              compared, borderline, worst);
}

TEST(CudaCli, BenchRunsOnTheGpu) {
  REQUIRE_GPU();
  const std::string dir = temp_dir("cuda_bench");
  auto r = run_cli("bench --device cuda --quick --quiet --widths 256 --depth 2 --seq-len 64 --batch 8 --steps 20 --json " +
                   dir + "/b.json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(dir + "/b.json"));
  ASSERT_EQ(j.at("gpt").size(), 1u);
  EXPECT_GT(j["gpt"][0].at("tokens_per_s").get<double>(), 0);
  // The ensemble part: batched on a GPU, where batching pays (issue 14 measured 18 sweep points in
  // 21 s batched against 80 s one by one), so 8 members take less time than 8 runs of one; and
  // the same members timed again with the optimizer's per-tensor loop instead of the fused kernels.
  const auto& e = j.at("ensemble");
  EXPECT_TRUE(e.at("batched").get<bool>());
  EXPECT_LT(e.at("time_ratio").get<double>(), 8.0);
  EXPECT_GT(e.value("loop_all_s", 0.0), 0.0);
  EXPECT_GT(j.value("coordcheck_step_ms", 0.0), 0.0);
}
