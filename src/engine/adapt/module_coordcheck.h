#pragma once
// The theory-judged coordinate check on a libtorch module scaleinv did not write, from C++ (issue
// 15): the twin of the Python module's scaleinv.coordcheck, measured by the zoo check's own
// recorder (engine/coordcheck/coord_recorder.h) and judged by judge_own_coordcheck (engine/coordcheck/coordcheck.h)
// against the table shifted to a' = 0 (seed 000 eq. 28), the row apply_parameterization trains with.
//
//   auto make = [](int width) { return std::make_shared<MyNetImpl>(width); };
//   auto loss = [](torch::nn::Module& m, const torch::Tensor& x, const torch::Tensor& y, ActivationTap& tap) {
//     auto& net = static_cast<MyNetImpl&>(m);
//     torch::Tensor h = torch::relu(tap("fc1", net.fc1->forward(x)));
//     return torch::nn::functional::cross_entropy(tap("head", net.head->forward(h)), y);
//   };
//   ModuleCoordCheck cc;
//   cc.widths = {128, 256, 512, 1024};
//   cc.optim.kind = "adamw";  cc.optim.lr = 1e-2;
//   CoordCheckResult r = coordcheck_module(make, loss, {{x, y}}, cc);
//   std::cout << render_coordcheck(r);   // r.pass(), r.rows, coordcheck_to_json(r), plot_coordcheck
//
// libtorch's C++ modules have no forward hooks, so the forward names what is measured:
// tap(name, h) returns h and, while the check records, keeps it with its gradient retained. Name a
// module's output after the module (as named_modules() names it): the layer map gives it the role
// of that module's own weight (embedding output -> h_1, readout output -> logits, hidden outputs
// -> h_2.. in forward order, or the residual stream when hidden tensors sit in repeated blocks).
// Every trainable parameter is measured (W', dW, ||W||, ||dW||) under its named_parameters() name.
//
// Per width and seed: torch::manual_seed(seed), make(width), apply_parameterization against
// make(base_width) and make(delta_width) (built once, under seed 0), make_optimizer, then steps
// updates; at steps 0..T forward and backward on the probe batch (the first), each update on
// batch t mod n (the probe's own gradient when n = 1). The caller's global generator state is
// restored afterwards. Throws UserError ("coordcheck", field) for fewer than 2 widths, no batches,
// no seeds, steps < 1, a tap that names no module; apply_parameterization's errors; a diverged run
// is recorded (its series end), not thrown.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "brain/adapt/own_model.h"
#include "engine/coordcheck/coord_recorder.h"
#include "engine/coordcheck/coordcheck.h"
#include "engine/optim/optimizer.h"

namespace scaleinv {

// What a forward hands its measured activations to (see above).
class ActivationTap {
 public:
  torch::Tensor operator()(const std::string& module, const torch::Tensor& h);
  bool recording = false;
  NamedTensors taken;  // this forward's taps, in order
};

struct ModuleCoordCheck {
  std::vector<int> widths;             // >= 2
  std::vector<int64_t> seeds = {0, 1, 2};
  int steps = 3;                       // T
  std::string param = "mup";           // a preset or a TOML table file
  OptimConfig optim;                   // kind, lr (the base LR), weight_decay, betas, eps, ...
  int base_width = 0;                  // where optim.lr counts as tuned (0: the smallest width)
  int delta_width = 0;                 // a second width, for which dimensions grow (0: the next)
  std::vector<RoleOverride> overrides;
  unsigned quantities = kAllCoordQuantities;
  std::string model_name = "own module";  // for the report's titles
  bool show_progress = true;
};

using ModuleFactory = std::function<std::shared_ptr<torch::nn::Module>(int width)>;
using TappedLoss = std::function<torch::Tensor(torch::nn::Module& model, const torch::Tensor& x,
                                               const torch::Tensor& y, ActivationTap& tap)>;

CoordCheckResult coordcheck_module(const ModuleFactory& make, const TappedLoss& loss,
                                   const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches,
                                   const ModuleCoordCheck& cc);

}  // namespace scaleinv
