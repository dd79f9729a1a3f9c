// The one step loop (see step_loop.h).
#include "engine/train/step_loop.h"

#include "engine/optim/optimizer.h"

namespace scaleinv {

int64_t run_steps(Optimizer& opt, int64_t first, int64_t end, const StepHooks& hooks) {
  for (int64_t t = first; t < end; ++t) {
    if (hooks.loss_and_grad) {
      if (!hooks.loss_and_grad(t).defined()) return t;
    } else {
      const torch::Tensor loss = hooks.loss(t);
      if (!loss.defined()) return t;
      opt.zero_grad();
      loss.backward();
    }
    if (hooks.after_backward && !hooks.after_backward(t)) return t;
    opt.step(schedule_factor(opt.config(), t));
    if (hooks.after_step && !hooks.after_step(t + 1)) return t + 1;
  }
  return end;
}

std::vector<double> to_host(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return {};
  const torch::Tensor host = torch::stack(tensors).to(torch::kCPU, torch::kFloat64).contiguous();
  const double* v = host.data_ptr<double>();
  return {v, v + host.numel()};
}

}  // namespace scaleinv
