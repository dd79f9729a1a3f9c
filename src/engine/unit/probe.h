#pragma once
// Per-operation scale recording (issue 7, `scaleinv scales`): while an OpProbe is active on this
// thread, the layers hand it the output of every operation they run (linear ops, nonlinearities,
// attention scores / probabilities / outputs, residual adds); it keeps each one with retain_grad so
// that, after backward, both the forward RMS and the RMS of the gradient arriving at it are read.
// With no probe active, probing() is one thread-local load and nothing else happens.
#include <torch/torch.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace scaleinv::unit {

class OpProbe {
 public:
  OpProbe();
  ~OpProbe();
  OpProbe(const OpProbe&) = delete;
  OpProbe& operator=(const OpProbe&) = delete;
  // Names ops after the module owning a tensor: `name` "blocks.0.mlp.fc.weight" -> "blocks.0.mlp.fc".
  void name_tensor(const torch::Tensor& w, const std::string& name);
  std::string module_of(const torch::Tensor& w) const;  // "?" when unnamed
  void note(const std::string& op, const torch::Tensor& t);
  const std::vector<std::pair<std::string, torch::Tensor>>& notes() const { return notes_; }

 private:
  OpProbe* previous_;
  std::unordered_map<const void*, std::string> modules_;
  std::vector<std::pair<std::string, torch::Tensor>> notes_;
};

OpProbe* active_probe();
inline bool probing() { return active_probe() != nullptr; }
// note(module_of(key) + ":" + what, t) when a probe is active.
void probe_op(const torch::Tensor& key, const char* what, const torch::Tensor& t);
void probe_named(const std::string& op, const torch::Tensor& t);

}  // namespace scaleinv::unit
