#pragma once
// The one step loop of scaleinv. Every place that trains (the trainer, the batched ensemble, the
// coordinate check, the diagnostics) runs its steps through run_steps; what differs between them
// (which batch, how the loss is read, what is recorded, logged or saved) lives in its hooks.
//
// Per step t in [first, end):
//   loss = hooks.loss(t)              the forward pass of step t; the hook reads or records the
//                                     loss as its caller needs. An undefined tensor stops the
//                                     loop before the update (a diverged loss: no update taken).
//   opt.zero_grad(); loss.backward()
//   hooks.after_backward(t)           optional: all-reduce or record gradients, swap in another
//                                     batch's gradient; false stops the loop before the update.
//   opt.step(schedule_factor(opt.config(), t))   the LR schedule of brain/optim/schedule.h
//   hooks.after_step(t + 1)           optional, with the number of steps done: log, evaluate,
//                                     checkpoint, progress; false stops the loop after the update.
// With hooks.loss_and_grad set, it replaces the first two lines: it returns the loss and leaves
// the gradients in .grad itself (replaying a captured CUDA graph of forward and backward).
// Returns the number of updates taken counting from 0, i.e. the step the loop stopped at: t when a
// hook stopped it before step t's update, t + 1 when after_step stopped it, `end` when it ran out.
// Throws whatever the hooks and the optimizer throw; writes nothing itself.
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

#include "engine/optim/optimizer.h"

namespace scaleinv {

struct StepHooks {
  std::function<torch::Tensor(int64_t step)> loss;
  std::function<torch::Tensor(int64_t step)> loss_and_grad;  // optional: instead of loss + backward
  std::function<bool(int64_t step)> after_backward;
  std::function<bool(int64_t steps_done)> after_step;
};

int64_t run_steps(Optimizer& opt, int64_t first, int64_t end, const StepHooks& hooks);

// The values of equally shaped tensors on any device (losses kept there between read-backs), as
// host doubles: one stack and one copy back, so one device sync. Row-major: tensor i's elements
// (e.g. an ensemble's [E] member losses) at i * numel .. (i + 1) * numel. Empty in, empty out.
std::vector<double> to_host(const std::vector<torch::Tensor>& tensors);

}  // namespace scaleinv
