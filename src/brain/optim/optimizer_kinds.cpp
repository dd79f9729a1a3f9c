// The optimizer kinds' rows (brain/optim/optimizer_kinds.h). One row per update rule; a new optimizer is a
// new row here, its step in src/engine/optim/ and its builder in optimizer.cpp.
#include "brain/optim/optimizer_kinds.h"

#include <algorithm>
#include <ranges>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"

namespace scaleinv {

namespace {

const std::vector<std::string> kAdamFields = {"beta1", "beta2", "eps", "weight_decay"};

std::vector<OptimizerKind> build_optimizer_rows() {
  std::vector<OptimizerKind> rows;
  auto add = [&](OptimizerKind k) { rows.push_back(std::move(k)); };
  {
    OptimizerKind k;
    k.kind = "sgd";
    k.summary = "SGD with momentum; weight decay as L2 in the gradient (engine/optim/sgd.cpp)";
    k.family = OptFamily::SGD;
    k.decay = DecayMode::Coupled;
    k.eps = EpsMode::None;
    k.ensemble = true;
    k.fields = {"momentum", "weight_decay"};
    k.python_class = "SGD";
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "adam";
    k.summary = "Adam; weight decay as L2 in the gradient (engine/optim/adam.cpp)";
    k.family = OptFamily::Adam;
    k.decay = DecayMode::Coupled;
    k.ensemble = true;
    k.fields = kAdamFields;
    k.python_class = "Adam";
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "adamw";
    k.summary = "AdamW: Adam with decoupled weight decay (engine/optim/adam.cpp; seed 000 A.2.2)";
    k.family = OptFamily::Adam;
    k.decay = DecayMode::Decoupled;
    k.ensemble = true;
    k.fields = kAdamFields;
    k.python_class = "AdamW";
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "sign";
    k.summary = "sign descent: momentumless Adam without epsilon (seed 000 eq. 15), decoupled decay";
    k.family = OptFamily::Adam;
    k.decay = DecayMode::Decoupled;
    k.eps = EpsMode::None;
    k.ensemble = true;
    k.fields = {"weight_decay"};
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "adafactor";
    k.summary = "Adafactor: factored second moment, relative step (engine/optim/adafactor.cpp)";
    k.family = OptFamily::Adafactor;
    k.decay = DecayMode::Decoupled;
    k.eps = EpsMode::Squared;
    k.default_eps = 1e-15;
    k.own_model_refusal =
        "adafactor's relative step and its eps2 floor follow RMS(W), which moving the multipliers into "
        "the init changes, so the shift of seed 000 eq. 28 is not exact";
    k.fields = kAdamFields;
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "muon";
    k.summary = "Muon: orthogonalised momentum on the matrices, AdamW elsewhere (engine/optim/muon.cpp)";
    k.family = OptFamily::Muon;
    k.decay = DecayMode::Decoupled;
    k.ensemble = true;
    k.fields = kAdamFields;
    for (const char* f : {"muon_momentum", "nesterov", "ns_steps", "muon_scale", "muon_eps"}) k.fields.push_back(f);
    add(k);
  }
  {
    OptimizerKind k;
    k.kind = "lion";
    k.summary = "Lion: the sign of an interpolated momentum, decoupled decay (engine/optim/lion.cpp)";
    k.family = OptFamily::Adam;  // a sign update: entries of size lr whatever the gradient's scale
    k.decay = DecayMode::Decoupled;
    k.eps = EpsMode::None;
    k.fields = {"beta1", "beta2", "weight_decay"};
    add(k);
  }
  return rows;
}

}  // namespace

bool OptimizerKind::reads(std::string_view field) const {
  return std::ranges::find(fields, field) != fields.end();
}

const std::vector<OptimizerKind>& optimizer_kind_rows() {
  static const std::vector<OptimizerKind> rows = build_optimizer_rows();
  return rows;
}

const OptimizerKind* find_optimizer_kind(const std::string& kind) {
  for (const OptimizerKind& k : optimizer_kind_rows())
    if (k.kind == kind) return &k;
  return nullptr;
}

const OptimizerKind& optimizer_kind(const std::string& kind, const std::string& file, const std::string& field) {
  if (const OptimizerKind* k = find_optimizer_kind(kind)) return *k;
  throw UserError(file, field, "unknown optimizer '" + kind + "'", std::string("use one of ") + optimizer_kinds());
}

OptFamily optimizer_family(const std::string& kind) { return optimizer_kind(kind).family; }

const char* optimizer_kinds() {
  static const std::string list = optimizer_kind_list([](const OptimizerKind&) { return true; });
  return list.c_str();
}

std::string optimizer_kind_list(bool (*pred)(const OptimizerKind&)) {
  auto names = optimizer_kind_rows() | std::views::filter(pred) | std::views::transform(&OptimizerKind::kind);
  return fmt::format("{}", fmt::join(names, ", "));
}

const char* decay_mode_name(DecayMode m) {
  switch (m) {
    case DecayMode::None: return "none";
    case DecayMode::Coupled: return "coupled";
    case DecayMode::Decoupled: return "decoupled";
  }
  return "?";
}

const char* eps_mode_name(EpsMode m) {
  switch (m) {
    case EpsMode::None: return "none";
    case EpsMode::AddedToRms: return "added";
    case EpsMode::Squared: return "squared";
  }
  return "?";
}

}  // namespace scaleinv
