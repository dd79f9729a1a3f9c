// LR schedules: linear warmup, then constant / cosine / linear decay to min_lr_ratio.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "optim/optimizer.h"

namespace scaleinv {

void validate_schedule(const OptimConfig& cfg) {
  if (cfg.schedule != "constant" && cfg.schedule != "cosine" && cfg.schedule != "linear")
    throw UserError("config", "optim.schedule", "unknown schedule '" + cfg.schedule + "'",
                    "use one of constant, cosine, linear");
  if (cfg.warmup_steps < 0)
    throw UserError("config", "optim.warmup_steps", fmt::format("value {} is negative", cfg.warmup_steps),
                    "use 0 (no warmup) or a positive step count");
  if (cfg.total_steps < 1)
    throw UserError("config", "optim.total_steps", fmt::format("value {} is below 1", cfg.total_steps),
                    "use the number of training steps");
  if (!(cfg.min_lr_ratio >= 0 && cfg.min_lr_ratio <= 1))
    throw UserError("config", "optim.min_lr_ratio", fmt::format("value {} is outside [0, 1]", cfg.min_lr_ratio),
                    "use a final-LR fraction in [0, 1]");
}

double schedule_factor(const OptimConfig& cfg, int64_t step) {
  validate_schedule(cfg);
  if (step < 0) step = 0;
  if (step < cfg.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  if (cfg.schedule == "constant") return 1.0;
  const double span = static_cast<double>(std::max<int64_t>(1, cfg.total_steps - cfg.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - cfg.warmup_steps) / span, 0.0, 1.0);
  const double lo = cfg.min_lr_ratio;
  if (cfg.schedule == "cosine") return lo + (1.0 - lo) * 0.5 * (1.0 + std::cos(M_PI * progress));
  return lo + (1.0 - lo) * (1.0 - progress);  // linear
}

}  // namespace scaleinv
