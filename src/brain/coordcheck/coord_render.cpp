// The coordinate check's outputs (see coordcheck.h): the table a person reads
// (render_coordcheck), the JSON a program reads (coordcheck_to_json) and the plots
// (plot_coordcheck).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "brain/util/json_number.h"
#include "brain/util/nonfinite.h"
#include "brain/util/fraction.h"
#include "brain/util/gnuplot.h"
#include "brain/coordcheck/coord_detail.h"
#include "brain/coordcheck/coord_result.h"
#include "brain/models/model_kinds.h"
#include "brain/param/table.h"
#include "brain/theory/theory_report.h"
#include "brain/train/config.h"

namespace scaleinv {

namespace {
// A zoo model that reads tokens; a user's own module (its class name as the kind) is not one.
bool is_language_kind(const std::string& kind) {
  const ModelKind* k = find_model_kind(kind);
  return k && k->language();
}
}  // namespace

using coord_detail::quantity_info;

namespace {
}  // namespace

// ============================================================================================
// Rendering
// ============================================================================================

namespace {

std::string axis_range(const CoordCheckResult& r, const std::string& axis) {
  const std::vector<int>& xs = axis == "width" ? r.widths : axis == "depth" ? r.depths : r.experts;
  return fmt::format("{}..{}", xs.front(), xs.back());
}

std::string tolerance_text(const CoordCheckResult& r) {
  std::string s;
  s += "tolerance = t_{0.975,S-1} * SE  +  finite-size term (the same for every parameterization)\n";
  s += "  SE: standard error of the mean of the S per-seed OLS slopes of ln RMS on ln x (seed noise)\n";
  const int S = static_cast<int>(r.config.seeds.size());
  if (S >= 2)
    s += fmt::format("  S = {} seeds: t_{{0.975,{}}} = {:.3f}\n", S, S - 1, student_t_quantile(0.975, S - 1));
  else
    s += "  S = 1 seed: SE is the OLS standard error of that seed's fit (n - 2 degrees of freedom), no seed noise\n";
  if (r.widths.size() >= 2) {
    const double n = static_cast<double>(r.n_probe + r.n_out);
    s += "  width: (1/2) [ln(1 + n/d_min) - ln(1 + n/d_max)] / ln(d_max/d_min), n = n_probe + n_out: the slope change\n"
         "    from the incoherent remainder (relative size sqrt(n/d)) of sums over the probe's inputs and outputs\n";
    s += fmt::format("    n = {} + {} = {}, width {}: {:.4f}\n", r.n_probe, r.n_out, r.n_probe + r.n_out,
                     axis_range(r, "width"), finite_size_term(r.widths.front(), r.widths.back(), n));
    if (r.n_pairs > 0)
      s += fmt::format("    W_q, W_k (their gradients sum over attended (query, key) pairs): n = {} pairs + {} = {}: {:.4f}\n",
                       r.n_pairs, r.n_out, r.n_pairs + r.n_out,
                       finite_size_term(r.widths.front(), r.widths.back(), static_cast<double>(r.n_pairs + r.n_out)));
  }
  if (r.depths.size() >= 2)
    s += fmt::format("  depth: ln(1 + L_min^-1/2) / ln(L_max/L_min) (an O(L^-1/2) correction), depth {}: {:.4f}\n",
                     axis_range(r, "depth"), finite_size_term(r.depths.front(), r.depths.back()));
  if (r.experts.size() >= 2) {
    const double m = static_cast<double>(r.n_assign);
    s += "  experts: (1/2) [ln(1 + E_max/M) - ln(1 + E_min/M)] / ln(E_max/E_min), M = n_probe x top_k assignments:\n"
         "    an expert's share of them fluctuates by a relative sqrt(E/M)";
    s += fmt::format("; M = {}, E {}: {:.4f}\n", r.n_assign, axis_range(r, "experts"),
                     coord_detail::experts_finite_term(r.experts.front(), r.experts.back(), m, false));
    s += fmt::format("    + for a routed tensor's normalised dW, the slope of sqrt(1 - (1 - 1/E)^M) (experts that got a "
                     "token): {:.4f} in all\n",
                     coord_detail::experts_finite_term(r.experts.front(), r.experts.back(), m, true));
  }
  return s;
}

const char* verdict(const std::optional<bool>& v) { return !v ? "-" : (*v ? "yes" : "NO"); }

// The rows that match only past the 1/d finite-width term (coord_result.h): what "yes*" means and
// each such row's extrapolated exponent. Empty when there is none.
std::string past_finite_width_note(const CoordCheckResult& r) {
  std::string s;
  for (const CoordRow& row : r.rows) {
    if (!row.matches_past_finite_width) continue;
    const InverseWidthFit& f = row.past_finite_width;
    s += fmt::format("  {} {} step {}: slope {:+.3f} misses {}, but ln RMS = a + e ln d + c/d gives e = {:+.3f} +- "
                     "{:.3f}, c = {:+.1f} +- {:.1f}\n",
                     coord_quantity_name(row.q), row.layer, row.step, row.fit.slope, format_exponent(*row.predicted),
                     f.e.mean, f.e.half_width, f.c.mean, f.c.half_width);
  }
  if (s.empty()) return s;
  return "\nyes*: the slope over the widths misses the prediction, but the miss is the leading finite-width term, "
         "c/d in ln RMS (resolved: |c| beyond its 95% interval), and the exponent past it matches within its own "
         "interval and the row's tolerance (coord_result.h):\n" + s;
}

}  // namespace

std::string render_coordcheck(const CoordCheckResult& r) {
  const CoordCheckConfig& c = r.config;
  const ModelConfig& mc = c.train.model;
  std::string s;
  s += fmt::format("coordcheck: model {}, param {}, optimizer {} (lr {}), {} steps, seeds {}\n", mc.kind, r.table.name,
                   c.train.optim.kind, c.train.optim.lr, c.steps, fmt::join(c.seeds, ","));
  s += fmt::format("  widths {}  depths {}  batch {}{}  data {}\n", fmt::join(r.widths, ","), fmt::join(r.depths, ","),
                   c.train.train.batch_size,
                   is_language_kind(mc.kind) ? fmt::format(" x {} tokens", mc.seq_len) : "",
                   c.train.data.source);
  if (!c.break_mode.empty())
    s += fmt::format("  BROKEN MODEL (--break {}): the readout's multiplier exponent a is 0 in the model; the "
                     "predictions use the unbroken table (a = {})\n",
                     c.break_mode, format_exponent(r.table.row(Role::Readout).a));
  s += fmt::format("  theory: {}\n", r.theory_note);
  s += fmt::format("  alignment (eqs. 18-20): omega_hidden = {}, omega_readout = {}, alpha = {}, u = {}\n",
                   format_exponent(c.align.omega_hidden), format_exponent(c.align.omega_readout), format_exponent(c.align.alpha),
                   format_exponent(c.align.u));
  if (r.depths.size() >= 2)
    s += fmt::format("  depth theory: alpha = {}, gamma = {}: {}\n", format_exponent(r.depth_theory.alpha),
                     format_exponent(r.depth_theory.gamma), r.depth_theory.label);
  s += "  RMS of the stored tensors' W' and dW (the multiplier d^-a applies in forward, as in seed 000 eqs. 5, 15)\n\n";

  s += fmt::format("{:<6} {:<4} {:<26} {:>4} {:>9} {:>9} {:>17} {:>6} {:>7} {:>6}  {}\n", "vs", "qty", "layer", "step",
                   "predicted", "measured", "95% interval", "tol", "matches", "stable", "maps to");
  s += std::string(130, '-') + "\n";
  std::string last_group;
  for (const CoordRow& row : r.rows) {
    const std::string group = fmt::format("{}{}{}", row.axis, row.at, static_cast<int>(row.q));
    if (!last_group.empty() && group != last_group) s += "\n";
    last_group = group;
    const std::string vs = fmt::format("{}{}", row.axis == "width" ? "d|L=" : row.axis == "depth" ? "L|d=" : "E|d=", row.at);
    std::string meas = row.zero ? "zero" : "n/a", interval = "", tol = "";
    if (row.fit.valid) {
      meas = fmt::format("{:+.3f}", row.fit.slope);
      interval = row.fit.dof > 0 ? fmt::format("[{:+.3f},{:+.3f}]", row.fit.slope - row.fit.half_width,
                                               row.fit.slope + row.fit.half_width)
                                 : "(one fit)";
      tol = fmt::format("{:.3f}", row.tolerance);
    }
    s += fmt::format("{:<6} {:<4} {:<26} {:>4} {:>9} {:>9} {:>17} {:>6} {:>7} {:>6}  {}\n", vs,
                     coord_quantity_name(row.q), row.layer, row.step, row.predicted ? format_exponent(*row.predicted) : "-",
                     meas, interval, tol, row.matches_past_finite_width ? "yes*" : verdict(row.matches),
                     verdict(row.stable), row.maps_to);
  }
  s += past_finite_width_note(r);
  s += "\n" + tolerance_text(r);

  int predicted = 0, matched = 0, past = 0, judged_stable = 0, stable = 0, no_pred = 0;
  for (const CoordRow& row : r.rows) {
    if (row.predicted) {
      ++predicted;
      matched += row.matches && *row.matches;
      past += row.matches_past_finite_width;
    } else {
      ++no_pred;
    }
    if (row.stable) {
      ++judged_stable;
      stable += *row.stable;
    }
  }
  int diverged = 0;
  for (const CoordRun& run : r.runs) diverged += run.diverged;
  // The probe loss per grid point (mean over seeds; a mixture's at its smallest E): the one-step theory describes the early phase;
  // a probe loss that collapses within T steps makes later gradients width-dependent (wider fits faster).
  s += fmt::format("\nprobe loss, step 0 -> step {} (mean over seeds):", c.steps);
  for (int d : r.depths)
    for (int w : r.widths) {
      double l0 = 0, lT = 0;
      int n = 0;
      for (const CoordRun& run : r.runs)
        if (run.width == w && run.depth == d && run.experts == r.grid_experts()) {
          l0 += run.loss.front();
          lT += run.loss.back();
          ++n;
        }
      if (n) s += fmt::format(" {}{}: {:.3g} -> {:.3g};", r.depths.size() > 1 ? fmt::format("L={} ", d) : "",
                              r.widths.size() > 1 || r.depths.size() == 1 ? fmt::format("d={}", w) : "", l0 / n,
                              lT / n);
    }
  s += "\n";
  s += fmt::format("\nsummary: {} rows; {} of {} predicted rows match theory{}; {} of {} activation rows stable; {} rows "
                   "without a prediction; {} runs, {} diverged; {:.1f} s\n",
                   r.rows.size(), matched, predicted, past ? fmt::format(" ({} past the 1/d term: yes*)", past) : "",
                   stable, judged_stable, no_pred, r.runs.size(), diverged, r.wall_s);
  const WidthTheory& w = r.width_theory;
  s += fmt::format("theory verdicts for {} / {}: stable at init {}, stable in training {}, feature learning {}\n",
                   r.table.name, family_name(r.family), w.stable_init ? "yes" : "NO", w.stable_train ? "yes" : "NO",
                   w.feature_learning ? "yes" : "NO");
  if (r.failures.empty()) {
    s += "PASS: every predicted row matches theory and every activation is stable\n";
  } else {
    s += fmt::format("FAIL: {} quantities failed a verdict:\n", r.failures.size());
    for (const std::string& f : r.failures) s += "  " + f + "\n";
  }
  return s;
}

nlohmann::json coordcheck_to_json(const CoordCheckResult& r) {
  const auto num = json_number;
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  auto optb = [](const std::optional<bool>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  const CoordCheckConfig& c = r.config;
  nlohmann::json j;
  j["config"] = train_config_to_json(c.train);
  j["table"] = param_to_json(r.table);
  j["family"] = family_name(r.family);
  j["widths"] = r.widths;
  j["depths"] = r.depths;
  if (!r.experts.empty()) {
    j["experts"] = r.experts;
    j["n_assign"] = r.n_assign;
  }
  j["steps"] = c.steps;
  j["seeds"] = c.seeds;
  j["train_batches"] = c.train_batches;
  j["break"] = c.break_mode;
  j["alignment"] = {{"omega_hidden", c.align.omega_hidden},
                    {"omega_readout", c.align.omega_readout},
                    {"alpha", c.align.alpha},
                    {"u", c.align.u}};
  j["theory"] = theory_json(r.width_theory, r.depth_theory);
  j["theory_depth"] = r.theory_depth;
  j["theory_note"] = r.theory_note;
  j["rms_convention"] = "RMS(v) = sqrt(mean v^2); W' and dW of the stored tensor (multiplier applied in forward)";
  nlohmann::json tol;
  tol["formula"] = "t_{0.975,S-1} * SE + finite-size term";
  tol["width_finite_formula"] = "(1/2) [ln(1 + n/d_min) - ln(1 + n/d_max)] / ln(d_max/d_min), n = n_probe + n_out";
  tol["depth_finite_formula"] = "ln(1 + L_min^-1/2) / ln(L_max/L_min)";
  tol["n_probe"] = r.n_probe;
  tol["n_out"] = r.n_out;
  if (r.n_pairs > 0) tol["n_pairs"] = r.n_pairs;  // W_q, W_k rows: n = n_pairs + n_out
  if (r.widths.size() >= 2)
    tol["width_finite_term"] =
        finite_size_term(r.widths.front(), r.widths.back(), static_cast<double>(r.n_probe + r.n_out));
  if (r.depths.size() >= 2) tol["depth_finite_term"] = finite_size_term(r.depths.front(), r.depths.back());
  if (c.seeds.size() >= 2) tol["t_quantile"] = student_t_quantile(0.975, static_cast<int>(c.seeds.size()) - 1);
  j["tolerance"] = tol;
  nlohmann::json rows = nlohmann::json::array();
  for (const CoordRow& row : r.rows) {
    nlohmann::json jr;
    jr["axis"] = row.axis;
    jr["at"] = row.at;
    jr["quantity"] = coord_quantity_name(row.q);
    jr["layer"] = row.layer;
    jr["step"] = row.step;
    jr["predicted"] = opt(row.predicted);
    jr["maps_to"] = row.maps_to;
    jr["valid"] = row.fit.valid;
    if (!row.fit.valid) jr["problem"] = row.fit.problem;
    if (row.zero) jr["zero"] = true;
    jr["slope"] = row.fit.valid ? num(row.fit.slope) : nlohmann::json(nullptr);
    jr["se"] = num(row.fit.se);
    jr["half_width"] = num(row.fit.half_width);
    jr["dof"] = row.fit.dof;
    jr["method"] = row.fit.method;
    jr["per_seed_slopes"] = row.fit.per_seed;
    jr["finite_term"] = row.finite_term;
    jr["tolerance"] = row.tolerance;
    if (row.below > 0) jr["below"] = row.below;
    jr["matches"] = optb(row.matches);
    if (row.past_finite_width.valid) {
      const InverseWidthFit& f = row.past_finite_width;
      jr["past_finite_width"] = {{"e", num(f.e.mean)}, {"e_half_width", num(f.e.half_width)},
                                 {"c", num(f.c.mean)}, {"c_half_width", num(f.c.half_width)},
                                 {"next_order", num(f.next_order)},
                                 {"matches", row.matches_past_finite_width}};
    }
    jr["stable"] = optb(row.stable);
    rows.push_back(jr);
  }
  j["rows"] = rows;
  nlohmann::json runs = nlohmann::json::array();
  for (const CoordRun& run : r.runs) {
    nlohmann::json jr;
    jr["width"] = run.width;
    jr["depth"] = run.depth;
    if (run.experts > 0) jr["experts"] = run.experts;
    jr["seed"] = run.seed;
    jr["diverged"] = run.diverged;
    nlohmann::json loss = nlohmann::json::array();
    for (double v : run.loss) loss.push_back(num(v));
    jr["loss"] = loss;
    nlohmann::json series = nlohmann::json::array();
    for (const CoordSeries& s : run.series) {
      nlohmann::json vals = nlohmann::json::array();
      for (double v : s.rms) vals.push_back(num(v));
      series.push_back({{"quantity", coord_quantity_name(s.q)}, {"layer", s.layer}, {"rms", vals}});
    }
    jr["series"] = series;
    runs.push_back(jr);
  }
  j["runs"] = runs;
  j["failures"] = r.failures;
  j["pass"] = r.pass();
  j["wall_s"] = r.wall_s;
  return j;
}

// ============================================================================================
// Plots
// ============================================================================================

std::vector<std::string> plot_coordcheck(const CoordCheckResult& r, const std::string& dir) {
  std::vector<std::string> written;
  // (axis, at) pairs in row order
  std::vector<std::pair<std::string, int>> fits;
  for (const CoordRow& row : r.rows)
    if (std::find(fits.begin(), fits.end(), std::make_pair(row.axis, row.at)) == fits.end())
      fits.emplace_back(row.axis, row.at);
  for (const auto& [axis, at] : fits) {
    for (int qi = 0; qi < kNumCoordQuantities; ++qi) {
      const auto q = static_cast<CoordQuantity>(qi);
      PlotFigure fig;
      fig.title = fmt::format("{} {}: {} vs {} ({} {}) | {} / {} | solid: measured (geometric mean over {} seeds), "
                              "dashed: predicted slope",
                              r.config.train.model.kind, coord_quantity_name(q), quantity_info(q).label, axis,
                              axis == "width" ? "depth" : "width", at, r.table.name, r.config.train.optim.kind,
                              r.config.seeds.size());
      for (int t = 0; t <= r.config.steps; ++t) {
        PlotPanel panel;
        panel.title = fmt::format("step {}", t);
        panel.xlabel = axis;
        panel.ylabel = quantity_info(q).label;
        int color = 0;
        bool any = false;
        for (const CoordRow& row : r.rows) {
          if (row.axis != axis || row.at != at || row.q != q || row.step != t) continue;
          any = true;
          PlotSeries meas;
          meas.title = row.layer;
          meas.color = color;
          meas.x = row.x;
          for (size_t i = 0; i < row.x.size(); ++i) {
            double lg = 0;
            int n = 0;
            for (const auto& ys : row.y)
              if (ys[i] > 0 && std::isfinite(ys[i])) {
                lg += std::log(ys[i]);
                ++n;
              }
            meas.y.push_back(n ? std::exp(lg / n) : kNaN);
          }
          if (row.predicted && !meas.y.empty() && std::isfinite(meas.y.front()) && meas.y.front() > 0) {
            PlotSeries pred;
            pred.dashed = true;
            pred.color = color;
            pred.x = row.x;
            for (double x : row.x) pred.y.push_back(meas.y.front() * std::pow(x / row.x.front(), *row.predicted));
            panel.series.push_back(std::move(meas));
            panel.series.push_back(std::move(pred));
          } else {
            panel.series.push_back(std::move(meas));
          }
          ++color;
        }
        if (any) fig.panels.push_back(std::move(panel));
      }
      if (fig.panels.empty()) continue;
      fig.columns = std::min<int>(static_cast<int>(fig.panels.size()), 2);
      const std::string stem = fmt::format("{}/{}_{}{}_{}", dir, axis, axis == "width" ? "L" : "d", at, quantity_info(q).file);
      render_figure(fig, stem);
      written.push_back(stem);
    }
  }
  return written;
}

}  // namespace scaleinv
