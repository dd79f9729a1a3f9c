// The training loop. Read top to bottom: set up, (resume), step loop, finish.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/runtime/device.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "brain/util/stop_signal.h"
#include "engine/runtime/torch_compat.h"
#include "brain/util/writer_lock.h"
#include "engine/dist/dist.h"
#include "brain/models/model_kinds.h"
#include "engine/train/checkpoint.h"
#include "engine/train/make_run.h"
#include "engine/train/run_log.h"
#include "engine/train/step_loop.h"

namespace scaleinv {

namespace {

// Validation loss of the global batches; each rank evaluates its slice. The batches' losses stay
// on the device until all are computed (one read-back, not one device sync per batch) and are
// summed on the host in batch order, in double, as they always were. A mixture's expert counts of
// these batches are taken away (they never move a selection bias) into *max_violation (this
// rank's batches; expert_max_violation).
double evaluate(Model& model, const DataSource& data, const TrainConfig& cfg, torch::Device dev, DataParallel& dp,
                double* max_violation = nullptr) {
  torch::NoGradGuard ng;
  model.take_expert_counts();  // (nothing is pending: the step's balancing took the training counts)
  const compat::CudaAutocast autocast(dev.is_cuda() && cfg.train.autocast == "bf16");
  std::vector<torch::Tensor> losses;
  for (int64_t i = 0; i < cfg.train.eval_batches; ++i) {
    Batch b = data.batch(Split::Val, i, cfg.train.batch_size, dp.rank(), dp.world());
    losses.push_back(model.cross_entropy(compat::to_device_async(b.x, dev), compat::to_device_async(b.y, dev)).detach());
  }
  const torch::Tensor eval_counts = model.take_expert_counts();  // taken either way: never a bias's input
  if (max_violation) *max_violation = expert_max_violation(eval_counts);
  double total = 0;
  for (const double l : to_host(losses)) total += l;
  return dp.mean(total / static_cast<double>(std::max<int64_t>(1, cfg.train.eval_batches)));
}

// What a run trains: its parts (engine/train/make_run.h: the table, the context, the model on the device,
// built from cfg.train.seed: the same weights on every rank, which check_same_run verifies before
// anything is built, and the optimizer), the config as the log and checkpoint record it (with the
// table), the device and the data.
struct RunSetUp {
  RunParts parts;
  nlohmann::json cfg_json;
  torch::Device dev = torch::kCPU;
  std::unique_ptr<DataSource> data;
};

RunSetUp set_up(const TrainConfig& cfg, DataParallel& dp) {
  RunSetUp r;
  ParamTable table = resolve_param(cfg);
  r.cfg_json = train_config_to_json(cfg);
  r.cfg_json["table"] = param_to_json(table);
  dp.check_same_run(r.cfg_json, param_fingerprint(table));  // every rank builds the same model
  r.dev = resolve_device(cfg.train.device, cfg.source, "train.device", dp.local_rank());
  if (dp.active()) compat::use_device(r.dev);  // this rank's GPU for CUDA calls that name no tensor (NCCL's)
  r.parts = make_run(cfg, {.table = std::move(table), .device = r.dev});
  r.data = make_data(cfg.data);
  check_data_fits(cfg, *r.data);
  check_batch_fits_in_memory(cfg.model, cfg.train.batch_size / std::max(1, dp.world()));
  return r;
}

// The summary's fields known before the first step.
RunResult start_summary(const DataParallel& dp, const DataSource& data, Model& model) {
  RunResult s;
  s.rank = dp.rank();
  s.world = dp.world();
  s.unigram_entropy = data.is_language() ? data.unigram_entropy() : 0.0;
  s.items_unit = data.is_language() ? "tok" : "samples";
  for (const auto& p : model.tagged_parameters()) s.params += p.tensor.numel();
  return s;
}

// One writer per run directory (issue 38: two runs on one out_dir interleaved their metrics),
// held until the run ends; a killed run's lock goes with its process.
void lock_run_dir(WriterLock& lock, const TrainConfig& cfg) {
  ensure_parent_dir(cfg.train.out_dir + "/run.lock", "train.out_dir");
  if (const auto holder = lock.try_acquire(cfg.train.out_dir + "/run.lock", "train.out_dir"))
    throw UserError(cfg.source, "train.out_dir",
                    fmt::format("another scaleinv run{} is writing to {}", holder->empty() ? "" : " (" + *holder + ")",
                                cfg.train.out_dir),
                    "wait for it to finish, or choose another out_dir");
}

// Loads the checkpoint rank 0 sent (`ckpt_in`, empty: none) into the model and optimizer after
// checking that it belongs to this run; returns the step it was at (0 without one) and puts its
// losses in s.losses, so that the summary covers the whole run.
int64_t resume_checkpoint(const std::string& ckpt_in, const TrainConfig& cfg, const RunOptions& opts,
                          const ParamTable& table, Model& model, Optimizer* opt, RunResult& s) {
  if (ckpt_in.empty()) return 0;
  const std::string ckpt = cfg.train.out_dir + "/checkpoint.pt";
  if (!opts.resume)
    throw UserError(cfg.source, "train.out_dir", fmt::format("'{}' already holds a checkpoint", cfg.train.out_dir),
                    "pass --resume to continue it, or choose another out_dir");
  CheckpointMeta meta = read_checkpoint_meta(ckpt_in);
  if (meta.fingerprint != param_fingerprint(table))
    throw UserError(ckpt, "param", "the checkpoint was trained under a different parameterization table",
                    "resume with the checkpoint's param, or use another out_dir");
  if (const auto diff = run_altering_differences(meta.config, cfg); !diff.empty()) {
    const nlohmann::json was = train_config_to_json(meta.config);
    const std::string& f = diff.front();
    const size_t dot = f.find('.');
    throw UserError(cfg.source, f,
                    fmt::format("differs from the checkpoint's run in {} ({} was {}{})", cfg.train.out_dir, f,
                                was[f.substr(0, dot)][f.substr(dot + 1)].dump(),
                                diff.size() > 1 ? fmt::format("; {} more field(s) differ", diff.size() - 1) : ""),
                    "resume with the config the run started with, or choose another out_dir");
  }
  if (meta.step > cfg.train.steps)
    throw UserError(cfg.source, "train.steps",
                    fmt::format("is {} but the checkpoint in {} is already at step {}", cfg.train.steps,
                                cfg.train.out_dir, meta.step),
                    fmt::format("set train.steps to at least {} to continue the run", meta.step));
  load_checkpoint(ckpt_in, model, opt);
  s.losses = meta.losses;
  return meta.step;
}

// Simulated low precision (train.precision), active across every forward and backward pass while
// the returned scope lives; null for fp32.
std::unique_ptr<precision::Scope> low_precision_scope(const TrainConfig& cfg, Model& model) {
  const precision::Format f = precision::format_from_string(cfg.train.precision, cfg.source, "train.precision");
  if (f == precision::Format::FP32) return nullptr;
  auto scope = std::make_unique<precision::Scope>(f);
  for (const auto& p : model.tagged_parameters()) scope->name_tensor(p.tensor, p.name);
  return scope;
}

// The step losses, into s.losses. Deferred (on CUDA and in a data-parallel run:
// RunOptions::loss_readback) they stay where they are made and are read back only where a step is
// logged, evaluated, checkpointed or reported: no device sync per step, and with ranks one
// all-reduce of all the losses since the last read-back instead of one per step (every rank reads
// back at the same steps, so every rank finds the same global losses). A non-finite loss is then
// found at the read-back: the run ends as diverged at that step, the steps after it are dropped,
// and no checkpoint is written after it (a read-back precedes every save). Otherwise each loss is
// read at once and a diverged step takes no update.
class LossBook {
 public:
  LossBook(bool deferred, DataParallel& dp, RunResult& s) : deferred_(deferred), dp_(dp), s_(s) {}
  bool deferred() const { return deferred_; }
  bool has_pending() const { return !pending_.empty(); }
  // Keeps the step's loss; false if it diverged (found at once only when not deferred).
  bool record(int64_t step, const torch::Tensor& loss) {
    if (deferred_) {
      pending_.push_back(loss.detach());
      return true;
    }
    const double lv = dp_.mean(loss.item<double>());  // the global batch's loss, the same on every rank
    if (!std::isfinite(lv)) {  // diverged: record it at this step, stop, never crash
      s_.diverged = true;
      s_.diverged_step = step;
      return false;
    }
    s_.losses.push_back(lv);
    return true;
  }
  // Appends the pending losses of the steps up to `done`; false (and s.diverged set) at the first
  // non-finite one.
  bool read_back(int64_t done) {
    const int64_t first_step = done - static_cast<int64_t>(pending_.size());
    const std::vector<double> v = dp_.mean(to_host(pending_));  // the global batch's losses (every rank the same)
    pending_.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        s_.diverged = true;
        s_.diverged_step = first_step + static_cast<int64_t>(i);
        return false;
      }
      s_.losses.push_back(v[i]);
    }
    return true;
  }

 private:
  bool deferred_;
  DataParallel& dp_;
  RunResult& s_;
  std::vector<torch::Tensor> pending_;  // device losses of the steps since the last read-back
};

// CUDA graphs (train.cuda_graph): the loop runs on a side stream; kWarmup eager steps (the lazy
// initialisations happen there, not under capture), then the next step's forward and backward are
// captured on its own batch and every later step refills the static batch in place and replays
// them. Backward creates each .grad inside the graph (zero_grad right before the capture) and
// every replay rewrites it; the optimizer's step stays outside, eager. As StepHooks::loss_and_grad.
class GraphStep {
 public:
  using Batch2 = std::pair<torch::Tensor, torch::Tensor>;
  GraphStep(const TrainConfig& cfg, int64_t start, Optimizer& opt, LossBook& book,
            std::function<Batch2(int64_t)> batch, std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> forward)
      : cfg_(cfg), start_(start), opt_(opt), book_(book), batch_(std::move(batch)), forward_(std::move(forward)) {}
  static constexpr int64_t kWarmup = 3;
  torch::Tensor operator()(int64_t step) {
    auto [x, y] = batch_(step);
    if (step < start_ + kWarmup) {
      torch::Tensor loss = forward_(x, y);
      if (!book_.record(step, loss)) return {};
      opt_.zero_grad();
      loss.backward();
      return loss;
    }
    if (!graph_) {
      gx_ = x;
      gy_ = y;
      opt_.zero_grad();
      try {
        graph_ = std::make_unique<compat::CudaGraph>([&] {
          torch::Tensor l = forward_(gx_, gy_);
          l.backward();
          gloss_ = l.detach();
        });
      } catch (const c10::Error& e) {  // ours, not the user's (exit 1), with the way around it
        std::string what = e.what_without_backtrace();
        what.resize(std::min(what.size(), what.find('\n')));
        throw std::runtime_error(fmt::format("{}: train.cuda_graph: capturing step {} failed ({}); set "
                                             "train.cuda_graph = false to train without CUDA graphs",
                                             cfg_.source, step + 1, what));
      }
    } else {
      gx_.copy_(x, /*non_blocking=*/true);
      gy_.copy_(y, /*non_blocking=*/true);
    }
    graph_->replay();
    const torch::Tensor loss = gloss_.clone();  // the next replay rewrites gloss
    return book_.record(step, loss) ? loss : torch::Tensor();
  }

 private:
  const TrainConfig& cfg_;
  int64_t start_;
  Optimizer& opt_;
  LossBook& book_;
  std::function<Batch2(int64_t)> batch_;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> forward_;
  std::unique_ptr<compat::CudaGraph> graph_;
  torch::Tensor gx_, gy_, gloss_;  // the graph's static batch and loss
};

void check_cuda_graphs(const TrainConfig& cfg, const DataParallel& dp) {
  if (!cfg.train.cuda_graph) return;
  if (dp.active())
    throw UserError(cfg.source, "train.cuda_graph", "CUDA graphs take one process (data parallelism hooks backward)",
                    "set train.cuda_graph = false for a data-parallel run");
  if (!compat::has_cuda_graphs())
    throw UserError(cfg.source, "train.cuda_graph", "this build has no CUDA graphs",
                    "build against a CUDA libtorch (docs/gpu.md) or set train.cuda_graph = false");
}

// Every rank starts from rank 0's parameters; backward then all-reduces gradient buckets.
void replicate_parameters(DataParallel& dp, Model& model) {
  std::vector<torch::Tensor> params;
  for (const auto& p : model.tagged_parameters()) params.push_back(p.tensor);
  dp.replicate(params);
}

// Whether the step losses stay on the device between read-backs (RunOptions::loss_readback).
bool deferred_readback(const RunOptions& opts, torch::Device dev, const DataParallel& dp) {
  using ReadBack = RunOptions::LossReadBack;
  return opts.loss_readback == ReadBack::AtReports ||
         (opts.loss_readback == ReadBack::Auto && (dev.is_cuda() || dp.active()));
}

// The step loop of one run, run_steps with the trainer's hooks, and what it keeps between steps:
// the losses (LossBook), the bar, the last validation loss, the clock; then the run's end. The
// run's parts, summary and log are the caller's; `save` writes a checkpoint (or nothing).
class TrainLoop {
 public:
  using Save = std::function<void(int64_t steps_done)>;
  TrainLoop(const TrainConfig& cfg, const RunOptions& opts, DataParallel& dp, RunSetUp& run, RunResult& s,
            RunLog& log, Save save, int64_t start)
      : cfg_(cfg), opts_(opts), dp_(dp), run_(run), s_(s), log_(log), save_(std::move(save)), start_(start),
        end_(opts.stop_after >= 0 ? std::min(cfg.train.steps, opts.stop_after) : cfg.train.steps),
        items_per_step_(cfg.train.batch_size * (run.data->is_language() ? cfg.model.seq_len : 1)),
        bar_(opts.show_progress && dp.is_root() ? std::make_unique<Progress>(cfg.train.steps, "train", "steps")
                                                : nullptr),
        bf16_(set_cuda_numerics(cfg, run.dev)),
        book_(deferred_readback(opts, run.dev, dp), dp, s),
        t0_(std::chrono::steady_clock::now()) {
    check_cuda_graphs(cfg, dp);
    // (Before the hooks: a captured graph, held by its hook, goes before the side stream it ran on.)
    side_.emplace(cfg.train.cuda_graph, run.dev);
    hooks_ = step_hooks();
  }
  TrainLoop(const TrainLoop&) = delete;  // the hooks hold `this`
  TrainLoop& operator=(const TrainLoop&) = delete;

  // Steps start .. end (train.steps, or RunOptions::stop_after); fills the summary's steps, time
  // and throughput, and returns the step the run ended at: a diverged run ends at the step whose
  // loss was non-finite (a deferred read-back finds it after later updates ran; those are dropped
  // with it).
  int64_t run() {
    int64_t step = run_steps(*run_.parts.opt, start_, end_, hooks_);
    if (s_.diverged) step = s_.diverged_step;
    s_.steps_done = step;
    s_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    s_.items_per_s = static_cast<double>((step - start_) * items_per_step_) / std::max(s_.wall_s, 1e-9);
    return step;
  }

  // The run's end at `step`: the diverged step's row, or the last evaluation (a run that reached
  // train.steps) and checkpoint; then the summary's losses, the bar's last line and run.json.
  void finish(int64_t step, precision::Scope* low_precision) {
    if (s_.diverged) {  // one row for the step that diverged (steps are counted 1-based in the log)
      log_.log({s_.diverged_step + 1, std::numeric_limits<double>::quiet_NaN(), cfg_.optim.lr, std::nullopt,
                s_.wall_s, 0});
    } else {
      if (step == cfg_.train.steps)
        val_ = evaluate(*run_.parts.model, *run_.data, cfg_, run_.dev, dp_, &s_.expert_max_violation);
      save_(step);
    }
    s_.final_loss = window_mean(s_.losses, kFinalWindow);
    s_.final_val_loss = val_;
    if (low_precision && opts_.precision_stats) *opts_.precision_stats = low_precision->all_stats();
    if (bar_) bar_->finish(s_.diverged ? fmt::format("diverged at step {}", s_.diverged_step) : "");
    log_.finish(run_result_to_json(s_));
  }

 private:
  StepHooks step_hooks() {
    StepHooks hooks;
    hooks.loss = [this](int64_t step) { return loss(step); };
    if (cfg_.train.cuda_graph)
      hooks.loss_and_grad = [g = std::make_shared<GraphStep>(
                                 cfg_, start_, *run_.parts.opt, book_,
                                 [this](int64_t step) { return batch_on_device(step); },
                                 [this](const torch::Tensor& x, const torch::Tensor& y) { return forward(x, y); })](
                                int64_t step) { return (*g)(step); };
    // With ranks, backward all-reduces gradient buckets as it fills them; then every rank holds the
    // global batch's mean gradient.
    // A mixture's balancing then reads the step's expert counts (with ranks, their mean over
    // ranks: every rank moves its selection bias alike).
    hooks.after_backward = [this](int64_t) {
      dp_.average_gradients();
      run_.parts.model->balance_experts([this](const torch::Tensor& c) { return mean_over_ranks(c); });
      return true;
    };
    hooks.after_step = [this](int64_t done) { return after_step(done); };
    return hooks;
  }

  torch::Tensor mean_over_ranks(const torch::Tensor& c) {
    if (!dp_.active()) return c;
    const torch::Tensor host = c.to(torch::kCPU, torch::kFloat64).contiguous();
    std::vector<double> v = dp_.mean(std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel()));
    return torch::tensor(v, torch::kFloat64).view(c.sizes());
  }

  // One forward pass, under bf16 autocast where asked (its scope is this pass).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& y) {
    const compat::CudaAutocast autocast(bf16_);
    return run_.parts.model->loss(x, y);
  }

  GraphStep::Batch2 batch_on_device(int64_t step) {
    Batch b = run_.data->batch(Split::Train, step, cfg_.train.batch_size, dp_.rank(), dp_.world());  // this rank's slice
    return std::make_pair(compat::to_device_async(b.x, run_.dev), compat::to_device_async(b.y, run_.dev));
  }

  torch::Tensor loss(int64_t step) {
    auto [x, y] = batch_on_device(step);
    torch::Tensor loss = forward(x, y);
    return book_.record(step, loss) ? loss : torch::Tensor();
  }

  // A stop signal (RunOptions::stop_on_signal): the step just done is the last; its pending losses
  // are read back so the checkpoint written at the end holds them.
  bool stop_now(int64_t done) {
    const bool may_stop = opts_.stop_on_signal && !dp_.active();
    if (!may_stop || stop_requested() == 0 || done == end_) return false;
    if (book_.deferred() && book_.has_pending() && !book_.read_back(done)) return true;
    s_.stopped_by = stop_requested();
    return true;
  }

  bool after_step(int64_t done) {
    const bool eval_now = cfg_.train.eval_every > 0 && done % cfg_.train.eval_every == 0;
    const bool log_now =
        done % std::max<int64_t>(1, cfg_.train.log_every) == 0 || eval_now || done == cfg_.train.steps;
    const bool save_now = cfg_.train.checkpoint_every > 0 && done % cfg_.train.checkpoint_every == 0;
    if (book_.deferred() && (log_now || save_now || done == end_) && !book_.read_back(done)) return false;
    if (book_.deferred() && !log_now && !save_now) {  // no new loss to report until the next read-back
      if (bar_) bar_->update(done, bar_status_);  // the step count moves, with the last logged loss
      if (opts_.on_step) opts_.on_step(done);     // (a step count: a sweep's bar)
      return !stop_now(done);
    }
    const double lv = s_.losses.back();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double rate = static_cast<double>((done - start_) * items_per_step_) / std::max(elapsed, 1e-9);
    std::optional<double> val_now;
    if (eval_now) val_ = *(val_now = evaluate(*run_.parts.model, *run_.data, cfg_, run_.dev, dp_));
    if (log_now) log_.log({done, lv, cfg_.optim.lr * schedule_factor(cfg_.optim, done - 1), val_now, elapsed, rate});
    if (save_now) save_(done);
    if (bar_) {
      bar_status_ = fmt::format("loss {:.4f}{} | {} {}/s", lv,
                                std::isnan(val_) ? "" : fmt::format(" val {:.4f}", val_), format_rate(rate),
                                s_.items_unit);
      bar_->update(done, bar_status_);
    }
    if (opts_.on_step) opts_.on_step(done);
    return !stop_now(done);
  }

  const TrainConfig& cfg_;
  const RunOptions& opts_;
  DataParallel& dp_;
  RunSetUp& run_;
  RunResult& s_;
  RunLog& log_;
  Save save_;
  const int64_t start_;
  const int64_t end_;
  const int64_t items_per_step_;
  std::unique_ptr<Progress> bar_;
  std::string bar_status_;  // the bar's text at the last logged step
  const bool bf16_;         // CUDA: bf16 autocast per forward pass (train.autocast)
  LossBook book_;
  const std::chrono::steady_clock::time_point t0_;
  double val_ = std::numeric_limits<double>::quiet_NaN();
  std::optional<compat::CudaSideStream> side_;  // train.cuda_graph: the loop's own stream
  StepHooks hooks_;
};

}  // namespace

void check_data_fits(const TrainConfig& cfg, const DataSource& data) {
  if (data.is_language() != model_kind(cfg.model.kind).language())
    throw UserError(cfg.source, "data.source",
                    fmt::format("'{}' does not fit model '{}'", cfg.data.source, cfg.model.kind), data_fit_fix());
  if (data.num_classes() > (data.is_language() ? cfg.model.vocab : cfg.model.n_classes))
    throw UserError(cfg.source, data.is_language() ? "model.vocab" : "model.n_classes",
                    fmt::format("the data has {} classes/tokens, more than the model's output", data.num_classes()),
                    fmt::format("set it to at least {}", data.num_classes()));
}

RunResult train_run(const TrainConfig& cfg, const RunOptions& opts) {
  const ConfigSource config_source(cfg.source);  // library checks name this file
  // --- set up: ranks, table, model, optimizer, data ----------------------------------------
  // One process unless WORLD_SIZE > 1 (engine/dist/dist.h); then cfg.train.batch_size is the global batch.
  DataParallel dp(opts.data_parallel ? dist_env_from_environment() : DistEnv{}, cfg.train.dist_timeout_s);
  RunSetUp run = set_up(cfg, dp);
  const ParamTable& table = run.parts.table;
  Model& model = *run.parts.model;
  Optimizer* opt = run.parts.opt.get();
  const std::unique_ptr<precision::Scope> low_precision = low_precision_scope(cfg, model);
  RunResult s = start_summary(dp, *run.data, model);

  // --- resume ----------------------------------------------------------------------------------
  const bool writes = opts.write_files && dp.is_root();  // only rank 0 writes checkpoints and metrics
  WriterLock run_lock;
  if (writes) lock_run_dir(run_lock, cfg);
  const std::string ckpt = cfg.train.out_dir + "/checkpoint.pt";
  // Every rank resumes from rank 0's checkpoint (sent over the group: no shared disk needed, and
  // the world size may differ from the one that wrote it).
  const int64_t start =
      resume_checkpoint(opts.write_files ? dp.fetch_from_root(ckpt) : "", cfg, opts, table, model, opt, s);
  replicate_parameters(dp, model);
  RunLog log(writes ? cfg.train.out_dir : "");
  log.start(start, run.cfg_json);
  auto save = [&](int64_t steps_done) {
    if (!writes) return;
    log.keep();  // a checkpoint makes the run resumable: its log stays with it
    save_checkpoint(ckpt, CheckpointMeta{steps_done, table, cfg, param_fingerprint(table), s.losses}, model, opt);
  };

  // --- the step loop, then the run's end -------------------------------------------------------
  TrainLoop loop(cfg, opts, dp, run, s, log, save, start);
  const int64_t step = loop.run();
  loop.finish(step, low_precision.get());
  return s;
}

std::string render_summary(const TrainConfig& cfg, const RunResult& s) {
  std::string out = "\nrun summary\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<22} {}\n", k, v); };
  row("model", fmt::format("{} width {} depth {} ({} params)", cfg.model.kind, cfg.model.width, cfg.model.depth,
                           s.params));
  row("parameterization", fmt::format("{} / {} lr {}", cfg.param, cfg.optim.kind, cfg.optim.lr));
  row("steps", fmt::format("{} / {}", s.steps_done, cfg.train.steps));
  if (s.world > 1)
    row("data-parallel", fmt::format("{} ranks, global batch {} ({} per rank)", s.world, cfg.train.batch_size,
                                     cfg.train.batch_size / s.world));
  row("train loss (last 10%)", std::isfinite(s.final_loss) ? fmt::format("{:.4f}", s.final_loss) : "-");
  row("val loss", std::isfinite(s.final_val_loss) ? fmt::format("{:.4f}", s.final_val_loss) : "-");
  if (std::isfinite(s.expert_max_violation))
    row("expert load", fmt::format("busiest expert {:+.0f}% over an even share (val batches)", 100 * s.expert_max_violation));
  if (s.unigram_entropy > 0) row("unigram entropy", fmt::format("{:.4f} nats/token", s.unigram_entropy));
  row("throughput", fmt::format("{} {}/s", format_rate(s.items_per_s), s.items_unit));
  row("wall time", format_duration(s.wall_s));
  row("status", s.diverged ? fmt::format("DIVERGED at step {}", s.diverged_step)
                : s.stopped_by ? fmt::format("stopped by {} after step {}", stop_signal_name(s.stopped_by), s.steps_done)
                               : "ok");
  if (!cfg.train.out_dir.empty()) row("output", cfg.train.out_dir);
  return out;
}

}  // namespace scaleinv
