// coordcheck_module: the coordinate check on a user's libtorch module (module_coordcheck.h).
#include "engine/adapt/module_coordcheck.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "engine/adapt/apply_module.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"

namespace scaleinv {

torch::Tensor ActivationTap::operator()(const std::string& module, const torch::Tensor& h) {
  if (recording && h.requires_grad()) {
    h.retain_grad();
    taken.emplace_back(module, h);
  }
  return h;
}

namespace {

// A generator-state guard: the check draws under its own seeds and gives the caller's state back.
struct RestoreSeed {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor state = gen.get_state();
  ~RestoreSeed() { gen.set_state(state); }
};

}  // namespace

CoordCheckResult coordcheck_module(const ModuleFactory& make, const TappedLoss& loss,
                                   const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches,
                                   const ModuleCoordCheck& cc) {
  std::vector<int> widths = cc.widths;
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  if (widths.size() < 2 || widths.front() < 1)
    throw UserError("coordcheck", "widths", "a slope needs at least 2 positive widths",
                    "give e.g. widths = {128, 256, 512}");
  if (batches.empty()) throw UserError("coordcheck", "batches", "no batches", "give {{x, y}}, the probe batch first");
  if (cc.seeds.empty()) throw UserError("coordcheck", "seeds", "no seeds", "use 2 or more seeds");
  if (cc.steps < 1) throw UserError("coordcheck", "steps", fmt::format("{} steps", cc.steps), "use at least 1 step");
  const ParamTable table = load_param(cc.param);
  const int base_w = cc.base_width > 0 ? cc.base_width : widths.front();
  const int delta_w = cc.delta_width > 0 ? cc.delta_width : (widths[1] != base_w ? widths[1] : widths.front());

  RestoreSeed restore;
  torch::manual_seed(0);
  const std::shared_ptr<torch::nn::Module> base = make(base_w), delta = make(delta_w);
  OwnCoordInput in;
  in.optimizer = cc.optim.kind;
  in.muon_scale = muon_scale_of(cc.optim);
  in.model = cc.model_name;
  in.seeds = cc.seeds;
  in.steps = cc.steps;
  in.n_probe = batches.front().second.numel();
  std::vector<std::string> order;  // activations, first-tapped order
  OwnPlan plan;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;

  const long total = static_cast<long>(widths.size() * cc.seeds.size());
  std::unique_ptr<Progress> bar;
  if (cc.show_progress) bar = std::make_unique<Progress>(total, "coordcheck", "runs");
  long done = 0;
  for (int w : widths) {
    for (int64_t seed : cc.seeds) {
      torch::manual_seed(static_cast<uint64_t>(seed));
      std::shared_ptr<torch::nn::Module> model = make(w);
      OwnApplied a = apply_parameterization(*model, *base, *delta, table, cc.optim, cc.overrides);
      NamedTensors params;
      for (const auto& g : a.groups) params.emplace_back(g.name, g.param);
      auto opt = make_optimizer(cc.optim, a.groups);
      ActivationTap tap;
      auto step_loss = [&](size_t b, bool record) {
        tap.recording = record;
        if (record) tap.taken.clear();
        torch::Tensor lv = loss(*model, batches[b].first, batches[b].second, tap);
        tap.recording = false;
        return lv;
      };
      auto recorded = [&] {
        for (const auto& [name, h] : tap.taken)
          if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
        return tap.taken;
      };
      CoordRun run =
          measure_coord_steps(cc.steps, cc.quantities, batches.size(), step_loss, recorded, params, *opt);
      run.width = w;
      run.depth = 1;
      run.seed = seed;
      in.runs.push_back(std::move(run));
      if (modules.empty()) {
        plan = a.plan;
        for (const auto& item : model->named_modules("", /*include_self=*/false)) modules[item.key()] = item.value();
      }
      if (bar) bar->update(++done, fmt::format("width {} seed {}", w, seed));
    }
  }
  if (bar) bar->finish();

  // Layers: each tapped module by the role of its own weight (else its first own tensor), then
  // every parameter by its planned role.
  std::map<std::string, const OwnTensorPlan*> by_name;
  for (const OwnTensorPlan& t : plan.tensors) by_name[t.name] = &t;
  for (const std::string& name : order) {
    const auto mod = modules.find(name);
    if (mod == modules.end())
      throw UserError("coordcheck", name, "a tap names no module of the model",
                      "tap(name, h) with a name from named_modules(), e.g. \"fc1\"");
    const OwnTensorPlan* own = nullptr;
    if (by_name.count(name + ".weight")) own = by_name.at(name + ".weight");
    for (const auto& p : mod->second->named_parameters(/*recurse=*/false))
      if (!own && by_name.count(name + "." + p.key())) own = by_name.at(name + "." + p.key());
    OwnCoordLayer l;
    l.name = name;
    if (own) {
      l.role = own->role;
      l.in_block = own->in_block;
    }
    in.layers.push_back(l);
  }
  for (const OwnTensorPlan& t : plan.tensors) {
    OwnCoordLayer l;
    l.name = t.name;
    l.weight = true;
    l.role = t.role;
    l.in_block = t.in_block;
    in.layers.push_back(l);
  }
  for (const OwnRole& r : plan.roles.tensors)
    if (r.role == Role::Readout) in.n_out = std::max(in.n_out, r.fan_out);
  in.table = plan.shifted;
  CoordCheckResult res = judge_own_coordcheck(in);
  res.theory_note += "; judged against " + plan.table.name +
                     " shifted to a' = 0 (seed 000 eq. 28), the row apply_parameterization trained with";
  return res;
}

}  // namespace scaleinv
