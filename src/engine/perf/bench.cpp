// Speed benchmark: see bench.h.
#include "engine/perf/bench.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "engine/runtime/threads.h"
#include "engine/coordcheck/coordcheck.h"
#include "engine/train/ensemble.h"
#include "engine/train/make_run.h"
#include "engine/train/trainer.h"
#include "engine/runtime/torch_compat.h"

namespace scaleinv {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_device(const std::string& device) {
  resolve_device(device, "command line", "--device");
}

// The GPT runs' flags, by their names (the config bench_gpt_config builds would name its fields).
void check_gpt_flags(int depth, int seq_len, int batch, const std::string& device, const std::string& autocast,
                     bool cuda_graph) {
  if (autocast != "auto" && autocast != "bf16" && autocast != "off")
    throw UserError("command line", "--autocast", fmt::format("unknown mode '{}'", autocast), "use auto, bf16 or off");
  for (auto [name, v] : {std::pair<const char*, int>{"--depth", depth}, {"--seq-len", seq_len}, {"--batch", batch}})
    if (v < 1 || v > 1 << 16)
      throw UserError("command line", name, fmt::format("{} is out of range", v), "use a value from 1 to 65536");
  check_device(device);
  if (cuda_graph && device != "cuda")
    throw UserError("command line", "--cuda-graph", "CUDA graphs need --device cuda", "add --device cuda or drop --cuda-graph");
}

void sync(const std::string& device) {
  if (device == "cuda") torch::cuda::synchronize();
}

RunOptions quiet_run() {
  RunOptions ro;
  ro.show_progress = false;
  ro.write_files = false;
  ro.data_parallel = false;
  return ro;
}

// Seconds of `steps` training steps after `warmup` steps, from one train_run's step callback: a
// timestamp once the device has finished the warm-up steps and one once it has finished the last,
// so set-up, warm-up and the final evaluation are outside it. In between, nothing is logged or read
// back (log_every is the whole run): on CUDA the host queues steps ahead of the device, as the
// PyTorch peer's timed loop does, instead of waiting at every logged step.
double measured_train_seconds(TrainConfig cfg, int64_t warmup, int64_t steps) {
  cfg.train.steps = warmup + steps;
  cfg.optim.total_steps = warmup + steps;
  cfg.train.log_every = warmup + steps;
  cfg.train.eval_every = 0;
  cfg.train.checkpoint_every = 0;
  RunOptions ro = quiet_run();
  Clock::time_point t_warm{}, t_end{};
  bool ended = false;
  const std::string device = cfg.train.device;
  ro.on_step = [&](int64_t done) {
    if (done == warmup) sync(device), t_warm = Clock::now();
    if (done == warmup + steps) sync(device), t_end = Clock::now(), ended = true;
  };
  const auto t0 = Clock::now();
  const RunResult s = train_run(cfg, ro);
  if (!ended || s.diverged)
    throw std::runtime_error(fmt::format("bench: the run at width {} stopped early (diverged?)", cfg.model.width));
  if (warmup <= 0) t_warm = t0;
  return std::max(std::chrono::duration<double>(t_end - t_warm).count(), 1e-9);
}

// Seconds of `steps` ensemble steps after `warmup` steps, from the step callback's timestamps (so
// set-up, warm-up and the final evaluation are outside it, as in measured_train_seconds). One
// member is timed through measured_train_seconds: train_ensemble runs a lone member as train_run.
double measured_ensemble_seconds(std::vector<TrainConfig> members, int64_t warmup, int64_t steps) {
  if (members.size() == 1) return measured_train_seconds(members.front(), warmup, steps);
  for (auto& m : members) m.train.steps = warmup + steps, m.optim.total_steps = warmup + steps;
  Clock::time_point t_warm = Clock::now(), t_end = t_warm;
  EnsembleOptions eo;
  eo.batching = Batching::On;  // the batched path itself, whatever Auto would pick on this device
  const auto E = static_cast<int64_t>(members.size());
  // On CUDA the host runs ahead of the device: a timestamp is taken once the device has finished
  // the steps it bounds (the ensemble reads its losses back only every log_every steps).
  const std::string device = members.front().train.device;
  eo.on_step = [&](int64_t member_steps) {  // (batched: steps x members)
    if (member_steps == warmup * E) sync(device), t_warm = Clock::now();
    if (member_steps == (warmup + steps) * E) sync(device), t_end = Clock::now();
  };
  const auto t0 = Clock::now();
  train_ensemble(members, eo);
  if (warmup <= 0) t_warm = t0;
  return std::max(std::chrono::duration<double>(t_end - t_warm).count(), 1e-9);
}

}  // namespace

TrainConfig bench_gpt_config(int width, int depth, int seq_len, int batch, int64_t steps, const std::string& device,
                             const std::string& autocast, bool cuda_graph) {
  check_gpt_flags(depth, seq_len, batch, device, autocast, cuda_graph);
  const std::vector<std::string> sets = {
      "model.kind=\"gpt\"",
      fmt::format("model.width={}", width),
      fmt::format("model.depth={}", depth),
      fmt::format("model.seq_len={}", seq_len),
      "model.head_dim=64",  // the peer: H = max(1, W / 64) heads of W / H
      "model.n_heads=0",
      "model.mlp_ratio=4",
      "model.block=\"pre\"",
      "model.tied=false",
      "param.name=\"standard\"",
      "optim.kind=\"adamw\"",
      "optim.lr=0.001",
      "optim.beta1=0.9",
      "optim.beta2=0.999",
      "optim.eps=1e-8",
      "optim.weight_decay=0.01",
      "optim.wd_mode=\"coupled\"",
      "data.source=\"markov\"",
      "data.vocab=256",
      "data.markov_length=65536",
      fmt::format("train.batch_size={}", batch),
      fmt::format("train.steps={}", steps),
      "train.eval_every=0",
      "train.eval_batches=1",
      "train.log_every=1000000",
      "train.checkpoint_every=0",
      "train.out_dir=\"runs/bench\"",  // (bench runs write only to a temporary directory)
      fmt::format("train.device=\"{}\"", device),
      fmt::format("train.autocast=\"{}\"", autocast == "auto" ? (device == "cuda" ? "bf16" : "off") : autocast),
      fmt::format("train.cuda_graph={}", cuda_graph),
  };
  return load_train_config("", sets);
}

double gpt_train_flops_per_token(int64_t params, int depth, int seq_len, int width) {
  return 6.0 * static_cast<double>(params) +
         12.0 * static_cast<double>(depth) * static_cast<double>(seq_len) * static_cast<double>(width);
}

double sgemm_gflops(int n, int repeats, const std::string& device) {
  check_device(device);
  torch::NoGradGuard ng;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device == "cuda" ? torch::kCUDA : torch::kCPU);
  torch::Tensor a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts), c = torch::empty({n, n}, opts);
  at::mm_out(c, a, b);  // warm-up (first touch, BLAS thread start)
  sync(device);
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = Clock::now();
    at::mm_out(c, a, b);
    sync(device);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
}

namespace {

// The peer's shapes: head_dim 64, so every width a positive multiple of 64.
void check_bench_widths(const std::vector<int>& widths) {
  for (int w : widths)
    if (w <= 0 || w % 64 != 0)
      throw UserError("command line", "--widths", fmt::format("width {} is not a positive multiple of 64", w),
                      "use widths such as 64,128,256,512 (head_dim 64, as the peer)");
}

// What the result records of the machine and the runs' shapes, before anything is measured.
BenchResult bench_setup(const BenchConfig& cfg) {
  BenchResult r;
  r.device = cfg.device;
  r.threads = torch::get_num_threads();
  r.blas_threads = thread_plan().blas_threads;
  r.interop_threads = torch::get_num_interop_threads();
  r.depth = cfg.depth;
  r.seq_len = cfg.seq_len;
  r.batch = cfg.batch;
  r.autocast = cfg.autocast == "auto" ? (cfg.device == "cuda" ? "bf16" : "off") : cfg.autocast;
  r.cuda_graph = cfg.cuda_graph;
  return r;
}

// The bar over the benchmark's parts (sgemm, each GPT width, ensemble, coordcheck step); its
// status names the part that runs next.
class PartsBar {
 public:
  PartsBar(bool show, long parts) {
    if (show) bar_ = std::make_unique<Progress>(parts, "bench", "parts");
  }
  void start(const std::string& first) {
    if (bar_) bar_->update(0, first);
  }
  void advance(const std::string& next) {
    ++done_;
    if (bar_) bar_->update(done_, next);
  }
  void finish() {
    if (bar_) bar_->finish();
  }

 private:
  std::unique_ptr<Progress> bar_;
  long done_ = 0;
};

// The machine's sgemm peak: the better of the BLAS pool as configured (threads.cpp) and the BLAS
// pool on every core (measured again only where the configured pool is smaller, e.g. --threads 1).
void measure_sgemm_peak(BenchResult& r, const BenchConfig& cfg) {
  r.sgemm_n = cfg.device == "cuda" ? 8192 : (cfg.quick ? 512 : 2048);
  r.sgemm_gflops = sgemm_gflops(r.sgemm_n, cfg.quick ? 2 : 5, cfg.device);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cfg.device == "cpu" && thread_plan().blas_threads != cores) {
    const int prev = set_blas_threads(cores);
    if (prev > 0) {
      r.sgemm_gflops = std::max(r.sgemm_gflops, sgemm_gflops(r.sgemm_n, cfg.quick ? 2 : 5, cfg.device));
      set_blas_threads(prev);
    }
  }
}

// GPT training throughput at width w: its parameters counted on a model built for that (and freed
// before the timed run), then `steps` timed steps after `warmup`.
GptBench measure_gpt_width(const BenchConfig& cfg, int w, int64_t warmup, int64_t steps) {
  TrainConfig tc =
      bench_gpt_config(w, cfg.depth, cfg.seq_len, cfg.batch, warmup + steps, cfg.device, cfg.autocast, cfg.cuda_graph);
  GptBench g;
  g.width = w;
  {
    auto model = build_model(tc.model, run_context(tc, resolve_param(tc)), tc.hp);
    for (const auto& p : model->tagged_parameters()) g.params += p.tensor.numel();
  }
  g.flops_per_token = gpt_train_flops_per_token(g.params, cfg.depth, cfg.seq_len, w);
  const double sec = measured_train_seconds(tc, warmup, steps);
  g.step_ms = 1000.0 * sec / static_cast<double>(steps);
  g.tokens_per_s = static_cast<double>(steps * cfg.batch * cfg.seq_len) / sec;
  g.gflops = g.tokens_per_s * g.flops_per_token / 1e9;
  return g;
}

// The ensemble: r.ensemble_members members at r.ensemble_width (a sweep's LR grid and seeds)
// against one, and on CUDA with fused Adam the same members with the per-tensor loop.
void measure_ensemble(BenchResult& r, const BenchConfig& cfg, int64_t warmup, int64_t steps) {
  std::vector<TrainConfig> members;
  for (int e = 0; e < r.ensemble_members; ++e) {
    TrainConfig tc = bench_gpt_config(r.ensemble_width, cfg.depth, cfg.seq_len, cfg.batch, warmup + steps, cfg.device,
                                      cfg.autocast);
    tc.optim.lr = 1e-3 * std::pow(2.0, e - 4);  // a sweep's LR grid
    tc.train.seed = e;
    tc.data.seed = e;
    members.push_back(tc);
  }
  r.ensemble_batched = ensemble_supported(members.front());
  r.ensemble_one_s = measured_ensemble_seconds({members.front()}, warmup, steps);
  r.ensemble_all_s = measured_ensemble_seconds(members, warmup, steps);
  r.ensemble_ratio = r.ensemble_all_s / r.ensemble_one_s;
  if (cfg.device == "cuda" && compat::has_fused_adam()) {  // the same run without the fused kernels
    const compat::FusedAdamScope loop(compat::FusedAdamUse::Off);
    r.ensemble_loop_s = measured_ensemble_seconds(members, warmup, steps);
  }
}

// One coordinate-check step: the wall time of a small GPT check over its points and steps.
void measure_coordcheck_step(BenchResult& r, const BenchConfig& cfg) {
  CoordCheckConfig cc;
  // The CLI's small-probe defaults for a GPT (cmd_coordcheck.cpp): a 32-token Markov chain,
  // 2 x 8 tokens per batch; mup, Adam.
  cc.train = load_train_config("", {"model.kind=\"gpt\"", "param.name=\"mup\"", "optim.kind=\"adam\"", "optim.lr=0.001",
                                    "data.source=\"markov\"", "data.vocab=32", "data.markov_length=20000",
                                    "model.seq_len=8", "train.batch_size=2",
                                    fmt::format("train.device=\"{}\"", cfg.device)});
  cc.widths = cfg.quick ? std::vector<int>{64, 128} : std::vector<int>{64, 128, 256, 512};
  cc.steps = cfg.quick ? 1 : 3;
  cc.seeds = {0};
  cc.show_progress = false;
  const auto t0 = Clock::now();
  CoordCheckResult res = run_coordcheck(cc);
  const double sec = seconds_since(t0);
  const double n_steps = static_cast<double>(cc.widths.size() * cc.seeds.size()) * (cc.steps + 1);
  r.coordcheck_step_ms = 1000.0 * sec / n_steps;
  r.coordcheck_setup = fmt::format("gpt depth {} widths {}, {} steps (+ step 0), 1 seed, mup/adam, probe 2x8 tokens; "
                                   "wall time (set-up and fits included) / (points x (steps + 1))",
                                   cc.train.model.depth, fmt::join(cc.widths, ","), cc.steps);
}

}  // namespace

BenchResult run_bench(const BenchConfig& in) {
  check_gpt_flags(in.depth, in.seq_len, in.batch, in.device, in.autocast, in.cuda_graph);
  BenchConfig cfg = in;
  if (cfg.widths.empty()) cfg.widths = cfg.quick ? std::vector<int>{64, 128} : std::vector<int>{64, 128, 256, 512};
  const int64_t warmup = cfg.warmup_steps >= 0 ? cfg.warmup_steps : (cfg.quick ? 1 : 4);
  const int64_t steps = cfg.steps > 0 ? cfg.steps : (cfg.quick ? 2 : 20);
  check_bench_widths(cfg.widths);
  BenchResult r = bench_setup(cfg);
  const auto t_all = Clock::now();
  PartsBar bar(cfg.show_progress, 1 + static_cast<long>(cfg.widths.size()) + (cfg.gpt_only ? 0 : 2));
  bar.start("sgemm");
  measure_sgemm_peak(r, cfg);
  bar.advance(fmt::format("gpt width {}", cfg.widths.front()));
  for (size_t i = 0; i < cfg.widths.size(); ++i) {
    r.gpt.push_back(measure_gpt_width(cfg, cfg.widths[i], warmup, steps));
    bar.advance(i + 1 < cfg.widths.size() ? fmt::format("gpt width {}", cfg.widths[i + 1]) : "ensemble");
  }
  if (!cfg.gpt_only) {
    measure_ensemble(r, cfg, warmup, steps);  // 8 members at width 64 against one
    bar.advance("coordcheck");
    measure_coordcheck_step(r, cfg);
    bar.advance("");
  }
  r.wall_s = seconds_since(t_all);
  bar.finish();
  return r;
}

std::string render_bench(const BenchResult& r) {
  std::string out = fmt::format("\nspeed benchmark ({}, {} intra-op thread{}, {} BLAS, {} inter-op)\n", r.device,
                                r.threads, r.threads == 1 ? "" : "s", r.blas_threads, r.interop_threads);
  out += fmt::format("  sgemm {}^3 float32        {:.1f} GFLOP/s (best of a few)\n", r.sgemm_n, r.sgemm_gflops);
  out += fmt::format("  GPT training (depth {}, seq {}, batch {}, AdamW, autocast {}{}; flops/token = 6 N + 12 L T d)\n",
                     r.depth, r.seq_len, r.batch, r.autocast, r.cuda_graph ? ", CUDA graphs" : "");
  out += fmt::format("  {:>6} {:>10} {:>9} {:>10} {:>9} {:>8}\n", "width", "params", "step ms", "tokens/s", "GFLOP/s",
                     "% sgemm");
  for (const GptBench& g : r.gpt)
    out += fmt::format("  {:>6} {:>10} {:>9.1f} {:>10.0f} {:>9.1f} {:>7.1f}%\n", g.width, g.params, g.step_ms,
                       g.tokens_per_s, g.gflops, 100.0 * g.gflops / std::max(r.sgemm_gflops, 1e-9));
  if (r.ensemble_one_s > 0)
    out += fmt::format("  ensemble: {} members at width {} take {:.2f}x the time of one ({}; {:.2f} s vs {:.2f} s)\n",
                     r.ensemble_members, r.ensemble_width, r.ensemble_ratio,
                     r.ensemble_batched ? "batched" : "one run per member", r.ensemble_all_s, r.ensemble_one_s);
  if (r.ensemble_loop_s > 0)
    out += fmt::format("  ensemble optimizer: fused kernels {:.2f} s, per-tensor loop {:.2f} s ({:.2f}x)\n",
                       r.ensemble_all_s, r.ensemble_loop_s, r.ensemble_loop_s / r.ensemble_all_s);
  if (r.coordcheck_step_ms > 0) out += fmt::format("  coordcheck: {:.1f} ms per step ({})\n", r.coordcheck_step_ms, r.coordcheck_setup);
  out += fmt::format("  wall time {}\n", format_duration(r.wall_s));
  return out;
}

nlohmann::json bench_to_json(const BenchResult& r) {
  nlohmann::json gpt = nlohmann::json::array();
  for (const GptBench& g : r.gpt)
    gpt.push_back({{"width", g.width},
                   {"tokens_per_s", g.tokens_per_s},
                   {"gflops", g.gflops},
                   {"params", g.params},
                   {"flops_per_token", g.flops_per_token},
                   {"step_ms", g.step_ms},
                   {"sgemm_fraction", g.gflops / std::max(r.sgemm_gflops, 1e-9)}});
  nlohmann::json j = {{"depth", r.depth}, {"seq_len", r.seq_len}, {"batch", r.batch}, {"autocast", r.autocast}, {"cuda_graph", r.cuda_graph},
                      {"sgemm_gflops", r.sgemm_gflops},
                      {"sgemm_n", r.sgemm_n},
                      {"gpt", gpt},
                      {"device", r.device},
                      {"threads", r.threads},
                      {"blas_threads", r.blas_threads},
                      {"interop_threads", r.interop_threads},
                      {"flops_formula", "6*params + 12*depth*seq_len*width per token"},
                      {"wall_s", r.wall_s}};
  if (r.ensemble_one_s > 0)
    j["ensemble"] = {{"members", r.ensemble_members}, {"width", r.ensemble_width},
                     {"time_ratio", r.ensemble_ratio}, {"one_s", r.ensemble_one_s},
                     {"all_s", r.ensemble_all_s},     {"batched", r.ensemble_batched}};
  if (r.ensemble_loop_s > 0) j["ensemble"]["loop_all_s"] = r.ensemble_loop_s;
  if (r.coordcheck_step_ms > 0) {
    j["coordcheck_step_ms"] = r.coordcheck_step_ms;
    j["coordcheck_setup"] = r.coordcheck_setup;
  }
  return j;
}

}  // namespace scaleinv
