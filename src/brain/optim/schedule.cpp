// LR schedules: linear warmup, then a decay shape from a table (constant, cosine, linear, wsd) to min_lr_ratio.
#include <algorithm>
#include <cmath>
#include <ranges>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/optim/optim_config.h"

namespace scaleinv {

namespace {

// The decay shapes after warmup, as a function of the progress p in [0, 1] (optimizer.h; wsd: ref.
// [wsd]): a new shape is a new row.
struct Shape {
  const char* name;
  double (*factor)(double p, const OptimConfig& cfg);
};

constexpr Shape kShapes[] = {
    {"constant", [](double, const OptimConfig&) { return 1.0; }},
    {"cosine",
     [](double p, const OptimConfig& c) { return c.min_lr_ratio + (1.0 - c.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * p)); }},
    {"linear", [](double p, const OptimConfig& c) { return c.min_lr_ratio + (1.0 - c.min_lr_ratio) * (1.0 - p); }},
    {"wsd",
     [](double p, const OptimConfig& c) {
       if (p <= 1.0 - c.decay_fraction) return 1.0;
       return c.min_lr_ratio + (1.0 - c.min_lr_ratio) * std::max(0.0, 1.0 - p) / c.decay_fraction;
     }},
};

const Shape* find_shape(const std::string& name) {
  for (const Shape& s : kShapes)
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace

void validate_schedule(const OptimConfig& cfg) {
  if (!find_shape(cfg.schedule)) {
    throw UserError("config", "optim.schedule", "unknown schedule '" + cfg.schedule + "'",
                    fmt::format("use one of {}", fmt::join(kShapes | std::views::transform(&Shape::name), ", ")));
  }
  if (cfg.warmup_steps < 0)
    throw UserError("config", "optim.warmup_steps", fmt::format("value {} is negative", cfg.warmup_steps),
                    "use 0 (no warmup) or a positive step count");
  if (cfg.total_steps < 1)
    throw UserError("config", "optim.total_steps", fmt::format("value {} is below 1", cfg.total_steps),
                    "use the number of training steps");
  if (!(cfg.min_lr_ratio >= 0 && cfg.min_lr_ratio <= 1))
    throw UserError("config", "optim.min_lr_ratio", fmt::format("value {} is outside [0, 1]", cfg.min_lr_ratio),
                    "use a final-LR fraction in [0, 1]");
  if (!(cfg.decay_fraction > 0 && cfg.decay_fraction <= 1))
    throw UserError("config", "optim.decay_fraction", fmt::format("value {} is outside (0, 1]", cfg.decay_fraction),
                    "use the share of the run that wsd spends decaying, e.g. 0.2");
}

double schedule_factor(const OptimConfig& cfg, int64_t step) {
  validate_schedule(cfg);
  if (step < 0) step = 0;
  if (step < cfg.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, cfg.total_steps - cfg.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - cfg.warmup_steps) / span, 0.0, 1.0);
  return find_shape(cfg.schedule)->factor(progress, cfg);
}

}  // namespace scaleinv
