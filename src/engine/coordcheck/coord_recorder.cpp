// CoordRecorder: the per-step measurement of coordcheck.h's quantities (see coord_recorder.h).
#include "engine/coordcheck/coord_recorder.h"

#include "brain/util/nonfinite.h"
#include "engine/runtime/tensor_rms.h"
#include "engine/train/step_loop.h"

#include <cmath>
#include <limits>
#include <utility>

namespace scaleinv {

namespace {
}

CoordRecorder::CoordRecorder(int steps, unsigned quantities, std::set<std::string> stacks)
    : steps_(steps), mask_(quantities), stacks_(std::move(stacks)) {
  run_.loss.assign(static_cast<size_t>(steps + 1), kNaN);
}

CoordSeries* CoordRecorder::put(CoordQuantity q, const std::string& layer, int t, double v) {
  if (!wants(q)) return nullptr;
  const std::string key = std::to_string(static_cast<int>(q)) + "#" + layer;
  size_t at = run_.series.size();
  for (const auto& [k, i] : index_)
    if (k == key) at = i;
  if (at == run_.series.size()) {
    index_.emplace_back(key, at);
    run_.series.push_back({q, layer, std::vector<double>(static_cast<size_t>(steps_ + 1), kNaN), {}});
  }
  run_.series[at].rms[static_cast<size_t>(t)] = v;
  return &run_.series[at];
}

void CoordRecorder::record(int t, const NamedTensors& activations, const NamedTensors& params) {
  for (size_t i = 0; i < activations.size(); ++i) {
    const auto& [name, h] = activations[i];
    put(CoordQuantity::H, name, t, tensor_rms(h));
    if (t == 0) {
      if (wants(CoordQuantity::DH)) h0_.push_back(h.detach().clone());
      put(CoordQuantity::DH, name, t, kNaN);
    } else {
      put(CoordQuantity::DH, name, t, i < h0_.size() ? tensor_rms(h.detach() - h0_[i]) : kNaN);
    }
    put(CoordQuantity::HGrad, name, t, tensor_rms(h.grad()));
  }
  const bool updates = wants(CoordQuantity::DW) || wants(CoordQuantity::DWSpec);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    put(CoordQuantity::WGrad, name, t, p.grad().defined() ? tensor_rms(p.grad()) : 0.0);
    // The update, in place in the copy taken before the step (no second width^2 buffer).
    const bool have = t > 0 && updates && i < prev_.size();
    const torch::Tensor dw = have ? prev_[i].neg_().add_(p.detach()) : torch::Tensor();
    put(CoordQuantity::DW, name, t, have ? tensor_rms(dw) : kNaN);
    if (p.dim() >= 2) {  // matrices only: a vector's "spectral norm" is its L2 norm, not Condition 1's
      const bool stack = p.dim() == 3 && stacks_.count(name) > 0;
      auto norm = [stack](const torch::Tensor& w) {
        if (!stack) return spectral_norm(w);
        // The largest of the stack's norms, one read-back; max propagates NaN, so a NaN norm stays NaN.
        return spectral_norms(w).max().item<double>();
      };
      if (wants(CoordQuantity::WSpec))
        put(CoordQuantity::WSpec, name, t, norm(p.detach()))->shape =
            stack ? std::vector<int64_t>{p.size(1), p.size(2)} : std::vector<int64_t>{p.size(0), p.numel() / p.size(0)};
      put(CoordQuantity::DWSpec, name, t, have && wants(CoordQuantity::DWSpec) ? norm(dw) : kNaN);
    }
  }
}

CoordRun measure_coord_steps(int steps, unsigned quantities, size_t n_batches, const CoordLoss& loss,
                             const std::function<NamedTensors()>& recorded, const NamedTensors& params,
                             Optimizer& opt, const std::set<std::string>& stacks) {
  CoordRecorder rec(steps, quantities, stacks);
  CoordRun& run = rec.run();
  StepHooks hooks;
  // Every step's loss is the probe batch's (batch 0), recorded.
  hooks.loss = [&](int64_t t) -> torch::Tensor {
    torch::Tensor lv = loss(0, true);
    const double v = lv.item<double>();
    run.loss[static_cast<size_t>(t)] = v;
    if (!std::isfinite(v)) {
      run.diverged = true;
      return {};
    }
    return lv;
  };
  hooks.after_backward = [&](int64_t t) {
    rec.record(static_cast<int>(t), recorded(), params);
    if (t == steps) return false;  // the last record needs no update after it
    // The update: on the probe batch itself (its gradient is already there) or on batch t mod n.
    const size_t bi = static_cast<size_t>(t) % n_batches;
    if (bi != 0) {
      opt.zero_grad();
      loss(bi, false).backward();
    }
    rec.before_update(params);
    return true;
  };
  run_steps(opt, 0, steps + 1, hooks);
  return std::move(run);
}

void CoordRecorder::before_update(const NamedTensors& params) {
  if (!(wants(CoordQuantity::DW) || wants(CoordQuantity::DWSpec))) return;
  if (prev_.size() != params.size()) {
    prev_.clear();
    for (const auto& [name, p] : params) prev_.push_back(p.detach().clone());
  } else {
    for (size_t i = 0; i < params.size(); ++i) prev_[i].copy_(params[i].second.detach());
  }
}

}  // namespace scaleinv
