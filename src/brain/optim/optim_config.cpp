// Optimizer validation (brain/optim/optim_config.h; the kinds' rows: optimizer_kinds.cpp), torch-free.
#include "brain/optim/optim_config.h"

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "brain/util/errors.h"

namespace scaleinv {

namespace {
void check_range(bool ok, const std::string& field, double value, const std::string& want) {
  if (!ok) throw UserError("config", field, fmt::format("value {} is out of range", value), "use " + want);
}
}  // namespace

MuonScale muon_scale_of(const OptimConfig& cfg) {
  MuonScale s;
  if (!parse_muon_scale(cfg.muon_scale, &s))
    throw UserError("config", "optim.muon_scale", "unknown Muon scale rule '" + cfg.muon_scale + "'",
                    "use spectral (max(1, fan_out/fan_in)^1/2) or rms (0.2 sqrt(max(fan_in, fan_out)))");
  return s;
}

void validate_optim_config(const OptimConfig& cfg) {
  const OptimizerKind& kind = optimizer_kind(cfg.kind);
  if (cfg.wd_mode != "coupled" && cfg.wd_mode != "independent")
    throw UserError("config", "optim.wd_mode", "unknown weight-decay mode '" + cfg.wd_mode + "'",
                    "use coupled (W -= lr*wd*W) or independent (W -= wd*W)");
  // Tensors hold the LR and the other rates in float32: a value past its largest (3.4e38) overflows
  // there, deep in libtorch, instead of here (issue 38).
  constexpr double kF32 = std::numeric_limits<float>::max();
  check_range(std::isfinite(cfg.lr) && cfg.lr > 0 && cfg.lr <= kF32, "optim.lr", cfg.lr,
              "a finite value > 0 that float32 holds (<= 3.4e38), e.g. lr = 0.01");
  check_range(cfg.momentum >= 0 && cfg.momentum < 1, "optim.momentum", cfg.momentum, "a value in [0, 1)");
  check_range(cfg.beta1 >= 0 && cfg.beta1 < 1, "optim.beta1", cfg.beta1, "a value in [0, 1)");
  check_range(cfg.beta2 >= 0 && cfg.beta2 < 1, "optim.beta2", cfg.beta2, "a value in [0, 1)");
  check_range(std::isfinite(cfg.eps) && cfg.eps >= 0 && cfg.eps <= kF32, "optim.eps", cfg.eps, "a finite value >= 0 (<= 3.4e38)");
  if (kind.eps == EpsMode::Squared)
    check_range(cfg.eps > 0, "optim.eps", cfg.eps, fmt::format("a value > 0 for {} (e.g. {})", kind.kind, kind.default_eps));
  check_range(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0 && cfg.weight_decay <= kF32, "optim.weight_decay",
              cfg.weight_decay, "a finite value >= 0 (<= 3.4e38)");
  check_range(std::isfinite(cfg.clip_grad_norm) && cfg.clip_grad_norm >= 0, "optim.clip_grad_norm",
              cfg.clip_grad_norm, "0 (off) or a positive norm");
  check_range(cfg.muon_momentum >= 0 && cfg.muon_momentum < 1, "optim.muon_momentum", cfg.muon_momentum,
              "a value in [0, 1) (reference: 0.95)");
  check_range(cfg.ns_steps >= 1 && cfg.ns_steps <= 100, "optim.ns_steps", static_cast<double>(cfg.ns_steps),
              "an integer in [1, 100] (reference: 5)");
  muon_scale_of(cfg);
  check_range(std::isfinite(cfg.muon_eps) && cfg.muon_eps >= 0, "optim.muon_eps", cfg.muon_eps,
              "a finite value >= 0 (reference: 1e-7)");
  validate_schedule(cfg);
}

}  // namespace scaleinv
