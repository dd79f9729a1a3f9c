#include "engine/unit/probe.h"

namespace scaleinv::unit {

namespace {
thread_local OpProbe* g_probe = nullptr;
}

OpProbe::OpProbe() : previous_(g_probe) { g_probe = this; }
OpProbe::~OpProbe() { g_probe = previous_; }

void OpProbe::name_tensor(const torch::Tensor& w, const std::string& name) {
  std::string m = name;
  const auto dot = m.rfind('.');
  if (dot != std::string::npos) m = m.substr(0, dot);
  modules_[w.unsafeGetTensorImpl()] = m;
}

std::string OpProbe::module_of(const torch::Tensor& w) const {
  auto it = modules_.find(w.unsafeGetTensorImpl());
  return it == modules_.end() ? "?" : it->second;
}

void OpProbe::note(const std::string& op, const torch::Tensor& t) {
  if (t.requires_grad()) t.retain_grad();
  notes_.emplace_back(op, t);
}

OpProbe* active_probe() { return g_probe; }

void probe_op(const torch::Tensor& key, const char* what, const torch::Tensor& t) {
  if (!g_probe) return;
  g_probe->note(g_probe->module_of(key) + ":" + what, t);
}

void probe_named(const std::string& op, const torch::Tensor& t) {
  if (g_probe) g_probe->note(op, t);
}

}  // namespace scaleinv::unit
