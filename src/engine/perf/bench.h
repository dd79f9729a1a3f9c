#pragma once
// Speed benchmark (docs/design.md "Speed"; issue 6): one run measures
//   - the sgemm peak through libtorch (a large float32 matmul, best of a few, the better of the BLAS
//     pool as configured by configure_threads and on every core), GFLOP/s;
//   - GPT training throughput through train_run at the peer's shapes (../shared/peer/gpt_peer.py):
//     widths 64..512, depth 4, sequence 128, batch 16, AdamW, warm-up steps excluded;
//   - the batched-ensemble time ratio: 8 members at width 64 through train_ensemble against one;
//     where the optimizer's fused kernels apply (CUDA, libtorch >= 2.4), the same 8 members again
//     with the per-tensor loop (compat::FusedAdamScope Off), so the run says what fusing saves;
//   - the time per coordinate-check step.
//
// The GPT is configured like the peer's: vocab 256, learned position embedding, head_dim 64
// (the peer's H = max(1, W/64) heads), MLP ratio 4 with GELU, pre-LN, untied readout, no bias on
// any matrix, parameterization "standard" (every multiplier 1, one global LR), AdamW lr 1e-3,
// betas (0.9, 0.999), eps 1e-8, weight decay 0.01 coupled to the LR (torch.optim.AdamW's
// defaults). Differences: our LayerNorms have a gain but no bias (the peer's nn.LayerNorm has
// both: 2W more parameters per norm, one add fewer per norm here); the peer trains on one fixed
// random batch, we draw a fresh batch of a random Markov chain every step (the data pipeline is
// part of what is timed); the peer divides the [B,H,T,T] scores by d_head, we fold the logit
// scale into W_q.
//
// Training FLOPs (the exact formula, per token):
//   flops/token = 6 N + 12 L T d
// N: every trainable parameter (embeddings, position embedding, LN gains and readout included:
// what gpt_peer.py sums as `sum(p.numel())`); 6 N: forward (2 N) plus backward (4 N) of every
// weight, as gpt_peer.py counts; 12 L T d: the attention scores q k^T and the weighted sum p v,
// 2 matmuls x 2 flops x T x d per token and layer forward, times 3 for forward plus backward,
// counted over the full T x T square (the causal half is not subtracted). gpt_peer.py prints
// 6 N only; bench/compare_peer.sh recomputes the peer's GFLOP/s with this formula.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"

namespace scaleinv {

struct BenchConfig {
  std::string device = "cpu";           // cpu | cuda (UserError, exit 2, when cuda is not available)
  bool quick = false;                   // small step counts, widths 64 and 128 only (tests)
  std::vector<int> widths;              // empty: 64, 128, 256, 512 (quick: 64, 128)
  int depth = 4, seq_len = 128, batch = 16;
  int64_t warmup_steps = -1;            // -1: 4 (quick: 1)
  int64_t steps = -1;                   // measured steps per width; -1: 20 (quick: 2)
  bool gpt_only = false;                // sgemm and GPT throughput only (experiments)
  std::string autocast = "auto";        // auto (bf16 on cuda, off on cpu) | bf16 | off: train.autocast
  bool cuda_graph = false;              // train.cuda_graph of the GPT runs (CUDA only)
  bool show_progress = true;
};

struct GptBench {
  int width = 0;
  int64_t params = 0;
  double flops_per_token = 0;   // 6 N + 12 L T d (bench.h)
  double step_ms = 0;
  double tokens_per_s = 0;
  double gflops = 0;            // tokens_per_s * flops_per_token / 1e9
};

struct BenchResult {
  std::string device;
  int threads = 0;              // libtorch intra-op threads
  int blas_threads = 0;         // OpenBLAS pool (0: not OpenBLAS, left alone)
  int interop_threads = 0;
  int sgemm_n = 0;
  double sgemm_gflops = 0;
  int depth = 4, seq_len = 128, batch = 16;  // the GPT shapes measured
  std::string autocast = "off";              // train.autocast of the GPT runs
  bool cuda_graph = false;                   // train.cuda_graph of the GPT runs
  std::vector<GptBench> gpt;
  int ensemble_members = 8, ensemble_width = 64;
  double ensemble_one_s = 0, ensemble_all_s = 0;  // measured steps of 1 member / all members
  double ensemble_ratio = 0;    // ensemble_all_s / ensemble_one_s
  double ensemble_loop_s = 0;   // all members with the optimizer's per-tensor loop (0: not measured)
  bool ensemble_batched = false;  // ensemble_supported(): the batched path, not one run per member
  double coordcheck_step_ms = 0;
  std::string coordcheck_setup; // what the coordcheck timing ran
  double wall_s = 0;
};

// The TrainConfig of one GPT bench point (the peer's shapes; see the header comment).
// autocast: "auto" (bf16 on cuda, off on cpu), "bf16" or "off" (train.autocast); cuda_graph:
// train.cuda_graph.
TrainConfig bench_gpt_config(int width, int depth, int seq_len, int batch, int64_t steps, const std::string& device,
                             const std::string& autocast = "auto", bool cuda_graph = false);
// 6 N + 12 L T d (header comment).
double gpt_train_flops_per_token(int64_t params, int depth, int seq_len, int width);
// Best-of-`repeats` GFLOP/s of an n x n x n float32 matmul on `device`.
double sgemm_gflops(int n, int repeats, const std::string& device);

// Runs everything. UserError (field "--device") for an unknown device or cuda without CUDA.
BenchResult run_bench(const BenchConfig& cfg);
// The summary table printed at the end.
std::string render_bench(const BenchResult& r);
// {"sgemm_gflops", "gpt": [{"width", "tokens_per_s", "gflops", ...}], "ensemble": {"members", "width",
// "time_ratio", ..., "loop_all_s" where measured}, "coordcheck_step_ms", plus "device", "threads", ...}
nlohmann::json bench_to_json(const BenchResult& r);

}  // namespace scaleinv
