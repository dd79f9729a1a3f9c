#include "brain/train/run_result.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "brain/util/json_number.h"

namespace scaleinv {

nlohmann::json run_result_to_json(const RunResult& r) {
  const auto num = json_number;
  nlohmann::json j = {{"steps_done", r.steps_done},           {"diverged", r.diverged},
                      {"diverged_step", r.diverged_step},     {"final_loss", num(r.final_loss)},
                      {"final_val_loss", num(r.final_val_loss)}, {"unigram_entropy", r.unigram_entropy},
                      {"params", r.params},                   {"items_per_s", r.items_per_s},
                      {"items_unit", r.items_unit},           {"wall_s", r.wall_s}};
  if (std::isfinite(r.expert_max_violation)) j["expert_max_violation"] = r.expert_max_violation;  // a mixture only
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

RunResult run_result_of_report(const nlohmann::json& j) {
  RunResult r;
  const nlohmann::json losses = j.value("losses", nlohmann::json::array());
  size_t first_bad = 0;  // 1-based index of the first non-finite loss (0: none)
  for (const auto& v : losses) {
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    r.losses.push_back(x);
    if (!std::isfinite(x) && first_bad == 0) first_bad = r.losses.size();
  }
  // The losses are evenly spaced over the run's `steps` (one per step, or a logged subset, or the
  // final loss alone): steps are counted in the run's own steps.
  const auto n = static_cast<int64_t>(r.losses.size());
  const int64_t steps = j.value("steps", n);
  auto to_step = [&](size_t k) { return n > 0 ? static_cast<int64_t>(std::llround(static_cast<double>(k) * steps / n)) : 0; };
  r.diverged = first_bad > 0;
  r.diverged_step = r.diverged ? to_step(first_bad) : -1;
  r.steps_done = r.diverged ? r.diverged_step : steps;
  const nlohmann::json val = j.value("val_loss", nlohmann::json());
  r.final_val_loss = val.is_number() ? val.get<double>() : std::nan("");
  r.wall_s = j.value("wall_s", 0.0);
  const nlohmann::json ips = j.value("items_per_s", nlohmann::json());
  r.items_per_s = ips.is_number() ? ips.get<double>() : std::nan("");
  r.unigram_entropy = std::nan("");
  r.error = j.value("error", std::string());
  return r;
}

}  // namespace scaleinv
