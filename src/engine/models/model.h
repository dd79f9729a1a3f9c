#pragma once
// Role-tagged models (docs/design.md "Where new things go": a model). Every trainable tensor is
// registered through TaggedModule::add_param with a ParamTag; the parameterization table then
// decides its forward multiplier, init std, LR, weight decay and epsilon. No parameterization is
// special-cased in model code: models only ask the ScaleContext for numbers.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "brain/models/model_config.h"
#include "brain/param/table.h"
#include "engine/param/tagged_param.h"

namespace scaleinv {

// A torch Module whose parameters carry roles. Subclass it for every layer that owns parameters.
class TaggedModule : public torch::nn::Module {
 public:
  // register_parameter + tag. Returns the registered tensor.
  torch::Tensor add_param(const std::string& name, torch::Tensor value, ParamTag tag);
  const std::map<std::string, ParamTag>& tags() const { return tags_; }
  // Marks a registered tensor as the tied embedding/readout (ParamTag::tied).
  void mark_tied(const std::string& name) { tags_.at(name).tied = true; }
  // Lays this module's own parameters out for a faster forward where it has such a layout (the
  // attention packs q, k, v into one buffer: engine/models/packed_rows.h); values, names and tags stay.
  // Model::move_to calls it on CUDA. The default does nothing.
  virtual void pack_weights() {}

 private:
  std::map<std::string, ParamTag> tags_;
};

// One model: forward maps inputs to logits; activations can be recorded for coordinate checks.
class Model : public TaggedModule {
 public:
  // x: [B, T] int64 tokens (bigram, gpt), [B, in_dim] floats (resmlp), [B, C, H, W] images (vit).
  // Returns logits: [B, T, vocab] for language models, [B, n_classes] otherwise.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // The training objective: mean cross-entropy of forward(x) against y ([B, T] or [B] int64), plus
  // the auxiliary loss that forward left (a mixture's balance loss, coefficient included; none for
  // a dense model).
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y);
  // The mean cross-entropy alone (evaluation: comparable across dense and mixture models).
  torch::Tensor cross_entropy(const torch::Tensor& x, const torch::Tensor& y);
  // Ensembles (context().members > 0): each member's mean cross-entropy, [members];
  // x: [members, B, ...], y: [members, B, ...].
  torch::Tensor member_losses(const torch::Tensor& x, const torch::Tensor& y);
  // Every parameter with its tag. Throws UserError naming any parameter registered without a tag.
  std::vector<TaggedParam> tagged_parameters();
  // Module::to(dev), then on CUDA every submodule's pack_weights() (one GEMM's weights in one
  // buffer, read in place each step instead of copied together). Call it before the optimizer is
  // built. On the CPU it only moves: there the copy it saves is small and the attention's logit
  // scale is cheaper folded into W_q, which the packed layout cannot do.
  void move_to(const torch::Device& dev);
  virtual const ModelConfig& config() const = 0;
  // The context the model sized itself with: the caller's, with `experts` set for a mixture of
  // experts. The optimizer's param groups take this one (engine/optim/optimizer.h).
  virtual const ScaleContext& context() const = 0;

  // A mixture of experts (engine/models/moe.cpp): the assignments of every block's experts in the
  // forwards since the last call, [blocks, E] int64 on the model's device, and zeroes the counts;
  // undefined for a dense model.
  virtual torch::Tensor take_expert_counts() { return {}; }
  // Aux-loss-free balancing (model.bias_rate > 0; engine/models/moe.cpp): moves every block's selection
  // bias by bias_rate * sign(mean - count), counts as take_expert_counts returns them; nothing
  // for a model without that balancing.
  virtual void shift_expert_bias(const torch::Tensor& /*counts*/) {}
  // The step's balancing, after backward and before the next forward: take_expert_counts, then
  // (with a selection bias) `reduce` them (a data-parallel run: their mean over ranks, so every
  // rank moves its bias alike) and shift_expert_bias. Returns the counts taken (undefined for a
  // dense model).
  torch::Tensor balance_experts(const std::function<torch::Tensor(const torch::Tensor&)>& reduce = nullptr);

  // Activation recording (coordinate checks, diagnostics). When on, record() keeps the tensor
  // (retain_grad so h' is readable after backward) under its name, in forward order, with the
  // role of the weight that produced it (recorded_roles(), same order): the coordinate check's
  // layer map reads roles, not names (engine/coordcheck/coordcheck.h).
  void set_recording(bool on) {
    recording_ = on;
    recorded_.clear();
    recorded_roles_.clear();
  }
  const std::vector<std::pair<std::string, torch::Tensor>>& recorded() const { return recorded_; }
  struct ActivationRole {
    Role role = Role::Hidden;  // Embedding: the embedding's output; Readout: the logits
    bool in_block = false;     // a residual block's output (the stream) or inside one
  };
  const std::vector<ActivationRole>& recorded_roles() const { return recorded_roles_; }

 protected:
  void record(const std::string& name, torch::Tensor& h, ActivationRole role);
  bool recording() const { return recording_; }  // lets forward() skip building record names
  // Set by forward() of a model with an auxiliary loss (engine/models/moe.cpp), undefined otherwise;
  // loss() adds it.
  torch::Tensor aux_loss_;

 private:
  bool recording_ = false;
  std::vector<std::pair<std::string, torch::Tensor>> recorded_;
  std::vector<ActivationRole> recorded_roles_;
};

// How far the busiest expert is over an even share, max_j c_j / mean_j c_j - 1 (ref. [lossfree]'s
// MaxVio), for the block where that is largest; counts [blocks, E] as take_expert_counts returns
// them. 0: every block balanced; at most E / k - 1. NaN for undefined counts or a block with none.
double expert_max_violation(const torch::Tensor& counts);

// Builds and initialises a model (seeded by the caller through torch::manual_seed).
// ctx.width and ctx.depth must equal cfg.width and cfg.depth (std::invalid_argument otherwise).
// Throws UserError (file "config", field "model.*") on an unknown kind or inconsistent shapes,
// e.g. width not divisible by head_dim / n_heads, and (field "hp.router_mult") on a router
// multiplier other than 1 for a model without a router.
std::shared_ptr<Model> build_model(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp);
// The checks build_model starts with, without building: the same UserErrors. For a command that
// must reject a bad model before it loads data (which may fail on its own for another reason).
void validate_model_config(const ModelConfig& cfg, const ScaleContext& ctx);
// UserError (file "config", field "train.batch_size") when a batch of `batch` items (per process)
// cannot fit in this machine's memory: a lower bound on what a training step holds (every layer's
// output for backward, and the logits), so a batch that would fit is never refused.
void check_batch_fits_in_memory(const ModelConfig& cfg, int64_t batch);
// torch::manual_seed(seed), then build_model, under one process-wide lock: the init draws from
// libtorch's global generator, so runs built on several threads at once (a sweep's --jobs) get
// exactly the parameters they would get alone.
std::shared_ptr<Model> build_model_seeded(uint64_t seed, const ModelConfig& cfg, const ScaleContext& ctx,
                                          const Hyper& hp);

}  // namespace scaleinv
