#pragma once
// Helpers shared by the diagnostics (src/engine/diagnostics/diagnostics.h); not part of the public API.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "brain/util/progress.h"
#include "engine/data/data.h"
#include "engine/models/layers.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"

namespace scaleinv::diag::detail {

// UserError("command line", option, problem, fix) unless ok.
void require(bool ok, const std::string& option, const std::string& problem, const std::string& fix);
// Positive, at least `min_count` distinct values (a fit needs two).
void require_grid(const std::vector<int>& v, const std::string& option, size_t min_count = 2);
void require_optimizer(const std::string& kind);
// --lr: finite and > 0 (as optim.lr in a config); `example` is the fix, e.g. "--lr 0.01".
void require_lr(double lr, const std::string& example);
void require_activation(const std::string& name);

// A preset, a TOML file, or "ode": depth-mup with (alpha, gamma) = (1, 0) (seed 004 Claim 5.4,
// the ODE limit): branch L^-1, in-block LRs not depth-scaled, Adam epsilon following the L^-1
// gradients of W_l; every other number of depth-mup unchanged.
ParamTable load_diag_param(const std::string& name);

// The optimizer the diagnostics train with: the table's per-tensor factors, base LR `lr`,
// betas (beta1, 0.999), epsilon 1e-8, no weight decay, constant LR. With train_io = false only the
// tensors inside residual blocks train (seed 004's convention: U and V frozen).
std::unique_ptr<Optimizer> make_diag_optimizer(Model& model, const std::string& kind, double lr, double beta1,
                                               bool train_io = true);

// `steps` training steps on the one step loop (engine/train/step_loop.h), step t on batch(t); returns
// every step's loss. A non-finite loss does not stop the steps: the diagnostics then report NaN
// ratios, which print and serialise as nan / null. on_step(steps_done, loss), when given, runs
// after every update.
std::vector<double> train_steps(Model& model, Optimizer& opt, int steps, const std::function<Batch(int64_t)>& batch,
                                const std::function<void(int64_t, double)>& on_step = {});

// Dense inputs for the residual MLP: xi ~ N(0, I_in_dim) from `seed`, labels from a random
// linear teacher (argmax of xi T, T ~ N(0, 1), drawn from `teacher_seed`) over n_classes.
Batch gaussian_batch(uint64_t seed, uint64_t teacher_seed, int64_t batch, int64_t in_dim, int64_t n_classes);

// Var(MS(phi(z))) for z ~ N(0, s2) in the wide limit, i.e. Var(phi(z)) (the mean is removed by MS).
// Closed form for linear, relu, abs; Gauss-Hermite quadrature for tanh and gelu.
double var_phi(const std::string& activation, double s2);

// What a measurement reads of a model, found by role and type (Model::record's roles, the tagged
// tensors' roles, engine/models/layers.h's typed parts), never by the zoo's internal names:
// - the activations recorded by one forward of x, in forward order, with their roles;
// - a transformer's residual stream: the embedding's output z_0, then every block's output (a
//   hidden activation inside a block) z_1..z_L;
// - its blocks, in forward order;
// - the model's own final norm (a NormGain among its direct children; nullptr when it has none,
//   std::logic_error when it has several);
// - the hidden matrices in registration (forward) order, and the readout (a tied embedding when the
//   model ties them; std::logic_error when there is none), each cloned.
struct RecordedForward {
  std::vector<torch::Tensor> tensors;
  std::vector<Model::ActivationRole> roles;
};
RecordedForward recorded_forward(Model& m, const torch::Tensor& x);
std::vector<torch::Tensor> transformer_stream(const RecordedForward& rec);
std::vector<std::shared_ptr<TransformerBlock>> transformer_blocks(Model& m);
std::shared_ptr<NormGain> final_norm(Model& m);
std::vector<torch::Tensor> hidden_weights(Model& m);
torch::Tensor readout_weight(Model& m);

// A progress bar that can be switched off (tests).
class Bar {
 public:
  Bar(bool on, long total, const std::string& label);
  void tick(const std::string& status = "");   // one more run done
  void status(const std::string& status);       // redraw with a new status, same count
  void finish();

 private:
  std::optional<Progress> p_;
  long done_ = 0;
};

}  // namespace scaleinv::diag::detail
