// Model and TaggedModule: the parts every model shares (src/engine/models/model.h).
#include "engine/models/model.h"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/unit/scaled_ops.h"

namespace scaleinv {

torch::Tensor TaggedModule::add_param(const std::string& name, torch::Tensor value, ParamTag tag) {
  torch::Tensor& p = register_parameter(name, std::move(value), /*requires_grad=*/true);
  tags_[name] = tag;
  return p;
}

torch::Tensor Model::cross_entropy(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor logits = forward(x);
  torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
  // Unit scaling (ParamTable::unit.loss): the same loss value, its logit gradient scaled to unit RMS.
  if (context().table.unit.loss) flat = unit::scale_grad(flat, unit::unit_ce_bwd(flat.size(0), flat.size(1)));
  return torch::nn::functional::cross_entropy(flat, y.reshape({-1}));
}

torch::Tensor Model::loss(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor ce = cross_entropy(x, y);  // forward() sets aux_loss_
  return aux_loss_.defined() ? ce + aux_loss_ : ce;
}

torch::Tensor Model::member_losses(const torch::Tensor& x, const torch::Tensor& y) {
  const int64_t E = context().members;
  if (E <= 0) throw std::invalid_argument("member_losses: the model is not an ensemble");
  torch::Tensor logits = forward(x);
  torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
  if (context().table.unit.loss)  // unit scaling: each member's mean over flat.size(0) / E rows
    flat = unit::scale_grad(flat, unit::unit_ce_bwd(flat.size(0) / E, flat.size(1)));
  torch::Tensor per_item = torch::nn::functional::cross_entropy(
      flat, y.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  return per_item.view({E, -1}).mean(1);
}

torch::Tensor Model::balance_experts(const std::function<torch::Tensor(const torch::Tensor&)>& reduce) {
  torch::Tensor counts = take_expert_counts();
  if (counts.defined() && config().bias_rate > 0) shift_expert_bias(reduce ? reduce(counts) : counts);
  return counts;
}

double expert_max_violation(const torch::Tensor& counts) {
  if (!counts.defined() || counts.numel() == 0) return std::numeric_limits<double>::quiet_NaN();
  const torch::Tensor c = counts.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor mean = c.mean(1);
  if ((mean <= 0).any().item<bool>()) return std::numeric_limits<double>::quiet_NaN();
  return (std::get<0>(c.max(1)) / mean - 1).max().item<double>();
}

void Model::move_to(const torch::Device& dev) {
  to(dev);
  if (!dev.is_cuda()) return;
  for (const auto& m : modules(/*include_self=*/false))
    if (auto* tm = dynamic_cast<TaggedModule*>(m.get())) tm->pack_weights();
}

std::vector<TaggedParam> Model::tagged_parameters() {
  // Every tag, fully qualified by its module's path ("blocks.2.attn.q" + "." + "weight").
  std::map<std::string, ParamTag> tags = this->tags();
  // (include_self = false: a model built on the stack has no shared_ptr to itself.)
  for (const auto& item : named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    const auto* tm = dynamic_cast<const TaggedModule*>(item.value().get());
    if (!tm) continue;
    for (const auto& [name, tag] : tm->tags())
      tags[item.key() + "." + name] = tag;
  }
  // In registration order (deterministic: optimizers and checkpoints rely on it).
  std::vector<TaggedParam> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    auto it = tags.find(item.key());
    if (it == tags.end())
      throw UserError("model", "", fmt::format("parameter '{}' has no role tag", item.key()),
                      "register it with add_param(..., ParamTag{role, ...})");
    out.push_back({item.key(), item.value(), it->second});
  }
  return out;
}

void Model::record(const std::string& name, torch::Tensor& h, ActivationRole role) {
  if (!recording_) return;
  if (h.requires_grad()) h.retain_grad();
  recorded_.emplace_back(name, h);
  recorded_roles_.push_back(role);
}

}  // namespace scaleinv
