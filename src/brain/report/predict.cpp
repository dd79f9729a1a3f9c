// The optimal LR at an untrained scale and its held-out check (see predict.h).
#include "brain/util/json_number.h"
#include "brain/util/nonfinite.h"
#include "brain/util/ols.h"
#include "brain/report/predict.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)
#include <nlohmann/json.hpp>

#include "brain/util/errors.h"
#include "brain/report/hparam_profile.h"
#include "brain/report/report_text.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

namespace {

using seed_curves::SeedTable;

// What the tables and notes call the predicted hyperparameter.

// A draw's located optimum on one curve, and the curve itself.
struct DrawCurve {
  std::vector<LrPoint> points;
  Optimum opt;
};

DrawCurve draw_curve(const SeedTable& t, const std::vector<int64_t>& draw, double near_optimal_pct) {
  DrawCurve c;
  c.points = seed_curves::mean_curve(t, draw, seed_curves::lr_keys(t));
  std::vector<double> x, y;
  for (const auto& p : c.points) x.push_back(p.lr_log2), y.push_back(p.mean_loss);
  c.opt = near_optimal_pct > 0 ? near_optimal_centre(x, y, near_optimal_pct) : locate_optimum(x, y);
  return c;
}

// OLS of y on x over the pairs whose y is finite (brain/util/ols.h).
OlsFit ols(const std::vector<double>& xs_in, const std::vector<double>& ys_in) {
  std::vector<double> xs, ys;
  for (size_t i = 0; i < xs_in.size(); ++i)
    if (std::isfinite(ys_in[i])) xs.push_back(xs_in[i]), ys.push_back(ys_in[i]);
  return ols_fit(xs, ys);
}

// The curve's mean loss at log2 LR x: linear between the neighbouring grid points (+inf where one
// of them diverged); NaN outside the grid.
double loss_at(const std::vector<LrPoint>& pts, double x) {
  if (pts.empty() || !std::isfinite(x) || x < pts.front().lr_log2 - 1e-9 || x > pts.back().lr_log2 + 1e-9) return kNaN;
  for (size_t i = 0; i + 1 < pts.size(); ++i)
    if (x <= pts[i + 1].lr_log2 + 1e-9) {
      const double t = std::clamp((x - pts[i].lr_log2) / (pts[i + 1].lr_log2 - pts[i].lr_log2), 0.0, 1.0);
      if (t == 0.0) return pts[i].mean_loss;
      if (t == 1.0) return pts[i + 1].mean_loss;
      return (1 - t) * pts[i].mean_loss + t * pts[i + 1].mean_loss;
    }
  return pts.back().mean_loss;
}

double regret_at(const std::vector<LrPoint>& pts, double x) {
  const LrPoint* best = seed_curves::best_point(pts);
  return best ? seed_curves::regret_pct(loss_at(pts, x), best->mean_loss) : kNaN;
}

// Every draw's curves of one (group, param): per draw, per value.
struct ParamCurves {
  std::vector<double> values;                   // increasing
  std::vector<std::vector<DrawCurve>> by_draw;  // [draw][value]; draw 0 the point estimate
};

ParamCurves param_curves(const std::map<double, SeedTable>& by_value, const std::vector<std::vector<int64_t>>& draws,
                         double near_optimal_pct) {
  ParamCurves pc;
  for (const auto& [v, t] : by_value) pc.values.push_back(v);
  for (const auto& d : draws) {
    std::vector<DrawCurve> row;
    for (const auto& [v, t] : by_value)
      row.push_back(draw_curve(t, seed_curves::draw_within(d, seed_curves::seeds_of(t)), near_optimal_pct));
    pc.by_draw.push_back(std::move(row));
  }
  return pc;
}

struct Quantiles {
  const TransferOptions& o;
  bool boot;
  double lo(const std::vector<double>& v) const { return boot ? seed_curves::percentile(v, o.lo_q) : kNaN; }
  double hi(const std::vector<double>& v) const { return boot ? seed_curves::percentile(v, o.hi_q) : kNaN; }
};

// The law over the first `n_fit` values, per draw: the fits (draw 0 first).
std::vector<OlsFit> fits_of(const ParamCurves& pc, size_t n_fit) {
  std::vector<double> xs;
  for (size_t i = 0; i < n_fit; ++i) xs.push_back(std::log2(pc.values[i]));
  std::vector<OlsFit> out;
  for (const auto& row : pc.by_draw) {
    std::vector<double> ys;
    for (size_t i = 0; i < n_fit; ++i) ys.push_back(row[i].opt.lr_log2);
    out.push_back(ols(xs, ys));
  }
  return out;
}

PowerLawFit describe_fit(const ParamCurves& pc, size_t n_fit, const std::vector<OlsFit>& fits, const Quantiles& q) {
  PowerLawFit f;
  for (size_t i = 0; i < n_fit; ++i) {
    f.values.push_back(pc.values[i]);
    f.optima.push_back(pc.by_draw[0][i].opt.lr_log2);
    f.at_edge.push_back(pc.by_draw[0][i].opt.at_edge);
    std::vector<double> boot;
    for (size_t d = 1; d < pc.by_draw.size(); ++d)
      if (std::isfinite(pc.by_draw[d][i].opt.lr_log2)) boot.push_back(pc.by_draw[d][i].opt.lr_log2);
    f.lo.push_back(q.lo(boot));
    f.hi.push_back(q.hi(boot));
  }
  f.intercept = fits[0].intercept;
  f.slope = fits[0].slope;
  f.residual_sd = fits[0].sd;
  std::vector<double> slopes;
  for (size_t d = 1; d < fits.size(); ++d)
    if (std::isfinite(fits[d].slope)) slopes.push_back(fits[d].slope);
  f.slope_lo = q.lo(slopes);
  f.slope_hi = q.hi(slopes);
  return f;
}

// Doublings of `x` outside [lo, hi] (0 inside).
double outside(double x, double lo, double hi) {
  if (x > hi) return std::log2(x / hi);
  if (x < lo) return std::log2(lo / x);
  return 0.0;
}

// The law's reading at log2 x: the point, and its interval from the draws and the shape term.
struct Reading {
  double point = kNaN, lo = kNaN, hi = kNaN;
  std::vector<double> per_draw;  // draws 1.. (NaN where a resample's law is undetermined)
};

Reading read_law(const std::vector<OlsFit>& fits, double lx, const Quantiles& q, double z) {
  Reading r;
  r.point = fits[0].at(lx);
  std::vector<double> finite;
  for (size_t d = 1; d < fits.size(); ++d) {
    r.per_draw.push_back(fits[d].at(lx));
    if (std::isfinite(r.per_draw.back())) finite.push_back(r.per_draw.back());
  }
  const double seed_lo = q.boot ? r.point - q.lo(finite) : 0.0, seed_hi = q.boot ? q.hi(finite) - r.point : 0.0;
  const double shape = fits[0].n >= 3 ? fits[0].prediction_half_width(lx, z) : 0.0;
  r.lo = r.point - std::hypot(std::max(seed_lo, 0.0), shape);
  r.hi = r.point + std::hypot(std::max(seed_hi, 0.0), shape);
  return r;
}

// What a group holds fixed on `axis`, read from one of its rows (NaN when the row has no value).
double held_value(const SweepRow& r, const std::string& axis) {
  if (axis != "width" && axis != "depth" && r.axes.count(axis) == 0) return kNaN;
  return seed_curves::axis_value(r, axis);
}

std::string canonical_axis(const std::string& a) {
  if (a == "batch" || a == "batch_size") return "train.batch_size";
  if (a == "steps") return "train.steps";
  return a;
}

// The batch policy a horizon or batch-size fit belongs to (predict.h, "Regimes"): a sweep's grid
// is a product, so within one group the other of the two is held fixed; the note says at what.
void add_regime_note(Prediction& p, const SweepRow& sample) {
  if (p.axis != "train.steps" && p.axis != "train.batch_size") return;
  const nlohmann::json cfg = nlohmann::json::parse(sample.config, nullptr, false);
  auto field = [&](const char* key) -> std::string {
    if (!cfg.is_object() || !cfg.contains("train") || !cfg["train"].contains(key)) return "?";
    return cfg["train"][key].dump();
  };
  if (p.axis == "train.steps")
    p.notes.push_back(fmt::format("fixed-batch regime (batch {} at every horizon): the optimum falls with the horizon "
                                  "(Bjorck et al. [horizon]); where the batch is re-tuned at each scale it rises instead "
                                  "(Li et al.'s Step Law [step-law]), and this fit does not apply",
                                  field("batch_size")));
  else
    p.notes.push_back(fmt::format("fixed-horizon regime ({} steps at every batch size, so the tokens grow with the "
                                  "batch): the fit holds for that policy only",
                                  field("steps")));
}

// The slope of `axis` for `param` from the first group of that axis holding it: its draws'
// slopes (draw 0 first), empty when none; `values` gets that group's values of the axis.
std::vector<double> other_axis_slopes(const SweepTable& table, const std::string& axis, const std::string& param,
                                      const TransferOptions& o, double near_optimal_pct, std::vector<double>& values) {
  for (const auto& [key, part] : seed_curves::partition_rows(table, axis)) {
    const auto it = part.data.find(param);
    if (it == part.data.end() || it->second.size() < 2) continue;
    // This param's own seeds (the group's other params may have run others).
    const auto draws = seed_curves::seed_draws(seed_curves::seeds_of(seed_curves::GroupData{{param, it->second}}),
                                               o.bootstrap, o.rng_seed);
    const ParamCurves pc = param_curves(it->second, draws, near_optimal_pct);
    values = pc.values;
    std::vector<double> out;
    for (const OlsFit& f : fits_of(pc, pc.values.size())) out.push_back(f.slope);
    return out;
  }
  return {};
}

// Adds the other target axes to `p` (see predict.h, "Other axes of the target").
void compose_other_axes(Prediction& p, const SweepTable& table, const SweepRow& sample, const PredictOptions& opts,
                        const Quantiles& q) {
  for (const auto& [axis, target] : opts.at) {
    if (axis == p.axis) continue;
    const double held = held_value(sample, axis);
    if (held == target) continue;
    std::vector<double> values;
    const std::vector<double> slopes = other_axis_slopes(table, axis, p.param, opts.transfer, opts.near_optimal_pct, values);
    // check_target_axes saw a law of the axis for this parameterization; it may still be unread
    // here: this group holds no value of it, or every resample of the law lost its optima.
    if (!(held > 0) || slopes.empty() || !std::isfinite(slopes[0])) {
      p.status = std::isfinite(held) && held > 0
                     ? fmt::format("declined: the {} drift of {} could not be fitted (fewer than two located optima)", axis, p.param)
                     : fmt::format("declined: this group's points hold no {} to move from", axis);
      p.lr_log2 = p.lo = p.hi = kNaN;
      return;
    }
    // The added axis is read as far from its data as the group's own (issue 60: it was never
    // declined): outside its fitted values by more than the limit or its span, the target is declined.
    const double out = outside(target, values.front(), values.back()), span = std::log2(values.back() / values.front());
    if (out > opts.max_extrapolation + 1e-9 || out > span + 1e-9) {
      p.status = fmt::format("declined: {} {:g} is {:.2f} doublings outside the {} law's fitted values {:g}..{:g} (the "
                             "limit: {:g} doublings and no more than that span, {:.2f}); --joint fits both axes at once",
                             axis, target, out, axis, values.front(), values.back(), opts.max_extrapolation, span);
      p.lr_log2 = p.lo = p.hi = kNaN;
      return;
    }
    p.extrapolation = std::max(p.extrapolation, out);
    const double dist = std::log2(target / held);
    std::vector<double> boot(slopes.begin() + 1, slopes.end());
    boot.erase(std::remove_if(boot.begin(), boot.end(), [](double v) { return !std::isfinite(v); }), boot.end());
    const double shift = slopes[0] * dist;
    // The shift's interval: the slope's, times the distance (its ends swap when the distance is
    // negative); each side added to the prediction's in quadrature.
    double below = 0, above = 0;
    if (q.boot && !boot.empty()) {
      const double e1 = q.lo(boot) * dist, e2 = q.hi(boot) * dist;
      below = std::max(shift - std::min(e1, e2), 0.0);
      above = std::max(std::max(e1, e2) - shift, 0.0);
    }
    const double lo_half = p.lr_log2 - p.lo, hi_half = p.hi - p.lr_log2;
    p.lr_log2 += shift;
    p.lo = p.lr_log2 - std::hypot(lo_half, below);
    p.hi = p.lr_log2 + std::hypot(hi_half, above);
    p.notes.push_back(fmt::format("{} {:g} -> {:g}: {:+.2f} doublings from the {} drift {:+.3f}/doubling (axes assumed "
                                  "to act separately)",
                                  axis, held, target, shift, axis, slopes[0]));
  }
}

void set_nan_holdout(Prediction& p) {
  p.measured = p.measured_lo = p.measured_hi = p.error = p.error_lo = p.error_hi = kNaN;
  p.regret = p.regret_lo = p.regret_hi = kNaN;
  p.base_lr_log2 = p.base_error = p.base_regret = p.base_regret_lo = p.base_regret_hi = kNaN;
  p.last_lr_log2 = p.last_error = p.last_regret = p.last_regret_lo = p.last_regret_hi = kNaN;
}

constexpr size_t kNone = static_cast<size_t>(-1);

// One (group, param): the prediction at `target` from the first `n_fit` values; with `held` (an
// index past n_fit, else kNone), the check at that value.
Prediction predict_one(const std::string& axis, const seed_curves::Part& key, const std::string& param,
                       const ParamCurves& pc, size_t n_fit, double target, size_t held, const PredictOptions& opts) {
  const Quantiles q{opts.transfer, pc.by_draw.size() > 1};
  Prediction p;
  p.axis = axis;
  p.fixed = key.fixed;
  p.context = key.context;
  p.param = param;
  p.hparam = is_lr(opts.hparam) ? "lr" : opts.hparam;
  p.target = target;
  p.held_out = held != kNone;
  set_nan_holdout(p);
  const std::vector<OlsFit> fits = fits_of(pc, n_fit);
  p.fit = describe_fit(pc, n_fit, fits, q);
  p.lr_log2 = p.lo = p.hi = kNaN;
  const double span = std::log2(p.fit.values.back() / p.fit.values.front());
  p.extrapolation = outside(target, p.fit.values.front(), p.fit.values.back());
  for (size_t i = 0; i < n_fit; ++i)
    if (p.fit.at_edge[i])
      p.notes.push_back(fmt::format("the optimum at {} {:g} sits at the {} grid's edge: a bound, not a value; widen the grid",
                                    axis, p.fit.values[i], hparam_label(opts.hparam)));
  if (fits[0].n < 2 || !std::isfinite(fits[0].slope)) {
    p.status = "declined: fewer than two located optima to fit";
    return p;
  }
  if (p.extrapolation > opts.max_extrapolation + 1e-9 || p.extrapolation > span + 1e-9) {
    p.status = fmt::format("declined: {:.2f} doublings outside the fitted values {:g}..{:g} (the limit: {:g} doublings "
                           "and no more than the fitted span, {:.2f})",
                           p.extrapolation, p.fit.values.front(), p.fit.values.back(), opts.max_extrapolation, span);
    return p;
  }
  if (fits[0].n < 3)
    p.notes.push_back("two values: the power law's shape is not checked; the interval is the seeds' alone");
  p.status = "predicted";
  const Reading r = read_law(fits, std::log2(target), q, opts.z);
  p.lr_log2 = r.point;
  p.lo = r.lo;
  p.hi = r.hi;
  if (held == kNone) return p;
  // The held-out value: its optimum, and the regret of the predicted and of the base's LR there.
  const size_t h = held;
  p.measured = pc.by_draw[0][h].opt.lr_log2;
  if (pc.by_draw[0][h].opt.at_edge)
    p.notes.push_back(fmt::format("the held-out optimum sits at the {} grid's edge: the error is a bound", hparam_label(opts.hparam)));
  p.error = p.lr_log2 - p.measured;
  p.regret = regret_at(pc.by_draw[0][h].points, p.lr_log2);
  if (std::isnan(p.regret))
    p.notes.push_back(fmt::format("the predicted {} lies outside the held-out grid: no regret", hparam_label(opts.hparam)));
  p.base_lr_log2 = pc.by_draw[0][0].opt.lr_log2;
  p.base_error = p.base_lr_log2 - p.measured;
  p.base_regret = regret_at(pc.by_draw[0][h].points, p.base_lr_log2);
  p.last_lr_log2 = pc.by_draw[0][n_fit - 1].opt.lr_log2;
  p.last_error = p.last_lr_log2 - p.measured;
  p.last_regret = regret_at(pc.by_draw[0][h].points, p.last_lr_log2);
  std::vector<double> meas, err, reg, breg, lreg;
  for (size_t d = 1; d < pc.by_draw.size(); ++d) {
    const DrawCurve& c = pc.by_draw[d][h];
    const double pred = r.per_draw[d - 1];
    if (std::isfinite(c.opt.lr_log2)) meas.push_back(c.opt.lr_log2);
    if (std::isfinite(c.opt.lr_log2) && std::isfinite(pred)) err.push_back(pred - c.opt.lr_log2);
    if (const double g = regret_at(c.points, pred); !std::isnan(g)) reg.push_back(g);
    if (const double g = regret_at(c.points, pc.by_draw[d][0].opt.lr_log2); !std::isnan(g)) breg.push_back(g);
    if (const double g = regret_at(c.points, pc.by_draw[d][n_fit - 1].opt.lr_log2); !std::isnan(g)) lreg.push_back(g);
  }
  p.measured_lo = q.lo(meas);
  p.measured_hi = q.hi(meas);
  p.error_lo = q.lo(err);
  p.error_hi = q.hi(err);
  p.regret_lo = q.lo(reg);
  p.regret_hi = q.hi(reg);
  p.base_regret_lo = q.lo(breg);
  p.base_regret_hi = q.hi(breg);
  p.last_regret_lo = q.lo(lreg);
  p.last_regret_hi = q.hi(lreg);
  return p;
}

std::string signed_pct(double v) { return std::isnan(v) ? "n/a" : fmt_num(v) + "%"; }
std::string interval(double lo, double hi, const char* f = "{:+.2f}") {
  return std::isnan(lo) ? "" : fmt::format(" [{}, {}]", fmt_num(lo, f), fmt_num(hi, f));
}

// What the points of `param` hold on `axis`, for a message: "no <axis> (never set)", "<axis> 2",
// "<axis> 2 and 4 (never within one group)".
std::string held_text_of(const std::set<double>& values, const std::string& axis) {
  if (values.empty()) return fmt::format("no {} (the sweep never set it)", axis);
  return fmt::format("{} {:g}{}", axis, fmt::join(values, " and "), values.size() > 1 ? " (never within one group)" : "");
}

// UserError unless every target axis can be read for every parameterization predicted (one with a
// law in some target axis): a group of that axis with two values or more for it (a law, fitted or
// composed), or its points all at the target already. One rule for every store: an axis the store never varied (a CLI sweep's fixed
// depth, a Python sweep's depth that was never set) has no law, so a target on it is refused,
// naming the axis, not composed with an assumed exponent (nor dropped).
void check_target_axes(const SweepTable& table, const PredictOptions& opts, const std::map<std::string, double>& at) {
  std::map<std::string, std::set<std::string>> with_law;  // axis -> the params with a group of two values or more
  std::set<std::string> predicted;                         // params with a law in some target axis
  for (const auto& [axis, target] : at)
    for (const auto& [key, part] : seed_curves::partition_rows(table, axis))
      for (const auto& [param, by_value] : part.data)
        if (by_value.size() >= 2 && (opts.param.empty() || param == opts.param))
          with_law[axis].insert(param), predicted.insert(param);
  for (const auto& [axis, target] : at) {
    std::map<std::string, std::set<double>> held;  // param -> the positive values its points hold
    for (const auto& r : table.rows) {
      if (!predicted.count(r.param)) continue;  // a param with no law at all is not predicted (nor refused)
      auto& h = held[r.param];
      if (const double v = held_value(r, axis); v > 0) h.insert(v);
    }
    for (const auto& [param, values] : held) {
      if (with_law[axis].count(param) || (values.size() == 1 && *values.begin() == target)) continue;
      throw UserError("command line", "--at",
                      fmt::format("{}={:g}: {} has no {} law for {}: its points hold {}", axis, target, table.db, axis,
                                  param, held_text_of(values, axis)),
                      fmt::format("sweep {} over two values or more, or leave it out of {} (the prediction is then at "
                                  "the {} the store holds)", axis, input_name("--at"), axis));
    }
  }
}

// UserError unless opts.fit_upto (when given) splits some group of an analysis axis into two values
// or more to fit and one or more above to check; a value that splits none would leave the held-out
// check empty, blamed on the store ("no group has two values") or, beside a target, silently.
void check_fit_upto(const SweepTable& table, const PredictOptions& opts) {
  if (!opts.holdout || opts.fit_upto <= 0) return;
  std::set<std::string> spans;  // "64..2048" per group and parameterization
  for (const std::string& axis : analysis_axes(table))
    for (const auto& [key, part] : seed_curves::partition_rows(table, axis))
      for (const auto& [param, by_value] : part.data) {
        if ((!opts.param.empty() && param != opts.param) || by_value.size() < 2) continue;
        const auto fitted = std::count_if(by_value.begin(), by_value.end(), [&](const auto& v) { return v.first <= opts.fit_upto; });
        if (fitted >= 2 && fitted < static_cast<std::ptrdiff_t>(by_value.size())) return;
        spans.insert(fmt::format("{} {:g}..{:g}", axis, by_value.begin()->first, by_value.rbegin()->first));
      }
  if (spans.empty()) return;  // no group at all: predict's own error says so
  throw UserError("command line", "--fit-upto",
                  fmt::format("{:g} leaves no group two values to fit and one above to check (the groups: {})",
                              opts.fit_upto, fmt::join(spans, "; ")),
                  fmt::format("a value from a group's second to below its largest, e.g. {}", input_name("--holdout --fit-upto 512")));
}

void check_options(const SweepTable& table, const PredictOptions& opts, std::map<std::string, double>& at) {
  check_predict_request(opts);
  const std::vector<std::string> axes = analysis_axes(table);
  for (const auto& [raw, v] : opts.at) {
    const std::string a = canonical_axis(raw);
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) {
      throw UserError("command line", "--at",
                      fmt::format("'{}' is no axis of {} (its axes: {})", raw, table.db, fmt::join(axes, ", ")),
                      fmt::format("name one of them, e.g. {}", input_name("--at width=2048")));
    }
    at[a] = v;
  }
  if (!opts.param.empty() &&
      std::none_of(table.rows.begin(), table.rows.end(), [&](const SweepRow& r) { return r.param == opts.param; })) {
    std::set<std::string> ps;
    for (const auto& r : table.rows) ps.insert(r.param);
    throw UserError("command line", "--param",
                    fmt::format("'{}' is not in {} (it holds {})", opts.param, table.db, fmt::join(ps, ", ")),
                    "name one of them");
  }
  check_target_axes(table, opts, at);
  check_fit_upto(table, opts);
}

}  // namespace

void check_predict_request(const PredictOptions& opts) {
  if (!(opts.near_optimal_pct >= 0 && opts.near_optimal_pct <= 50))
    throw UserError("command line", "--near-optimal", fmt::format("{:g} is not a percentage in [0, 50]", opts.near_optimal_pct),
                    fmt::format("e.g. {} (within 0.25% of the best loss), or 0 for the parabola vertex",
                                input_name("--near-optimal 0.25")));
  if (opts.at.empty() && !opts.holdout)
    throw UserError("command line", "--at", "nothing to predict",
                    fmt::format("give {} or {}", input_name("--at width=2048 (axis=value, ...)"), input_name("--holdout")));
  if (opts.fit_upto < 0 || !std::isfinite(opts.fit_upto) || (opts.fit_upto > 0 && !opts.holdout))
    throw UserError("command line", "--fit-upto", fmt::format("needs {} and a positive value", input_name("--holdout")),
                    "e.g. " + input_name("--holdout --fit-upto 512"));
  if (!(opts.max_extrapolation >= 0) || !std::isfinite(opts.max_extrapolation))
    throw UserError("command line", "--max-extrapolation", "must be a finite number >= 0 (doublings)", "e.g. 3");
  for (const auto& [raw, v] : opts.at) {
    if (!std::isfinite(v) || v <= 0)
      throw UserError("command line", "--at", fmt::format("{}={} is not a positive number", raw, v),
                      "e.g. " + input_name("--at width=2048"));
    if (!is_lr(opts.hparam) && canonical_axis(raw) == canonical_axis(opts.hparam))
      throw UserError("command line", "--hparam",
                      fmt::format("'{}' is also a target axis ({} {})", opts.hparam, input_name("--at"), raw),
                      fmt::format("predict a hyperparameter at a scale: name a scale in {} and another key in {}",
                                  input_name("--at"), input_name("--hparam")));
  }
}

Optimum near_optimal_centre(const std::vector<double>& x, const std::vector<double>& y, double pct) {
  Optimum o;
  o.lr_log2 = o.loss = kNaN;
  const int n = static_cast<int>(y.size());
  for (int i = 0; i < n; ++i)
    if (std::isfinite(y[i]) && (o.best_index < 0 || y[i] < y[o.best_index])) o.best_index = i;
  if (o.best_index < 0) return o;
  const int b = o.best_index;
  o.loss = y[b];
  const double limit = y[b] + std::fabs(y[b]) * pct / 100;
  // From the best point outwards while the curve stays within the limit; then where the line to
  // the first point beyond it crosses the limit (that point's inner neighbour when it diverged).
  auto edge = [&](int step) {
    int i = b;
    while (i + step >= 0 && i + step < n && y[i + step] <= limit) i += step;
    if (i + step < 0 || i + step >= n) {
      o.at_edge = true;
      return x[i];
    }
    const int j = i + step;
    if (!std::isfinite(y[j]) || y[j] == y[i]) return x[i];
    return x[i] + (limit - y[i]) / (y[j] - y[i]) * (x[j] - x[i]);
  };
  const double left = edge(-1), right = edge(+1);
  o.lr_log2 = (left + right) / 2;
  o.fitted = true;
  return o;
}

std::string Prediction::title() const {
  return fmt::format("{}, {}{}", param, axis, seed_curves::held_text(fixed, context));
}

namespace {

// hparam "all": the LR, then every swept hyperparameter that has a group to fit, in one list.
std::vector<Prediction> predict_every(const SweepTable& store, const PredictOptions& opts_in) {
  std::vector<std::string> keys = {"lr"};
  for (const std::string& k : swept_hparams(store)) keys.push_back(k);
  std::vector<Prediction> out;
  for (const std::string& key : keys) {
    PredictOptions o = opts_in;
    o.hparam = key;
    if (std::any_of(o.at.begin(), o.at.end(), [&](const auto& a) { return canonical_axis(a.first) == canonical_axis(key); }))
      continue;  // a target axis is a scale here, not a hyperparameter to predict
    try {
      for (Prediction& p : predict(store, o)) out.push_back(std::move(p));
    } catch (const UserError&) {
      if (key == "lr") throw;  // (the LR's error names what is wrong with the request or the store)
    }
  }
  return out;
}

}  // namespace

std::vector<Prediction> predict(const SweepTable& store, const PredictOptions& opts_in) {
  if (opts_in.hparam == "all") return predict_every(store, opts_in);
  PredictOptions opts = opts_in;
  check_predict_request(opts);
  // Another hyperparameter than the LR: its profile over the LR takes the store's place.
  HparamProfile profile;
  if (!is_lr(opts.hparam)) profile = profile_over_lr(store, opts.hparam);
  const SweepTable& table = is_lr(opts.hparam) ? store : profile.table;
  std::map<std::string, double> at;
  check_options(table, opts, at);
  opts.at = at;
  std::vector<Prediction> out;
  std::set<std::string> axes;
  for (const auto& [a, v] : at) axes.insert(a);
  if (opts.holdout)
    for (const auto& a : analysis_axes(table)) axes.insert(a);
  for (const std::string& axis : axes) {
    for (const auto& [key, part] : seed_curves::partition_rows(table, axis)) {
      const auto draws = seed_curves::seed_draws(seed_curves::seeds_of(part.data), opts.transfer.bootstrap,
                                                 opts.transfer.rng_seed);
      for (const auto& [param, by_value] : part.data) {
        if ((!opts.param.empty() && param != opts.param) || by_value.size() < 2) continue;
        const ParamCurves pc = param_curves(by_value, draws, opts.near_optimal_pct);
        const SweepRow& sample = *part.sample.at(param).begin()->second;
        const Quantiles q{opts.transfer, draws.size() > 1};
        if (at.count(axis)) {
          Prediction p = predict_one(axis, key, param, pc, pc.values.size(), at.at(axis), kNone, opts);
          if (p.status == "predicted") compose_other_axes(p, table, sample, opts, q);
          add_regime_note(p, sample);
          out.push_back(std::move(p));
        }
        if (!opts.holdout) continue;
        // Fitted on the values up to fit_upto (default: all but the largest), checked at each one above.
        size_t n_fit = pc.values.size() - 1;
        if (opts.fit_upto > 0)
          n_fit = static_cast<size_t>(std::count_if(pc.values.begin(), pc.values.end(), [&](double v) { return v <= opts.fit_upto; }));
        if (n_fit < 2 || n_fit >= pc.values.size() || (opts.fit_upto <= 0 && pc.values.size() < 3)) continue;
        for (size_t h = n_fit; h < pc.values.size(); ++h) {
          out.push_back(predict_one(axis, key, param, pc, n_fit, pc.values[h], h, opts));
          add_regime_note(out.back(), sample);
        }
      }
    }
  }
  if (out.empty())
    throw UserError(table.db, "points",
                    "no group has two values of a target axis (or three, to hold one out) for one parameterization",
                    "sweep the axis over more values (e.g. widths 64..512)");
  return out;
}

namespace {

// The tables of one predicted hyperparameter (predict_markdown below).
std::string markdown_of(const std::vector<Prediction>& preds, const PredictOptions& opts, const std::string& hparam) {
  std::string s;
  const std::string what = hparam_label(hparam);
  if (!is_lr(hparam))
    s += fmt::format("Predicted: {} (at each of its values the LR re-tuned: the grid point of least seed-mean loss).\n\n", what);
  if (opts.near_optimal_pct > 0)
    s += fmt::format("Optima: the centre of each curve's near-optimal band (within {:g}% of its best loss), not the "
                     "parabola vertex.\n\n", opts.near_optimal_pct);
  const bool any_target = std::any_of(preds.begin(), preds.end(), [](const Prediction& p) { return !p.held_out; });
  const bool any_held = std::any_of(preds.begin(), preds.end(), [](const Prediction& p) { return p.held_out; });
  auto fitted = [](const Prediction& p) {
    std::string v;
    for (size_t i = 0; i < p.fit.values.size(); ++i)
      v += fmt::format("{}{:g}: {}{}", i ? "; " : "", p.fit.values[i], fmt_num(p.fit.optima[i]), p.fit.at_edge[i] ? " (edge)" : "");
    return v;
  };
  std::vector<std::string> notes;
  auto note_refs = [&notes](const Prediction& p) {
    std::string refs;
    for (const auto& n : p.notes) {
      notes.push_back(fmt::format("{}: {}", p.title(), n));
      refs += fmt::format(" ({})", notes.size());
    }
    return refs;
  };
  if (any_target) {
    s += fmt::format("| group | fitted optima (log2 {0}) | drift (doublings/doubling) [5-95%] | target | outside the data "
                     "(doublings) | predicted log2 {0} [90%] | {0} |\n|---|---|---|---|---|---|---|\n",
                     what);
    for (const auto& p : preds) {
      if (p.held_out) continue;
      const std::string pred = p.status == "predicted"
                                   ? fmt_num(p.lr_log2) + interval(p.lo, p.hi) + note_refs(p)
                                   : p.status + note_refs(p);
      s += fmt::format("| {} | {} | {}{} | {} {:g} | {:.2f} | {} | {} |\n", p.title(), fitted(p), fmt_num(p.fit.slope, "{:+.3f}"),
                       interval(p.fit.slope_lo, p.fit.slope_hi, "{:+.3f}"), p.axis, p.target, p.extrapolation, pred,
                       p.status == "predicted" ? fmt::format("{:.3g}", std::exp2(p.lr_log2)) : "-");
    }
  }
  if (any_held) {
    if (any_target) s += "\n";
    s += fmt::format("Held out: fitted on every value but the largest (or up to --fit-upto), read at each value above. Error in "
                     "doublings (predicted - measured optimum); regret of training at the predicted {}, against the best grid "
                     "point there; two baselines: the smallest value's optimum carried unchanged (also the parameterization's "
                     "own rule) and the largest fitted value's:\n\n"
                     "| group | fitted on | held out | predicted [90%] | measured [5-95%] | error [5-95%] | regret [5-95%] | "
                     "base carried: error, regret [5-95%] | largest fitted carried: error, regret [5-95%] |\n"
                     "|---|---|---|---|---|---|---|---|---|\n",
                     what);
    for (const auto& p : preds) {
      if (!p.held_out) continue;
      if (p.status != "predicted") {
        s += fmt::format("| {} | {} | {:g} | {}{} | | | | | |\n", p.title(), fitted(p), p.target, p.status, note_refs(p));
        continue;
      }
      s += fmt::format("| {} | {} | {:g} | {}{}{} | {}{} | {}{} | {}{} | {}, {}{} | {}, {}{} |\n", p.title(), fitted(p),
                       p.target, fmt_num(p.lr_log2), interval(p.lo, p.hi), note_refs(p), fmt_num(p.measured),
                       interval(p.measured_lo, p.measured_hi), fmt_num(p.error), interval(p.error_lo, p.error_hi), signed_pct(p.regret),
                       interval(p.regret_lo, p.regret_hi), fmt_num(p.base_error), signed_pct(p.base_regret),
                       interval(p.base_regret_lo, p.base_regret_hi), fmt_num(p.last_error), signed_pct(p.last_regret),
                       interval(p.last_regret_lo, p.last_regret_hi));
    }
  }
  if (!notes.empty()) {
    s += "\n";
    for (size_t i = 0; i < notes.size(); ++i) s += fmt::format("({}) {}\n", i + 1, notes[i]);
  }
  return s;
}

}  // namespace

std::string predict_markdown(const std::vector<Prediction>& preds, const PredictOptions& opts) {
  // One section per predicted hyperparameter (several under hparam "all"), in the order predicted.
  std::vector<std::string> order;
  for (const auto& p : preds)
    if (std::find(order.begin(), order.end(), p.hparam) == order.end()) order.push_back(p.hparam);
  if (order.size() <= 1) return markdown_of(preds, opts, order.empty() ? opts.hparam : order[0]);
  std::string s;
  for (const std::string& h : order) {
    std::vector<Prediction> part;
    for (const auto& p : preds)
      if (p.hparam == h) part.push_back(p);
    s += fmt::format("{}### {}\n\n{}", s.empty() ? "" : "\n", hparam_label(h), markdown_of(part, opts, h));
  }
  return s;
}

nlohmann::json predict_to_json(const std::vector<Prediction>& preds, const PredictOptions& opts) {
  const auto n = json_number;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : preds) {
    nlohmann::json fit = {{"values", p.fit.values},
                          {"at_edge", p.fit.at_edge},
                          {"intercept", n(p.fit.intercept)},
                          {"slope", n(p.fit.slope)},
                          {"slope_interval", {n(p.fit.slope_lo), n(p.fit.slope_hi)}},
                          {"residual_sd", n(p.fit.residual_sd)}};
    nlohmann::json optima = nlohmann::json::array(), lo = nlohmann::json::array(), hi = nlohmann::json::array();
    for (size_t i = 0; i < p.fit.values.size(); ++i) optima.push_back(n(p.fit.optima[i])), lo.push_back(n(p.fit.lo[i])), hi.push_back(n(p.fit.hi[i]));
    fit["optima_log2"] = optima;
    fit["optima_lo"] = lo;
    fit["optima_hi"] = hi;
    nlohmann::json j = {{"axis", p.axis}, {"fixed", p.fixed}, {"context", p.context}, {"param", p.param},
                        {"title", p.title()}, {"fit", fit}, {"target", p.target}, {"extrapolation_doublings", n(p.extrapolation)},
                        {"status", p.status}, {"hparam", p.hparam}, {"value_log2", n(p.lr_log2)},
                        {"interval_log2", {n(p.lo), n(p.hi)}}, {"value", n(std::exp2(p.lr_log2))},
                        {"notes", p.notes}, {"held_out", p.held_out},
                        {"optimum", opts.near_optimal_pct > 0 ? fmt::format("near-optimal band centre, {:g}%", opts.near_optimal_pct)
                                                              : std::string("parabola vertex")}};
    if (p.hparam == "lr") j["lr_log2"] = n(p.lr_log2), j["lr"] = n(std::exp2(p.lr_log2));
    if (p.held_out)
      j["holdout"] = {{"measured_log2", n(p.measured)}, {"measured_interval", {n(p.measured_lo), n(p.measured_hi)}},
                      {"error_doublings", n(p.error)}, {"error_interval", {n(p.error_lo), n(p.error_hi)}},
                      {"regret_pct", n(p.regret)}, {"regret_interval", {n(p.regret_lo), n(p.regret_hi)}},
                      {"base_lr_log2", n(p.base_lr_log2)}, {"base_error_doublings", n(p.base_error)},
                      {"base_regret_pct", n(p.base_regret)}, {"base_regret_interval", {n(p.base_regret_lo), n(p.base_regret_hi)}},
                      {"largest_fitted_lr_log2", n(p.last_lr_log2)}, {"largest_fitted_error_doublings", n(p.last_error)},
                      {"largest_fitted_regret_pct", n(p.last_regret)},
                      {"largest_fitted_regret_interval", {n(p.last_regret_lo), n(p.last_regret_hi)}}};
    arr.push_back(std::move(j));
  }
  nlohmann::json at = nlohmann::json::object();
  for (const auto& [k, v] : opts.at) at[k] = v;
  return {{"at", at},
          {"hparam", is_lr(opts.hparam) ? std::string("lr") : opts.hparam},
          {"holdout", opts.holdout},
          {"fit_upto", opts.fit_upto > 0 ? nlohmann::json(opts.fit_upto) : nlohmann::json(nullptr)},
          {"max_extrapolation_doublings", opts.max_extrapolation},
          {"interval", fmt::format("seed bootstrap ({} resamples, {}-{}%) and the least-squares prediction half-width "
                                   "(z = {:.3f}), in quadrature",
                                   opts.transfer.bootstrap, opts.transfer.lo_q * 100, opts.transfer.hi_q * 100, opts.z)},
          {"predictions", arr}};
}

}  // namespace scaleinv
