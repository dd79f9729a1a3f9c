// apply_parameterization: own_model.h's plan on a libtorch module (see apply_module.h).
#include "engine/adapt/apply_module.h"

#include "engine/runtime/tensor_rms.h"

#include <cmath>
#include <map>

namespace scaleinv {

namespace {

struct Named {
  std::string name;
  torch::Tensor tensor;
  TensorLayout layout;
};

// Every trainable tensor with the module that owns it directly, duplicates (tied) included.
std::vector<Named> walk(torch::nn::Module& root) {
  std::vector<Named> out;
  auto visit = [&](const std::string& prefix, torch::nn::Module& m) {
    const bool embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(&m) != nullptr;
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      const torch::Tensor& t = item.value();
      if (!t.requires_grad()) continue;
      const TensorLayout l = t.dim() <= 1 ? TensorLayout::Vector
                             : embedding && item.key() == "weight" ? TensorLayout::InOut
                                                                    : TensorLayout::OutIn;
      out.push_back({prefix.empty() ? item.key() : prefix + "." + item.key(), t, l});
    }
  };
  visit("", root);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) visit(item.key(), *item.value());
  return out;
}

}  // namespace

std::vector<OwnTensor> own_tensors(torch::nn::Module& m, std::vector<TiedUse>* tied) {
  std::vector<OwnTensor> out;
  std::map<const void*, std::string> seen;
  for (const Named& n : walk(m)) {
    const void* impl = n.tensor.unsafeGetTensorImpl();
    if (seen.count(impl)) {
      if (tied && seen[impl] != n.name) tied->push_back({n.name, seen[impl], n.layout});
      continue;
    }
    seen[impl] = n.name;
    out.push_back({n.name, n.tensor.sizes().vec(), n.layout, tensor_rms(n.tensor)});
  }
  return out;
}

OwnApplied apply_parameterization(torch::nn::Module& model, torch::nn::Module& base, torch::nn::Module& delta,
                                  const ParamTable& table, const OptimConfig& optim,
                                  const std::vector<RoleOverride>& overrides) {
  OwnModelSpec spec;
  spec.target = own_tensors(model, &spec.tied);
  spec.base = own_tensors(base);
  spec.delta = own_tensors(delta);
  spec.overrides = overrides;
  OwnApplied a;
  a.plan = plan_own_model(table, optim.kind, optim.weight_decay, spec);
  std::map<std::string, torch::Tensor> by_name;
  for (const Named& n : walk(model)) by_name.emplace(n.name, n.tensor);
  torch::NoGradGuard ng;
  for (const OwnTensorPlan& t : a.plan.tensors) {
    torch::Tensor p = by_name.at(t.name);
    if (t.init != 1.0) p.mul_(t.init);
    ParamGroup g;
    g.name = t.name;
    g.param = p;
    g.role = t.role;
    g.lr_mult = t.lr;
    g.wd_mult = t.wd;
    g.eps_mult = t.eps;
    a.groups.push_back(std::move(g));
  }
  return a;
}

}  // namespace scaleinv
