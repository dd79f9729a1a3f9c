#pragma once
// One run's measurement, step by step: the seven quantities of coordcheck.h on the tensors a
// forward recorded and on the trainable parameters. The one implementation behind the zoo's check
// (run_coordcheck) and a user module's (engine/adapt/module_coordcheck.h); the Python module measures
// the same quantities with the same definitions (python/scaleinv/_coordcheck.py).
//
//   CoordRecorder rec(T, cfg.quantities);
//   for t = 0..T: forward on the probe (activations retain their grad), backward,
//                 rec.record(t, activations, params); if t == T stop;
//                 rec.before_update(params); optimizer step
//   CoordRun run = rec.run();   // then set width, depth, seed, loss
//
// RMS values are computed in the tensor's own precision (float32 for float32 and lower: no double
// copy of a width^2 matrix); spectral norms by spectral_norm (coordcheck.h). A quantity outside
// the mask is not measured and gets no series (so no row).
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/coordcheck/coordcheck.h"
#include "engine/optim/optimizer.h"

namespace scaleinv {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class CoordRecorder {
 public:
  // stacks: parameters that are stacks of matrices along dim 0 (a mixture's experts [E, out, in]):
  // their ||W||, ||dW|| are the largest of the E matrices' norms, their shape one matrix's.
  CoordRecorder(int steps, unsigned quantities, std::set<std::string> stacks = {});
  // After the backward at step t: h, dh (against step 0's h), h' of every activation (its grad
  // retained; 0-filled when none), W', dW (against before_update's copy), ||W||, ||dW|| of every
  // parameter. Series appear in first-seen order.
  void record(int t, const NamedTensors& activations, const NamedTensors& params);
  // Before the optimizer's step: keep the parameters (one buffer per tensor, reused every step).
  void before_update(const NamedTensors& params);
  const CoordRun& run() const { return run_; }
  CoordRun& run() { return run_; }

 private:
  CoordSeries* put(CoordQuantity q, const std::string& layer, int t, double v);
  bool wants(CoordQuantity q) const { return (mask_ >> static_cast<int>(q)) & 1u; }
  int steps_;
  unsigned mask_;
  CoordRun run_;
  std::vector<std::pair<std::string, size_t>> index_;  // (quantity#layer, series index)
  std::vector<torch::Tensor> h0_, prev_;
  std::set<std::string> stacks_;
};

// One run's steps, both checks' hooks on the one step loop (engine/train/step_loop.h): at t = 0..T,
// loss(0, true) (the probe, recording on), its backward, recorder.record(t, recorded(), params);
// then (t < T) the update on batch t mod n_batches (loss(b, false)'s gradient; the probe's own
// when b = 0) with the schedule of opt.config(). A non-finite probe loss ends the run as diverged. Returns the run
// with its loss and series (width, depth, seed left to the caller).
using CoordLoss = std::function<torch::Tensor(size_t batch, bool record)>;
CoordRun measure_coord_steps(int steps, unsigned quantities, size_t n_batches, const CoordLoss& loss,
                             const std::function<NamedTensors()>& recorded, const NamedTensors& params,
                             Optimizer& opt, const std::set<std::string>& stacks = {});

}  // namespace scaleinv
