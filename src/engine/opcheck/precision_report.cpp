// `scaleinv precision`: fp32 against simulated bf16 / fp8 training (src/engine/opcheck/precision_report.h).
#include "brain/util/json_number.h"
#include "engine/opcheck/precision_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/errors.h"

namespace scaleinv {

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::nan("") : s / static_cast<double>(v.size());
}

}  // namespace

PrecisionReport run_precision(const TrainConfig& base, const std::vector<std::string>& formats, bool progress) {
  PrecisionReport rep;
  rep.base = base;
  std::vector<std::string> all = {"fp32"};
  for (const auto& f : formats) {
    precision::format_from_string(f, "command line", "--formats");
    if (f != "fp32") all.push_back(f);
  }
  RunOptions opts;
  opts.write_files = false;
  opts.show_progress = progress;
  opts.data_parallel = false;
  for (const std::string& f : all) {
    TrainConfig c = base;
    c.train.precision = f;
    PrecisionRun run;
    run.format = f;
    RunOptions run_opts = opts;
    run_opts.precision_stats = &run.stats;
    run.summary = train_run(c, run_opts);
    for (const auto& [point, s] : run.stats) {
      if (s.underflow_fraction() > run.worst_underflow) {
        run.worst_underflow = s.underflow_fraction();
        run.worst_underflow_at = point;
      }
      if (s.saturated_fraction() > run.worst_saturated) {
        run.worst_saturated = s.saturated_fraction();
        run.worst_saturated_at = point;
      }
    }
    if (!rep.runs.empty()) {
      const RunResult& ref = rep.runs[0].summary;
      run.final_loss_ratio = run.summary.final_loss / ref.final_loss;
      run.mean_loss_ratio = mean(run.summary.losses) / mean(ref.losses);
      const size_t n = std::min(ref.losses.size(), run.summary.losses.size());
      for (size_t i = 0; i < n; ++i)
        run.max_step_rel_diff = std::max(run.max_step_rel_diff, std::abs(run.summary.losses[i] / ref.losses[i] - 1));
      if (run.summary.losses.size() < ref.losses.size()) run.max_step_rel_diff = INFINITY;  // diverged
    }
    rep.runs.push_back(std::move(run));
  }
  return rep;
}

std::string render_precision(const PrecisionReport& r, int max_rows) {
  const TrainConfig& c = r.base;
  std::string s = fmt::format(
      "simulated precision: {} width {} depth {} under {} ({} lr {}), {} steps of {} x {}\n"
      "rounded: each linear's input x and weight w (forward), its output gradient (backward); saturating\n",
      c.model.kind, c.model.width, c.model.depth, c.param, c.optim.kind, c.optim.lr, c.train.steps,
      c.train.batch_size, c.model.seq_len);
  s += fmt::format("{:<6} {:>10} {:>10} {:>10} {:>10} {:>12}  {}\n", "format", "final", "ratio", "mean ratio",
                   "max |d|", "underflow", "worst tensor (underflow) / saturation");
  for (const PrecisionRun& run : r.runs) {
    const RunResult& su = run.summary;
    s += fmt::format("{:<6} {:>10.4f} {:>10.4f} {:>10.4f} {:>9.2f}% {:>11.3f}%  {} / {:.3f}% ({}){}\n", run.format,
                     su.final_loss, run.final_loss_ratio, run.mean_loss_ratio, 100 * run.max_step_rel_diff,
                     100 * run.worst_underflow, run.worst_underflow_at.empty() ? "-" : run.worst_underflow_at,
                     100 * run.worst_saturated, run.worst_saturated_at.empty() ? "-" : run.worst_saturated_at,
                     su.diverged ? fmt::format("  DIVERGED at step {}", su.diverged_step) : "");
  }
  for (const PrecisionRun& run : r.runs) {
    if (run.format == "fp32") continue;
    std::vector<std::pair<std::string, precision::QuantStats>> rows(run.stats.begin(), run.stats.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second.underflow_fraction() > b.second.underflow_fraction();
    });
    s += fmt::format("\n{}: per tensor over the run (cumulative; worst single step in brackets)\n", run.format);
    s += fmt::format("{:<36} {:>18} {:>18}\n", "tensor", "underflow", "saturated");
    int shown = 0;
    for (const auto& [point, st] : rows) {
      if (shown++ >= max_rows) {
        s += fmt::format("... {} more\n", rows.size() - static_cast<size_t>(max_rows));
        break;
      }
      s += fmt::format("{:<36} {:>8.3f}% [{:>6.2f}%] {:>8.4f}% [{:>6.2f}%]\n", point, 100 * st.underflow_fraction(),
                       100 * st.worst_underflow, 100 * st.saturated_fraction(), 100 * st.worst_saturated);
    }
  }
  return s;
}

nlohmann::json precision_to_json(const PrecisionReport& r) {
  nlohmann::json j;
  j["config"] = train_config_to_json(r.base);
  for (const PrecisionRun& run : r.runs) {
    nlohmann::json jr;
    jr["format"] = run.format;
    jr["summary"] = run_result_to_json(run.summary);
    jr["losses"] = run.summary.losses;
    jr["final_loss_ratio"] = run.final_loss_ratio;
    jr["mean_loss_ratio"] = run.mean_loss_ratio;
    jr["max_step_rel_diff"] = json_number(run.max_step_rel_diff);
    for (const auto& [point, st] : run.stats)
      jr["tensors"][point] = {{"underflow", st.underflow_fraction()}, {"saturated", st.saturated_fraction()},
                              {"worst_underflow", st.worst_underflow}, {"worst_saturated", st.worst_saturated},
                              {"nonzero", st.nonzero}, {"calls", st.calls}};
    j["runs"].push_back(jr);
  }
  return j;
}

}  // namespace scaleinv
