// Batched ensembles (train/ensemble.h). Read top to bottom: check the members, build each member's
// single-model init and stack it, per-member LR and weight decay, the step loop, the summaries.
#include "train/ensemble.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/errors.h"
#include "core/progress.h"
#include "core/torch_compat.h"
#include "models/model_kinds.h"
#include "train/make_run.h"
#include "train/step_loop.h"

namespace scaleinv {

bool batching_pays(const TrainConfig& c) { return c.train.device != "cpu"; }

bool will_batch(const TrainConfig& c, Batching mode) {
  if (mode == Batching::Off || !ensemble_supported(c)) return false;
  return mode == Batching::On || batching_pays(c);
}

bool ensemble_supported(const TrainConfig& c) {
  const std::string& k = c.model.kind;
  const std::string& o = c.optim.kind;
  const ModelKind* kind = find_model_kind(k);
  if (!kind || !kind->ensemble) return false;
  if (!(o == "sgd" || o == "adam" || o == "adamw" || o == "sign" || o == "muon") || c.optim.clip_grad_norm != 0)
    return false;
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

std::vector<RunSummary> one_by_one(const std::vector<TrainConfig>& members, const EnsembleOptions& opts) {
  std::vector<RunSummary> out;
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

}  // namespace

std::vector<RunSummary> train_ensemble(const std::vector<TrainConfig>& members, const EnsembleOptions& opts) {
  if (members.empty()) return {};
  const ConfigSource config_source(members[0].source);  // library checks name this file
  const std::string key = ensemble_key(members[0]);
  for (const auto& m : members)
    if (ensemble_key(m) != key)
      throw std::invalid_argument("train_ensemble: members differ in more than lr, weight_decay and seeds");
  if (members.size() == 1 || !will_batch(members[0], opts.batching)) return one_by_one(members, opts);

  // --- set up: one table and shape for all, each member's data ------------------------------
  const TrainConfig& c0 = members[0];
  const auto E = static_cast<int64_t>(members.size());
  const ParamTable table = resolve_param(c0);
  const ScaleContext ctx = run_context(c0, table);
  validate_optim_config(c0.optim);
  const torch::Device dev = resolve_device(c0.train.device, c0.source, "train.device");
  // CUDA: bf16 autocast (train.autocast) and TF32 (train.tf32), as in train_run.
  if (dev.is_cuda()) compat::set_tf32(c0.train.tf32);
  const bool bf16 = dev.is_cuda() && c0.train.autocast == "bf16";  // autocast per forward pass
  std::map<int64_t, std::shared_ptr<DataSource>> by_seed;  // members sharing a data seed share the source
  std::vector<std::shared_ptr<DataSource>> data;
  for (const auto& m : members) {
    auto& d = by_seed[m.data.seed];
    if (!d) {
      d = make_data(m.data);
      check_data_fits(m, *d);
    }
    data.push_back(d);
  }
  const bool language = data[0]->is_language();

  // --- the stacked model: member e starts from the tensors its own run would build -------------
  ScaleContext ectx = ctx;
  ectx.members = static_cast<int>(E);
  // (Its own init is overwritten below; drawn under the lock all the same, see build_model_seeded.)
  std::shared_ptr<Model> model = build_model_seeded(static_cast<uint64_t>(c0.train.seed), c0.model, ectx, c0.hp);
  std::vector<TaggedParam> params = model->tagged_parameters();
  int64_t member_params = 0;
  {
    std::vector<std::vector<TaggedParam>> singles;
    for (const auto& m : members) {
      singles.push_back(build_model_seeded(static_cast<uint64_t>(m.train.seed), m.model, ctx, m.hp)->tagged_parameters());
    }
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<torch::Tensor> slices;
      for (const auto& s : singles) slices.push_back(s[i].tensor);
      params[i].tensor.copy_(torch::stack(slices));
      member_params += singles[0][i].tensor.numel();
    }
  }
  model->move_to(dev);
  params = model->tagged_parameters();

  // --- one optimizer over the stacked tensors, per-member base LR and weight decay -------------
  std::vector<double> lrs, wds;
  for (const auto& m : members) {
    lrs.push_back(m.optim.lr);
    wds.push_back(m.optim.weight_decay);
  }
  std::vector<ParamGroup> groups = param_groups(params, ctx);
  for (ParamGroup& g : groups) {
    g.member_lr = per_member(lrs, g.param.dim(), dev);
    g.member_wd = per_member(wds, g.param.dim(), dev);
  }
  auto opt = make_optimizer(c0.optim, std::move(groups));

  // --- the step loop -----------------------------------------------------------------------------
  std::vector<RunSummary> out(static_cast<size_t>(E));
  std::vector<bool> alive(static_cast<size_t>(E), true);
  std::vector<double> val(static_cast<size_t>(E), std::numeric_limits<double>::quiet_NaN());
  auto stacked = [&](Split split, int64_t step, int64_t B) {
    std::vector<torch::Tensor> xs, ys;
    for (int64_t e = 0; e < E; ++e) {
      Batch b = data[static_cast<size_t>(e)]->batch(split, step, B, 0, 1);
      xs.push_back(b.x);
      ys.push_back(b.y);
    }
    return std::make_pair(compat::to_device_async(torch::stack(xs), dev), compat::to_device_async(torch::stack(ys), dev));
  };
  // The members' validation losses: every batch's [E] losses stay on the device until all are
  // computed (one read-back, as train_run's evaluation), then each member's are summed on the host
  // in batch order, in double.
  auto evaluate = [&] {
    torch::NoGradGuard ng;
    const compat::CudaAutocast autocast(bf16);
    std::vector<torch::Tensor> losses;
    for (int64_t i = 0; i < c0.train.eval_batches; ++i) {
      auto [x, y] = stacked(Split::Val, i, c0.train.batch_size);
      losses.push_back(model->member_losses(x, y).detach());
    }
    const std::vector<double> v = to_host(losses);  // [batch][member]
    for (int64_t e = 0; e < E; ++e) {
      double total = 0;
      for (size_t i = 0; i < losses.size(); ++i) total += v[i * static_cast<size_t>(E) + static_cast<size_t>(e)];
      if (alive[size_t(e)]) val[size_t(e)] = total / static_cast<double>(std::max<int64_t>(1, c0.train.eval_batches));
    }
  };
  std::unique_ptr<Progress> bar;
  if (opts.show_progress) bar = std::make_unique<Progress>(c0.train.steps, fmt::format("ensemble x{}", E), "steps");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n_alive = E;
  // The losses stay on the device between read-backs (see EnsembleOptions::readback_every): the
  // alive mask is updated there at every step, the host's records at each read-back, step by step
  // in order, a member's first non-finite loss ending it at that step.
  const int64_t every = opts.readback_every > 0 ? opts.readback_every
                        : dev.is_cuda()         ? std::max<int64_t>(1, c0.train.log_every)
                                                : 1;
  torch::Tensor alive_dev = torch::ones({E}, torch::TensorOptions().dtype(torch::kBool).device(dev));
  std::vector<torch::Tensor> pending;  // [E] losses of the steps since the last read-back
  int64_t first_pending = 0;
  auto read_back = [&] {
    if (pending.empty()) return;
    const std::vector<double> r = to_host(pending);  // [step][member]
    const auto rows = static_cast<int64_t>(pending.size());
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t step = first_pending + i;
      for (int64_t e = 0; e < E; ++e) {
        if (!alive[size_t(e)]) continue;
        const double l = r[static_cast<size_t>(i * E + e)];
        if (!std::isfinite(l)) {  // diverged: recorded at this step (its loss left the sum then)
          alive[size_t(e)] = false;
          out[size_t(e)].diverged = true;
          out[size_t(e)].diverged_step = step;
          out[size_t(e)].steps_done = step;
          --n_alive;
          continue;
        }
        out[size_t(e)].losses.push_back(l);
      }
    }
    first_pending += rows;
    pending.clear();
  };
  StepHooks hooks;
  hooks.loss = [&](int64_t step) -> torch::Tensor {
    auto [x, y] = stacked(Split::Train, step, c0.train.batch_size);
    torch::Tensor losses;
    {
      const compat::CudaAutocast autocast(bf16);
      losses = model->member_losses(x, y);  // [E]
    }
    const torch::Tensor l = losses.detach();
    pending.push_back(l);
    alive_dev.logical_and_(torch::isfinite(l));
    if (static_cast<int64_t>(pending.size()) == every || step + 1 == c0.train.steps) {
      read_back();
      if (n_alive == 0) return {};
    }
    // The members are independent (every op is per member), so the sum's gradient is each
    // member's own gradient; a diverged member's loss is masked out of it (gradient 0).
    return torch::where(alive_dev, losses, torch::zeros_like(losses)).sum();
  };
  hooks.after_step = [&](int64_t done) {
    if (bar) bar->update(done, fmt::format("{} / {} members alive", n_alive, E));
    if (opts.on_step) opts.on_step(done * E);
    return true;
  };
  const int64_t step = run_steps(*opt, 0, c0.train.steps, hooks);  // (its last step read back)
  // Validation once, at the end (nothing logs intermediate evaluations of an ensemble).
  if (n_alive > 0 && step == c0.train.steps) evaluate();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bar) bar->finish(fmt::format("{} of {} members diverged", E - n_alive, E));

  // --- summaries: the ensemble's wall time is shared equally among the members -----------------
  const int64_t items_per_step = c0.train.batch_size * (language ? c0.data.seq_len : 1);
  for (int64_t e = 0; e < E; ++e) {
    RunSummary& s = out[size_t(e)];
    if (!s.diverged) s.steps_done = step;
    s.final_loss = window_mean(s.losses, kFinalWindow);
    s.final_val_loss = s.diverged ? std::numeric_limits<double>::quiet_NaN() : val[size_t(e)];
    s.unigram_entropy = language ? data[size_t(e)]->unigram_entropy() : 0.0;
    s.items_unit = language ? "tok" : "samples";
    s.params = member_params;
    s.wall_s = wall / static_cast<double>(E);
    s.items_per_s = static_cast<double>(static_cast<int64_t>(s.losses.size()) * items_per_step) /
                    std::max(s.wall_s, 1e-9);
  }
  return out;
}

}  // namespace scaleinv
