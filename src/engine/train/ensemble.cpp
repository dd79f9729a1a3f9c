// Batched ensembles (engine/train/ensemble.h). Read top to bottom: check the members, build each member's
// single-model init and stack it, per-member LR and weight decay, the step loop, the summaries.
#include "engine/train/ensemble.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "engine/runtime/torch_compat.h"
#include "brain/models/model_kinds.h"
#include "brain/optim/optimizer_kinds.h"
#include "engine/train/make_run.h"
#include "engine/train/step_loop.h"

namespace scaleinv {

bool batching_pays(const TrainConfig& c) { return c.train.device != "cpu"; }

bool will_batch(const TrainConfig& c, Batching mode) {
  if (mode == Batching::Off || !ensemble_supported(c)) return false;
  return mode == Batching::On || batching_pays(c);
}

bool ensemble_supported(const TrainConfig& c) {
  const std::string& k = c.model.kind;
  const ModelKind* kind = find_model_kind(k);
  if (!kind || !kind->ensemble) return false;
  const OptimizerKind* optimizer = find_optimizer_kind(c.optim.kind);
  if (!optimizer || !optimizer->ensemble || c.optim.clip_grad_norm != 0) return false;
  // Simulated precision (a thread-wide rounding scope) and unit-scaled ops (custom autograd with
  // per-op backward scales) are only wired into the single-model trainer.
  if (c.train.precision != "fp32") return false;
  const ParamTable t = resolve_param(c);
  if (t.unit.any()) return false;
  for (const auto& r : t.roles)
    if (r.unit != 0) return false;
  return true;
}

namespace {

std::vector<RunResult> one_by_one(const std::vector<TrainConfig>& members, const EnsembleOptions& opts) {
  std::vector<RunResult> out;
  RunOptions ro;
  ro.write_files = false;
  ro.data_parallel = false;
  ro.show_progress = opts.show_progress;
  int64_t before = 0;
  for (const auto& m : members) {
    if (opts.on_step) ro.on_step = [&](int64_t s) { opts.on_step(before + s); };
    out.push_back(train_run(m, ro));
    before += m.train.steps;
  }
  return out;
}

// A [E] vector viewed to broadcast against a [E, ...] tensor of `dims` dimensions.
torch::Tensor per_member(const std::vector<double>& v, int64_t dims, const torch::Device& dev) {
  std::vector<int64_t> shape(static_cast<size_t>(std::max<int64_t>(dims, 1)), 1);
  shape.front() = static_cast<int64_t>(v.size());
  return torch::tensor(v, torch::kFloat64).to(torch::kFloat32).view(shape).to(dev);
}

void check_same_key(const std::vector<TrainConfig>& members) {
  const std::string key = ensemble_key(members[0]);
  for (const auto& m : members)
    if (ensemble_key(m) != key)
      throw std::invalid_argument("train_ensemble: members differ in more than lr, weight_decay and seeds");
}

// Each member's data source; members sharing a data seed share the source.
std::vector<std::shared_ptr<DataSource>> member_data(const std::vector<TrainConfig>& members) {
  std::map<int64_t, std::shared_ptr<DataSource>> by_seed;
  std::vector<std::shared_ptr<DataSource>> data;
  for (const auto& m : members) {
    auto& d = by_seed[m.data.seed];
    if (!d) {
      d = make_data(m.data);
      check_data_fits(m, *d);
    }
    data.push_back(d);
  }
  return data;
}

// The stacked model on `dev`: member e starts from the tensors its own run would build (under its
// own seed, at the single model's context `ctx`), and one member's parameter count.
struct StackedModel {
  std::shared_ptr<Model> model;
  int64_t member_params = 0;
};

StackedModel build_stacked_model(const std::vector<TrainConfig>& members, const ScaleContext& ctx,
                                 const torch::Device& dev) {
  const TrainConfig& c0 = members[0];
  ScaleContext ectx = ctx;
  ectx.members = static_cast<int>(members.size());
  StackedModel r;
  // (Its own init is overwritten below; drawn under the lock all the same, see build_model_seeded.)
  r.model = build_model_seeded(static_cast<uint64_t>(c0.train.seed), c0.model, ectx, c0.hp);
  std::vector<TaggedParam> params = r.model->tagged_parameters();
  std::vector<std::vector<TaggedParam>> singles;
  for (const auto& m : members) {
    singles.push_back(build_model_seeded(static_cast<uint64_t>(m.train.seed), m.model, ctx, m.hp)->tagged_parameters());
  }
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<torch::Tensor> slices;
      for (const auto& s : singles) slices.push_back(s[i].tensor);
      params[i].tensor.copy_(torch::stack(slices));
      r.member_params += singles[0][i].tensor.numel();
    }
  }
  r.model->move_to(dev);
  return r;
}

// One optimizer over the stacked tensors, with each member's base LR and weight decay.
std::unique_ptr<Optimizer> member_optimizer(const std::vector<TrainConfig>& members, Model& model,
                                            const ScaleContext& ctx, const torch::Device& dev) {
  std::vector<double> lrs, wds;
  for (const auto& m : members) {
    lrs.push_back(m.optim.lr);
    wds.push_back(m.optim.weight_decay);
  }
  std::vector<ParamGroup> groups = param_groups(model.tagged_parameters(), ctx);
  for (ParamGroup& g : groups) {
    g.member_lr = per_member(lrs, g.param.dim(), dev);
    g.member_wd = per_member(wds, g.param.dim(), dev);
  }
  return make_optimizer(members[0].optim, std::move(groups));
}

// The batched ensemble's step loop, run_steps with one loss per member, and what it keeps between
// steps: each member's summary (losses, divergence), whether it is alive, its validation loss.
class MemberSteps {
 public:
  MemberSteps(const std::vector<TrainConfig>& members, const EnsembleOptions& opts, Model& model,
              const std::vector<std::shared_ptr<DataSource>>& data, const torch::Device& dev, bool bf16)
      : c0_(members[0]), opts_(opts), E_(static_cast<int64_t>(members.size())), model_(model), data_(data),
        dev_(dev), bf16_(bf16), out_(static_cast<size_t>(E_)), alive_(static_cast<size_t>(E_), true),
        val_(static_cast<size_t>(E_), std::numeric_limits<double>::quiet_NaN()) {}

  // Trains every step (its last read back), then evaluates the members still alive once, at the
  // end (nothing logs intermediate evaluations of an ensemble). Returns the steps the loop ran.
  int64_t run(Optimizer& opt) {
    if (opts_.show_progress)
      bar_ = std::make_unique<Progress>(c0_.train.steps, fmt::format("ensemble x{}", E_), "steps");
    t0_ = std::chrono::steady_clock::now();
    n_alive_ = E_;
    // The losses stay on the device between read-backs (see EnsembleOptions::readback_every): the
    // alive mask is updated there at every step, the host's records at each read-back, step by step
    // in order, a member's first non-finite loss ending it at that step.
    every_ = opts_.readback_every > 0 ? opts_.readback_every
             : dev_.is_cuda()         ? std::max<int64_t>(1, c0_.train.log_every)
                                      : 1;
    alive_dev_ = torch::ones({E_}, torch::TensorOptions().dtype(torch::kBool).device(dev_));
    StepHooks hooks;
    hooks.loss = [this](int64_t step) { return loss(step); };
    hooks.after_step = [this](int64_t done) {
      if (bar_) bar_->update(done, fmt::format("{} / {} members alive", n_alive_, E_));
      if (opts_.on_step) opts_.on_step(done * E_);
      return true;
    };
    const int64_t step = run_steps(opt, 0, c0_.train.steps, hooks);
    if (n_alive_ > 0 && step == c0_.train.steps) evaluate();
    wall_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (bar_) bar_->finish(fmt::format("{} of {} members diverged", E_ - n_alive_, E_));
    return step;
  }

  // One summary per member after `step` steps; the ensemble's wall time is shared equally.
  std::vector<RunResult> summaries(int64_t step, int64_t member_params) {
    const bool language = data_[0]->is_language();
    const int64_t items_per_step = c0_.train.batch_size * (language ? c0_.data.seq_len : 1);
    for (int64_t e = 0; e < E_; ++e) {
      RunResult& s = out_[size_t(e)];
      if (!s.diverged) s.steps_done = step;
      s.final_loss = window_mean(s.losses, kFinalWindow);
      s.final_val_loss = s.diverged ? std::numeric_limits<double>::quiet_NaN() : val_[size_t(e)];
      s.unigram_entropy = language ? data_[size_t(e)]->unigram_entropy() : 0.0;
      s.items_unit = language ? "tok" : "samples";
      s.params = member_params;
      s.wall_s = wall_ / static_cast<double>(E_);
      s.items_per_s = static_cast<double>(static_cast<int64_t>(s.losses.size()) * items_per_step) /
                      std::max(s.wall_s, 1e-9);
    }
    return out_;
  }

 private:
  // Every member's batch of `split` at `step`, stacked to [E, B, ...] on the device.
  std::pair<torch::Tensor, torch::Tensor> stacked(Split split, int64_t step, int64_t B) {
    std::vector<torch::Tensor> xs, ys;
    for (int64_t e = 0; e < E_; ++e) {
      Batch b = data_[static_cast<size_t>(e)]->batch(split, step, B, 0, 1);
      xs.push_back(b.x);
      ys.push_back(b.y);
    }
    return std::make_pair(compat::to_device_async(torch::stack(xs), dev_),
                          compat::to_device_async(torch::stack(ys), dev_));
  }

  // The members' validation losses: every batch's [E] losses stay on the device until all are
  // computed (one read-back, as train_run's evaluation), then each member's are summed on the host
  // in batch order, in double.
  void evaluate() {
    torch::NoGradGuard ng;
    const compat::CudaAutocast autocast(bf16_);
    std::vector<torch::Tensor> losses;
    for (int64_t i = 0; i < c0_.train.eval_batches; ++i) {
      auto [x, y] = stacked(Split::Val, i, c0_.train.batch_size);
      losses.push_back(model_.member_losses(x, y).detach());
    }
    const std::vector<double> v = to_host(losses);  // [batch][member]
    for (int64_t e = 0; e < E_; ++e) {
      double total = 0;
      for (size_t i = 0; i < losses.size(); ++i) total += v[i * static_cast<size_t>(E_) + static_cast<size_t>(e)];
      if (alive_[size_t(e)])
        val_[size_t(e)] = total / static_cast<double>(std::max<int64_t>(1, c0_.train.eval_batches));
    }
  }

  void read_back() {
    if (pending_.empty()) return;
    const std::vector<double> r = to_host(pending_);  // [step][member]
    const auto rows = static_cast<int64_t>(pending_.size());
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t step = first_pending_ + i;
      for (int64_t e = 0; e < E_; ++e) {
        if (!alive_[size_t(e)]) continue;
        const double l = r[static_cast<size_t>(i * E_ + e)];
        if (!std::isfinite(l)) {  // diverged: recorded at this step (its loss left the sum then)
          alive_[size_t(e)] = false;
          out_[size_t(e)].diverged = true;
          out_[size_t(e)].diverged_step = step;
          out_[size_t(e)].steps_done = step;
          --n_alive_;
          continue;
        }
        out_[size_t(e)].losses.push_back(l);
      }
    }
    first_pending_ += rows;
    pending_.clear();
  }

  torch::Tensor loss(int64_t step) {
    auto [x, y] = stacked(Split::Train, step, c0_.train.batch_size);
    torch::Tensor losses;
    {
      const compat::CudaAutocast autocast(bf16_);
      losses = model_.member_losses(x, y);  // [E]
    }
    const torch::Tensor l = losses.detach();
    pending_.push_back(l);
    alive_dev_.logical_and_(torch::isfinite(l));
    if (static_cast<int64_t>(pending_.size()) == every_ || step + 1 == c0_.train.steps) {
      read_back();
      if (n_alive_ == 0) return {};
    }
    // The members are independent (every op is per member), so the sum's gradient is each
    // member's own gradient; a diverged member's loss is masked out of it (gradient 0).
    return torch::where(alive_dev_, losses, torch::zeros_like(losses)).sum();
  }

  const TrainConfig& c0_;
  const EnsembleOptions& opts_;
  const int64_t E_;
  Model& model_;
  const std::vector<std::shared_ptr<DataSource>>& data_;
  const torch::Device dev_;
  const bool bf16_;  // CUDA: bf16 autocast per forward pass (train.autocast)
  std::vector<RunResult> out_;
  std::vector<bool> alive_;
  std::vector<double> val_;
  std::unique_ptr<Progress> bar_;
  std::chrono::steady_clock::time_point t0_;
  double wall_ = 0;
  int64_t n_alive_ = 0;
  int64_t every_ = 1;           // steps between read-backs
  torch::Tensor alive_dev_;     // [E] on the device: the members whose losses are all finite so far
  std::vector<torch::Tensor> pending_;  // [E] losses of the steps since the last read-back
  int64_t first_pending_ = 0;
};

}  // namespace

std::vector<RunResult> train_ensemble(const std::vector<TrainConfig>& members, const EnsembleOptions& opts) {
  if (members.empty()) return {};
  const ConfigSource config_source(members[0].source);  // library checks name this file
  check_same_key(members);
  if (members.size() == 1 || !will_batch(members[0], opts.batching)) return one_by_one(members, opts);

  // --- set up: one table and shape for all, each member's data ------------------------------
  const TrainConfig& c0 = members[0];
  const ParamTable table = resolve_param(c0);
  const ScaleContext ctx = run_context(c0, table);
  validate_optim_config(c0.optim);
  const torch::Device dev = resolve_device(c0.train.device, c0.source, "train.device");
  const bool bf16 = set_cuda_numerics(c0, dev);  // CUDA: TF32 and bf16 autocast as in train_run
  const std::vector<std::shared_ptr<DataSource>> data = member_data(members);

  // --- the stacked model and one optimizer with per-member LR and weight decay ----------------
  const StackedModel stacked = build_stacked_model(members, ctx, dev);
  const std::unique_ptr<Optimizer> opt = member_optimizer(members, *stacked.model, ctx, dev);

  // --- the step loop, then each member's summary ----------------------------------------------
  MemberSteps steps(members, opts, *stacked.model, data, dev, bf16);
  const int64_t step = steps.run(*opt);
  return steps.summaries(step, stacked.member_params);
}

}  // namespace scaleinv
