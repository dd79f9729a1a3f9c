// A hyperparameter's optimum as one power law in several axes (see joint_law.h).
#include "brain/report/joint_law.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "brain/util/nonfinite.h"
#include "brain/util/errors.h"
#include "brain/util/json_number.h"
#include "brain/util/slope_fit.h"
#include "brain/report/report_text.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

namespace {


std::string canonical(const std::string& a) {
  if (a == "batch") return "train.batch_size";
  if (a == "steps") return "train.steps";
  return a;
}

bool has_axis(const SweepRow& r, const std::string& a) {
  return a == "width" || a == "depth" || r.axes.count(a) > 0;
}
double value_of(const SweepRow& r, const std::string& a) {
  if (!has_axis(r, a)) return kNaN;
  return seed_curves::axis_value(r, a);
}

// Least squares of y on the columns of X (rows of p values), by the normal equations solved with
// partial pivoting (p is a handful). Empty when X'X is singular.
struct Ls {
  std::vector<double> beta;
  std::vector<std::vector<double>> xtx;  // X'X, kept for leverages
};

std::vector<double> solve(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t p = b.size();
  double scale = 0;
  for (size_t i = 0; i < p; ++i) scale = std::max(scale, std::fabs(a[i][i]));
  for (size_t c = 0; c < p; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < p; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
    if (!(std::fabs(a[piv][c]) > 1e-12 * scale)) return {};
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    for (size_t r = 0; r < p; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < p; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(p);
  for (size_t i = 0; i < p; ++i) x[i] = b[i] / a[i][i];
  return x;
}

Ls least_squares(const std::vector<std::vector<double>>& X, const std::vector<double>& y) {
  Ls out;
  if (X.empty()) return out;
  const size_t p = X[0].size();
  out.xtx.assign(p, std::vector<double>(p, 0.0));
  std::vector<double> xty(p, 0.0);
  for (size_t i = 0; i < X.size(); ++i)
    for (size_t j = 0; j < p; ++j) {
      xty[j] += X[i][j] * y[i];
      for (size_t k = 0; k < p; ++k) out.xtx[j][k] += X[i][j] * X[i][k];
    }
  out.beta = solve(out.xtx, xty);
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// [1, log2 x_1, ..., log2 x_k] for the law's axes.
std::vector<double> design(const std::map<std::string, double>& x, const std::vector<std::string>& axes) {
  std::vector<double> d = {1.0};
  for (const auto& a : axes) d.push_back(std::log2(x.at(a)));
  return d;
}

// One cell's re-tuned points: key (log2 h and the other re-tuned values) -> seed-mean loss.
struct CellBuild {
  std::map<std::string, double> x;
  std::map<std::pair<double, std::string>, std::pair<double, int>> sum;  // (h, rest) -> (loss sum, count)
  std::set<std::pair<double, std::string>> diverged;
};

std::vector<LawCell> build_cells(const SweepTable& table, const std::string& param, const std::vector<std::string>& axes,
                                 size_t n_law, const std::string& hparam, const std::vector<std::string>& retuned, double pct,
                                 std::vector<int>& fit_rows_per_cell, std::vector<std::vector<double>>& near_h) {
  std::map<std::vector<double>, CellBuild> by_x;
  for (const SweepRow& r : table.rows) {
    if (r.param != param) continue;
    std::vector<double> key;
    bool ok = true;
    for (size_t i = 0; i < axes.size(); ++i) {  // the law's axes (first n_law) positive, the pooled ones finite
      const double v = value_of(r, axes[i]);
      if (!std::isfinite(v) || (i < n_law && !(v > 0))) ok = false;
      key.push_back(v);
    }
    const double h = is_lr(hparam) ? r.lr_log2 : std::log2(value_of(r, hparam));
    if (!ok || !std::isfinite(h)) continue;
    std::string rest = is_lr(hparam) ? std::string() : fmt::format("{:.9g}", r.lr_log2);  // the LR is re-tuned too
    for (const auto& a : retuned)
      if (has_axis(r, a)) rest += "|" + r.axes.at(a);
    CellBuild& c = by_x[key];
    for (size_t i = 0; i < axes.size(); ++i) c.x[axes[i]] = key[i];
    const auto k = std::make_pair(std::round(h * 1e6) / 1e6, rest);
    if (r.diverged || !std::isfinite(r.final_loss)) c.diverged.insert(k);
    auto& s = c.sum[k];
    s.first += std::isfinite(r.final_loss) ? r.final_loss : 0.0;
    s.second += 1;
  }
  std::vector<LawCell> cells;
  fit_rows_per_cell.clear();
  near_h.clear();
  for (auto& [key, b] : by_x) {
    LawCell c;
    c.x = b.x;
    c.optimum = c.best_loss = kNaN;
    std::map<double, double> profile;
    double best = kInf, best_h = kNaN;
    std::vector<std::pair<double, double>> pts;  // (h, loss)
    for (const auto& [k, s] : b.sum) {
      const double loss = b.diverged.count(k) ? kInf : s.first / s.second;
      pts.push_back({k.first, loss});
      auto [it, fresh] = profile.emplace(k.first, loss);
      if (!fresh) it->second = std::min(it->second, loss);
      if (loss < best) best = loss, best_h = k.first;
    }
    for (const auto& [h, l] : profile) c.profile.push_back({h, l});
    std::vector<double> near;
    if (std::isfinite(best)) {
      c.optimum = best_h;
      c.best_loss = best;
      c.at_edge = best_h == profile.begin()->first || best_h == profile.rbegin()->first;
      const double limit = best + std::fabs(best) * pct / 100;
      for (const auto& [h, l] : pts)
        if (pct > 0 ? l <= limit : (h == best_h && l == best)) near.push_back(h);
      if (pct <= 0) near.resize(1);
    }
    c.rows = static_cast<int>(near.size());
    fit_rows_per_cell.push_back(c.rows);
    near_h.push_back(near);
    cells.push_back(std::move(c));
  }
  return cells;
}

// The law fitted on the chosen cells (indices into `cells`, repeats allowed).
std::vector<double> fit_on(const std::vector<LawCell>& cells, const std::vector<std::vector<double>>& near_h,
                           const std::vector<int64_t>& pick, const std::vector<std::string>& axes) {
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  for (int64_t i : pick)
    for (double h : near_h[i]) X.push_back(design(cells[i].x, axes)), y.push_back(h);
  return least_squares(X, y).beta;
}

// The axes (of `axes`) that the cells cannot separate: Gram-Schmidt on the centred log columns; an
// axis whose column is (numerically) a combination of the ones before it names itself and those.
void check_separable(const std::vector<LawCell>& cells, const std::vector<std::string>& axes, const std::string& db) {
  const size_t n = cells.size(), k = axes.size();
  std::vector<std::vector<double>> cols(k, std::vector<double>(n));
  for (size_t j = 0; j < k; ++j) {
    double mean = 0;
    for (size_t i = 0; i < n; ++i) mean += (cols[j][i] = std::log2(cells[i].x.at(axes[j]))) / n;
    for (size_t i = 0; i < n; ++i) cols[j][i] -= mean;
  }
  std::vector<std::vector<double>> basis;
  for (size_t j = 0; j < k; ++j) {
    std::vector<double> v = cols[j];
    const double norm0 = std::sqrt(dot(v, v));
    for (const auto& b : basis) {
      const double f = dot(v, b);
      for (size_t i = 0; i < n; ++i) v[i] -= f * b[i];
    }
    const double norm = std::sqrt(dot(v, v));
    if (norm0 == 0)
      throw UserError("command line", "--joint", fmt::format("{} holds one value of {} in the cells fitted: nothing to fit", db, axes[j]),
                      fmt::format("leave {} out of the law, or give cells at two values of it or more", axes[j]));
    if (norm < 1e-6 * norm0)
      throw UserError("command line", "--joint",
                      fmt::format("{} and {} are collinear in the cells fitted ({}): the law cannot separate them",
                                  fmt::join(std::vector<std::string>(axes.begin(), axes.begin() + j), ", "), axes[j], db),
                      "fit one of them, or add cells off that line (e.g. another D at the same N)");
    for (auto& x : v) x /= norm;
    basis.push_back(std::move(v));
  }
}

// Percent regret per doubling^2 of one profile: least squares of 100 (L/L* - 1) on (d, d^2) near
// the best point (|d| <= 1 doubling); NaN with fewer than three finite points.
double profile_curvature(const LawCell& c) {
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  for (const auto& [h, l] : c.profile) {
    const double d = h - c.optimum;
    if (std::fabs(d) <= 1 + 1e-9 && std::isfinite(l)) X.push_back({1.0, d, d * d}), y.push_back(100 * (l / c.best_loss - 1));
  }
  if (X.size() < 3) return kNaN;
  const Ls f = least_squares(X, y);
  return f.beta.empty() || !(f.beta[2] > 0) ? kNaN : f.beta[2];
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double d) { return !std::isfinite(d); }), v.end());
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The profile's loss at log2 h (linear between grid values; +inf next to a diverged one; NaN outside).
double profile_loss(const LawCell& c, double h) {
  const auto& p = c.profile;
  if (p.empty() || !std::isfinite(h) || h < p.front().first - 1e-9 || h > p.back().first + 1e-9) return kNaN;
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (h <= p[i + 1].first + 1e-9) {
      const double t = std::clamp((h - p[i].first) / (p[i + 1].first - p[i].first), 0.0, 1.0);
      if (t == 0.0) return p[i].second;
      if (t == 1.0) return p[i + 1].second;
      return (1 - t) * p[i].second + t * p[i + 1].second;
    }
  return p.back().second;
}
double regret_of(const LawCell& c, double h) { return seed_curves::regret_pct(profile_loss(c, h), c.best_loss); }

// What a fit needs beyond its coefficients to read a target.
struct FitState {
  JointLawFit fit;
  std::vector<std::vector<double>> boot;  // the resampled laws' coefficients
  std::vector<std::vector<double>> loss_xtx;
  std::map<std::string, std::pair<double, double>> range;  // axis -> fitted min, max
};

std::vector<std::string> varying_others(const SweepTable& table, const std::string& param, const std::set<std::string>& used) {
  std::map<std::string, std::set<std::string>> vals;
  for (const SweepRow& r : table.rows) {
    if (r.param != param) continue;
    vals["width"].insert(std::to_string(r.width));
    vals["depth"].insert(std::to_string(r.depth));
    for (const auto& [k, v] : r.axes) vals[k].insert(v);
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : vals)
    if (v.size() > 1 && !used.count(k)) out.push_back(k);
  return out;
}

FitState fit_state(const std::vector<LawCell>& cells, const std::vector<std::vector<double>>& near_h,
                   const std::vector<std::string>& axes, const JointLawOptions& o, const std::string& db) {
  FitState s;
  JointLawFit& f = s.fit;
  f.axes = axes;
  f.cells = cells;
  const size_t p = axes.size() + 1;
  f.n_cells = static_cast<int>(cells.size());
  for (const auto& h : near_h) f.n_rows += static_cast<int>(h.size());
  if (cells.size() < p + 1)
    throw UserError("command line", "--joint",
                    fmt::format("{} fitted cells for {} coefficients: a law in {} needs {} cells or more (one to judge it by)",
                                cells.size(), p, fmt::join(axes, ", "), p + 1),
                    "give more cells (scales) to fit, or fewer axes");
  check_separable(cells, axes, db);
  std::vector<int64_t> all;
  for (size_t i = 0; i < cells.size(); ++i) all.push_back(static_cast<int64_t>(i));
  f.coef = fit_on(cells, near_h, all, axes);
  f.dof = f.n_cells - static_cast<int>(p);
  double ss = 0;
  for (const auto& c : cells) ss += std::pow(c.optimum - dot(f.coef, design(c.x, axes)), 2);
  f.residual_sd = std::sqrt(ss / f.dof);
  f.t = student_t_quantile(0.5 + o.level / 2, f.dof);
  const auto draws = seed_curves::seed_draws(all, o.bootstrap, o.rng_seed);
  for (size_t i = 1; i < draws.size(); ++i) {  // (draw 0 is the cells themselves)
    std::vector<double> b = fit_on(cells, near_h, draws[i], axes);
    if (!b.empty()) s.boot.push_back(std::move(b));
  }
  const double lo_q = (1 - o.level) / 2, hi_q = 1 - lo_q;
  for (size_t j = 0; j < p; ++j) {
    std::vector<double> v;
    for (const auto& b : s.boot) v.push_back(b[j]);
    f.coef_lo.push_back(s.boot.empty() ? kNaN : seed_curves::percentile(v, lo_q));
    f.coef_hi.push_back(s.boot.empty() ? kNaN : seed_curves::percentile(v, hi_q));
  }
  std::vector<double> ks;
  for (const auto& c : cells) ks.push_back(profile_curvature(c));
  f.curvature = median(ks);
  // The best loss' law: log2 L* on the same design.
  // The loss depends on every scale, so its law takes the pooled axes too (those positive in every cell).
  f.loss_axes = axes;
  for (const auto& [k, v] : cells.front().x)
    if (std::find(axes.begin(), axes.end(), k) == axes.end() &&
        std::all_of(cells.begin(), cells.end(), [&](const LawCell& c) { return c.x.at(k) > 0; }))
      f.loss_axes.push_back(k);
  const size_t lp = f.loss_axes.size() + 1;
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  for (const auto& c : cells)
    if (c.best_loss > 0) X.push_back(design(c.x, f.loss_axes)), y.push_back(std::log2(c.best_loss));
  if (X.size() >= lp + 1) {
    const Ls l = least_squares(X, y);
    if (!l.beta.empty()) {
      f.loss_coef = l.beta;
      s.loss_xtx = l.xtx;
      double lss = 0;
      for (size_t i = 0; i < X.size(); ++i) lss += std::pow(y[i] - dot(l.beta, X[i]), 2);
      f.loss_sd = std::sqrt(lss / (X.size() - lp));
    }
  }
  for (const auto& a : axes) {
    double lo = kInf, hi = 0;
    for (const auto& c : cells) lo = std::min(lo, c.x.at(a)), hi = std::max(hi, c.x.at(a));
    s.range[a] = {lo, hi};
  }
  return s;
}

// The fitted cell largest (smallest) on the first axis; ties: the nearest to `x` in the others.
const LawCell& anchor(const std::vector<LawCell>& cells, const std::string& along,
                      const std::map<std::string, double>& x, bool largest) {
  const LawCell* best = nullptr;
  auto dist = [&](const LawCell& c) {
    double d = 0;
    for (const auto& [k, v] : c.x)  // every other axis of the cell (the law's and the pooled ones)
      if (k != along && x.count(k) && x.at(k) > 0 && v > 0) d += std::fabs(std::log2(v / x.at(k)));
    return d;
  };
  for (const auto& c : cells) {
    if (!std::isfinite(c.optimum)) continue;
    if (!best) { best = &c; continue; }
    const double a = c.x.at(along), b = best->x.at(along);
    if ((largest ? a > b : a < b) || (a == b && dist(c) < dist(*best))) best = &c;
  }
  return *best;
}

JointPrediction read_at(const FitState& s, const std::map<std::string, double>& x, const JointLawOptions& o) {
  const JointLawFit& f = s.fit;
  JointPrediction p;
  p.param = f.param;
  p.x = x;
  p.value = p.lo = p.hi = p.sd = p.expected_regret = p.loss = p.loss_lo = p.loss_hi = kNaN;
  p.measured = p.error = p.regret = p.measured_loss = kNaN;
  std::string why;
  for (const auto& a : f.axes) {
    const auto [lo, hi] = s.range.at(a);
    const double v = x.at(a);
    const double out = v > hi ? std::log2(v / hi) : (v < lo ? std::log2(lo / v) : 0.0);
    const double span = std::log2(hi / lo);
    p.extrapolation = std::max(p.extrapolation, out);
    if (why.empty() && (out > o.max_extrapolation + 1e-9 || out > span + 1e-9))
      why = fmt::format("declined: {} {:g} is {:.2f} doublings outside the fitted {:g}..{:g} (the limit: {:g} doublings "
                        "and no more than the fitted span, {:.2f})",
                        a, v, out, lo, hi, o.max_extrapolation, span);
  }
  p.status = why.empty() ? "predicted" : why;
  if (!why.empty()) return p;
  const std::vector<double> d = design(x, f.axes);
  p.value = dot(f.coef, d);
  double var_law = 0;
  if (s.boot.size() > 1) {
    double m = 0;
    for (const auto& b : s.boot) m += dot(b, d) / s.boot.size();
    for (const auto& b : s.boot) var_law += std::pow(dot(b, d) - m, 2) / (s.boot.size() - 1);
  }
  p.sd = std::sqrt(var_law + f.residual_sd * f.residual_sd);
  p.lo = p.value - f.t * p.sd;
  p.hi = p.value + f.t * p.sd;
  p.expected_regret = f.curvature * p.sd * p.sd;
  auto baseline = [&](const std::string& name, double v) {
    JointPrediction::Baseline b;
    b.name = name;
    b.value = v;
    b.expected_regret = f.curvature * (std::pow(v - p.value, 2) + p.sd * p.sd);
    b.error = b.regret = kNaN;
    p.baselines.push_back(b);
  };
  // The scale carried along: the axis the holdout splits on, else the law's first.
  const std::string along = o.holdout_upto.empty() ? f.axes[0] : canonical(o.holdout_upto.begin()->first);
  baseline("largest fitted scale carried", anchor(f.cells, along, x, true).optimum);
  baseline("own rule (smallest fitted scale carried)", anchor(f.cells, along, x, false).optimum);
  if (!o.reference.empty()) {
    double v = std::log2(o.reference.at("c"));
    for (const auto& a : f.axes) v += o.reference.at(a) * std::log2(x.at(a));
    baseline(o.reference_name, v);
  }
  const bool loss_known = std::all_of(f.loss_axes.begin(), f.loss_axes.end(), [&](const std::string& a) { return x.count(a) > 0; });
  if (!f.loss_coef.empty() && loss_known) {  // (a target that names no pooled axis has no loss to read)
    const std::vector<double> dl = design(x, f.loss_axes);
    const double lev = dot(dl, solve(s.loss_xtx, dl));
    const double l2 = dot(f.loss_coef, dl), half = f.t * f.loss_sd * std::sqrt(1 + lev);
    const double at_pred = 1 + p.expected_regret / 100;
    p.loss = std::exp2(l2) * at_pred;
    p.loss_lo = std::exp2(l2 - half) * at_pred;
    p.loss_hi = std::exp2(l2 + half) * at_pred;
  }
  return p;
}

void judge_held_out(JointPrediction& p, const LawCell& c) {
  p.held_out = true;
  p.measured = c.optimum;
  p.measured_loss = c.best_loss;
  p.measured_at_edge = c.at_edge;
  if (p.status != "predicted") return;
  p.error = p.value - c.optimum;
  p.regret = regret_of(c, p.value);
  p.covered = c.optimum >= p.lo && c.optimum <= p.hi;
  for (auto& b : p.baselines) b.error = b.value - c.optimum, b.regret = regret_of(c, b.value);
}

std::vector<std::string> law_axes(const SweepTable& table, const JointLawOptions& o) {
  if (o.axes.empty())
    throw UserError("command line", "--joint", "no axis to fit", fmt::format("name the law's axes, e.g. {}", input_name("--joint N,D")));
  const std::vector<std::string> have = analysis_axes(table);
  std::vector<std::string> axes;
  for (const auto& raw : o.axes) {
    const std::string a = canonical(raw);
    if (std::find(have.begin(), have.end(), a) == have.end())
      throw UserError("command line", "--joint", fmt::format("'{}' is no axis of {} (its axes: {})", raw, table.db, fmt::join(have, ", ")),
                      "name one of them");
    if (std::find(axes.begin(), axes.end(), a) != axes.end())
      throw UserError("command line", "--joint", fmt::format("{} is named twice", a), "name each axis once");
    if (!is_lr(o.hparam) && a == canonical(o.hparam))
      throw UserError("command line", "--hparam", fmt::format("'{}' is also an axis of the law", o.hparam),
                      "predict one key at scales named by the others");
    axes.push_back(a);
  }
  return axes;
}

void check_request(const SweepTable& table, const JointLawOptions& o, const std::vector<std::string>& axes) {
  if (o.at.empty() && o.holdout_upto.empty() && !o.loso)
    throw UserError("command line", "--at", "nothing to predict", fmt::format("give {} or {}", input_name("--at N=...,D=..."), input_name("--holdout --fit-upto N=5.4e8")));
  auto positive = [](const std::map<std::string, double>& m, const char* field) {
    for (const auto& [k, v] : m)
      if (!(v > 0) || !std::isfinite(v))
        throw UserError("command line", field, fmt::format("{}={:g} is not a positive number", k, v), "scales are positive counts");
  };
  positive(o.at, "--at");
  positive(o.holdout_upto, "--fit-upto");
  if (!o.at.empty())
    for (const auto& a : axes)
      if (!o.at.count(a))
        throw UserError("command line", "--at", fmt::format("the law is in {} but the target gives no {}", fmt::join(axes, ", "), a),
                        fmt::format("give every axis of the law in {}", input_name("--at")));
  // A target may also name an axis the law pools (N beside a batch-size law in D): its loss is read there.
  const std::vector<std::string> have = analysis_axes(table);
  for (const auto& [k, v] : o.at)
    if (std::find(have.begin(), have.end(), canonical(k)) == have.end())
      throw UserError("command line", "--at", fmt::format("'{}' is no axis of {} (its axes: {})", k, table.db, fmt::join(have, ", ")),
                      fmt::format("name the law's axes ({}) and, for the loss, the ones it pools", fmt::join(axes, ", ")));
  if (!o.reference.empty()) {
    bool ok = o.reference.count("c") && o.reference.at("c") > 0 && o.reference.size() == axes.size() + 1;
    for (const auto& a : axes) ok = ok && o.reference.count(a);
    if (!ok)
      throw UserError("command line", "--reference-law",
                      fmt::format("needs c > 0 and one exponent per law axis ({}), nothing else", fmt::join(axes, ", ")),
                      fmt::format("e.g. {}", input_name("--reference-law c=1.79,N=-0.713,D=0.307")));
  }
  if (!is_lr(o.hparam)) {
    const bool swept = std::any_of(table.rows.begin(), table.rows.end(), [&](const SweepRow& r) { return r.axes.count(o.hparam); });
    if (!swept)
      throw UserError("command line", "--hparam", fmt::format("'{}' is not swept in {}", o.hparam, table.db), "name a grid key of the store");
  }
  if (!(o.near_optimal_pct >= 0 && o.near_optimal_pct <= 50))
    throw UserError("command line", "--near-optimal", fmt::format("{:g} is not a percentage in [0, 50]", o.near_optimal_pct), "e.g. 0.25");
  if (!(o.level > 0 && o.level < 1)) throw UserError("command line", "level", "must be in (0, 1)", "e.g. 0.9");
}

// The fit of one parameterization on the cells `fitted` picks, and the held-out cells.
JointLawFit fit_param(const SweepTable& table, const std::string& param, const std::vector<std::string>& axes,
                      const JointLawOptions& o, JointLawResult& out, bool predict) {
  std::vector<std::string> retuned;
  std::set<std::string> used(axes.begin(), axes.end());
  used.insert(canonical(o.hparam));
  used.insert("lr");
  for (const auto& k : table.hparam_axes) if (!used.count(k)) retuned.push_back(k), used.insert(k);
  for (const auto& k : o.retune) if (!used.count(canonical(k))) retuned.push_back(canonical(k)), used.insert(canonical(k));
  // A cell is one point of every axis that is not re-tuned: the law's and the pooled ones (which
  // the law does not see, but which tell cells apart: B* in D alone over cells at several N).
  const std::vector<std::string> pooled = varying_others(table, param, used);
  std::vector<std::string> cell_axes = axes;
  cell_axes.insert(cell_axes.end(), pooled.begin(), pooled.end());
  for (const auto& [k, v] : o.holdout_upto)
    if (std::find(cell_axes.begin(), cell_axes.end(), canonical(k)) == cell_axes.end())
      throw UserError("command line", "--fit-upto",
                      fmt::format("{} does not vary between the cells of {} (they vary in {})", k, param, fmt::join(cell_axes, ", ")),
                      fmt::format("split on an axis of the law or one the cells vary in, e.g. {}", input_name("--holdout --fit-upto N=5.4e8")));
  std::vector<int> rows;
  std::vector<std::vector<double>> near;
  std::vector<LawCell> cells = build_cells(table, param, cell_axes, axes.size(), o.hparam, retuned, o.near_optimal_pct, rows, near);
  std::vector<LawCell> fit_cells, held;
  std::vector<std::vector<double>> fit_near;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!std::isfinite(cells[i].optimum)) continue;
    bool in = true;
    for (const auto& [k, v] : o.holdout_upto) in = in && cells[i].x.at(canonical(k)) <= v * (1 + 1e-12);
    if (in) fit_cells.push_back(cells[i]), fit_near.push_back(near[i]);
    else held.push_back(cells[i]);
  }
  if (!o.holdout_upto.empty() && held.empty())
    throw UserError("command line", "--fit-upto", fmt::format("every cell of {} is at or below it: nothing is held out", param),
                    "give a value below the largest scale");
  FitState s = fit_state(fit_cells, fit_near, axes, o, table.db);
  s.fit.param = param;
  s.fit.retuned = retuned;
  s.fit.pooled = pooled;
  if (predict) {
    if (!o.at.empty()) {
      std::map<std::string, double> x;
      for (const auto& [k, v] : o.at) x[canonical(k)] = v;
      out.predictions.push_back(read_at(s, x, o));
    }
    for (const auto& c : held) {
      JointPrediction p = read_at(s, c.x, o);
      judge_held_out(p, c);
      out.predictions.push_back(std::move(p));
    }
  }
  return s.fit;
}

std::vector<std::string> params_of(const SweepTable& table, const std::string& only) {
  std::set<std::string> ps;
  for (const auto& r : table.rows) ps.insert(r.param);
  if (!only.empty()) {
    if (!ps.count(only))
      throw UserError("command line", "--param", fmt::format("'{}' is not in {} (it holds {})", only, table.db, fmt::join(ps, ", ")),
                      "name one of them");
    return {only};
  }
  return {ps.begin(), ps.end()};
}

}  // namespace

JointLawResult fit_joint_law(const SweepTable& table, const JointLawOptions& opts) {
  JointLawResult r;
  r.opts = opts;
  const std::vector<std::string> axes = law_axes(table, opts);
  check_request(table, opts, axes);
  // With several parameterizations, one the law cannot be fitted to (too few cells, one value of an
  // axis, axes collinear in its cells) is left out with a note naming why; with one, or when none
  // fits, its refusal is the answer.
  const std::vector<std::string> params = params_of(table, opts.param);
  std::vector<std::string> refused;
  for (const std::string& param : params) {
    try {
      JointLawResult part;
      JointLawFit f = fit_param(table, param, axes, opts, part, true);
      r.fits.push_back(std::move(f));
      for (auto& p : part.predictions) r.predictions.push_back(std::move(p));
    } catch (const UserError& e) {
      if (params.size() == 1) throw;
      refused.push_back(e.what());
      r.notes.push_back(fmt::format("{} left out: {}", param, e.what()));
    }
  }
  if (r.fits.empty()) throw UserError(refused.front());
  return r;
}

Coverage loso_coverage(const SweepTable& table, const JointLawOptions& opts) {
  const std::vector<std::string> axes = law_axes(table, opts);
  Coverage cov;
  double err = 0;
  for (const std::string& param : params_of(table, opts.param)) {
    std::set<double> values;
    for (const auto& r : table.rows)
      if (r.param == param && value_of(r, axes[0]) > 0) values.insert(value_of(r, axes[0]));
    std::vector<double> v(values.begin(), values.end());
    for (size_t i = 2; i < v.size(); ++i) {
      JointLawOptions o = opts;
      o.at.clear();
      o.holdout_upto = {{axes[0], v[i - 1]}};
      JointLawResult part;
      SweepTable sub = table;  // the cells above v[i] are left out: this scale is the one read
      std::erase_if(sub.rows, [&](const SweepRow& r) { return r.param != param || value_of(r, axes[0]) > v[i]; });
      try {
        fit_param(sub, param, axes, o, part, true);
      } catch (const UserError&) {
        continue;  // too few cells below this scale (or collinear there): nothing read
      }
      for (const auto& p : part.predictions)
        if (p.status == "predicted") cov.read++, cov.covered += p.covered, err += std::fabs(p.error);
    }
  }
  cov.mean_abs_error = cov.read ? err / cov.read : kNaN;
  return cov;
}

namespace {

std::string pct3(double v) { return std::isnan(v) ? "n/a" : (std::isinf(v) ? "inf" : fmt::format("{:.3f}%", v)); }
std::string where(const std::map<std::string, double>& x, const std::vector<std::string>& axes) {
  std::vector<std::string> parts;  // the law's axes in its order, then the pooled ones
  for (const auto& a : axes)
    if (x.count(a)) parts.push_back(fmt::format("{}={:.4g}", a, x.at(a)));
  for (const auto& [k, v] : x)
    if (std::find(axes.begin(), axes.end(), k) == axes.end()) parts.push_back(fmt::format("{}={:.4g}", k, v));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string fit_markdown(const JointLawFit& f, const JointLawOptions& o) {
  std::string s = fmt::format("#### {}: log2 {}* = a", f.param, hparam_label(o.hparam));
  for (const auto& a : f.axes) s += fmt::format(" + b_{0} log2 {0}", a);
  s += fmt::format("\n\nFitted on {} ({} cells, {} rows){}{}.\n\n",
                   o.near_optimal_pct > 0 ? fmt::format("every run within {:g}% of its cell's best loss", o.near_optimal_pct)
                                          : std::string("each cell's best run"),
                   f.n_cells, f.n_rows, f.retuned.empty() ? "" : fmt::format("; re-tuned in every cell: {}", fmt::join(f.retuned, ", ")),
                   f.pooled.empty() ? "" : fmt::format("; pooled (not in the law): {}", fmt::join(f.pooled, ", ")));
  s += fmt::format("| coefficient | value | {:.0f}% [cell bootstrap] |\n|---|---|---|\n", o.level * 100);
  for (size_t j = 0; j < f.coef.size(); ++j)
    s += fmt::format("| {} | {} | [{}, {}] |\n", j == 0 ? std::string("a") : "b_" + f.axes[j - 1], fmt_num(f.coef[j], "{:+.4f}"),
                     fmt_num(f.coef_lo[j], "{:+.4f}"), fmt_num(f.coef_hi[j], "{:+.4f}"));
  s += fmt::format("\nThe cells' optima scatter about the law by {:.3f} doublings (SD, {} degrees of freedom; t = {:.3f}); "
                   "regret curvature {} per doubling^2 (median over the cells).\n",
                   f.residual_sd, f.dof, f.t, fmt_num(f.curvature, "{:.3f}%"));
  return s;
}

std::string baseline_cells(const JointPrediction& p, bool held) {
  std::string s;
  for (const auto& b : p.baselines)
    s += held ? fmt::format(" {}, {} |", fmt_num(b.error), pct3(b.regret)) : fmt::format(" {}, {} |", fmt_num(b.value), pct3(b.expected_regret));
  return s;
}

}  // namespace

std::string joint_law_markdown(const JointLawResult& r) {
  const JointLawOptions& o = r.opts;
  std::string s;
  for (const auto& f : r.fits) s += fit_markdown(f, o) + "\n";
  std::vector<std::string> bnames;
  for (const auto& p : r.predictions)
    if (!p.baselines.empty()) {
      for (const auto& b : p.baselines) bnames.push_back(b.name);
      break;
    }
  std::string bhead, bsep;
  for (const auto& n : bnames) bhead += " " + n + " |", bsep += "---|";
  const std::string what = hparam_label(o.hparam);
  const std::vector<std::string> law = r.fits.empty() ? std::vector<std::string>() : r.fits[0].axes;
  bool any_target = false, any_held = false;
  for (const auto& p : r.predictions) (p.held_out ? any_held : any_target) = true;
  if (any_target) {
    s += fmt::format("| param | target | outside (doublings) | predicted log2 {0} [{1:.0f}%] | {0} | expected regret | "
                     "expected loss [{1:.0f}%] |{2}\n|---|---|---|---|---|---|---|{3}\n",
                     what, o.level * 100, bhead, bsep);
    for (const auto& p : r.predictions) {
      if (p.held_out) continue;
      if (p.status != "predicted") {
        s += fmt::format("| {} | {} | {:.2f} | {} | | | |{}\n", p.param, where(p.x, law), p.extrapolation, p.status,
                         std::string(bnames.size(), '|'));
        continue;
      }
      s += fmt::format("| {} | {} | {:.2f} | {} [{}, {}] | {:.4g} | {} | {} [{}, {}] |{}\n", p.param, where(p.x, law),
                       p.extrapolation, fmt_num(p.value), fmt_num(p.lo), fmt_num(p.hi), std::exp2(p.value), pct3(p.expected_regret),
                       fmt_num(p.loss, "{:.4f}"), fmt_num(p.loss_lo, "{:.4f}"), fmt_num(p.loss_hi, "{:.4f}"), baseline_cells(p, false));
    }
    if (!bnames.empty()) s += "\n(each baseline: its log2 value and the regret expected there under the law)\n";
  }
  if (any_held) {
    if (any_target) s += "\n";
    s += fmt::format("Held out (error in doublings, predicted - the cell's measured best; regret of the predicted {0} on the "
                     "cell's profile, against its best):\n\n"
                     "| param | held-out cell | predicted [{1:.0f}%] | measured | error | covered | regret (expected) | loss: "
                     "expected, measured |{2}\n|---|---|---|---|---|---|---|---|{3}\n",
                     what, o.level * 100, bhead, bsep);
    for (const auto& p : r.predictions) {
      if (!p.held_out) continue;
      if (p.status != "predicted") {
        s += fmt::format("| {} | {} | {} | {} | | | | |{}\n", p.param, where(p.x, law), p.status, fmt_num(p.measured),
                         std::string(bnames.size(), '|'));
        continue;
      }
      s += fmt::format("| {} | {} | {} [{}, {}] | {}{} | {} | {} | {} ({}) | {}, {} |{}\n", p.param, where(p.x, law), fmt_num(p.value),
                       fmt_num(p.lo), fmt_num(p.hi), fmt_num(p.measured), p.measured_at_edge ? " (edge)" : "", fmt_num(p.error),
                       p.covered ? "yes" : "no", pct3(p.regret), pct3(p.expected_regret), fmt_num(p.loss, "{:.4f}"),
                       fmt_num(p.measured_loss, "{:.4f}"), baseline_cells(p, true));
    }
    // Means over the cells read (a regret that cannot be read, the prediction outside a cell's grid,
    // is left out and the count says so).
    struct Mean {
      double sum = 0;
      int n = 0;
      void add(double v) { if (std::isfinite(v)) sum += v, ++n; }
      std::string text(int of, bool percent) const {
        if (n == 0) return "n/a";
        const std::string v = percent ? pct3(sum / n) : fmt::format("{:.2f}", sum / n);
        return n < of ? fmt::format("{} ({} of {})", v, n, of) : v;
      }
    };
    int n = 0, covered = 0;
    Mean err, reg;
    std::vector<Mean> berr(bnames.size()), breg(bnames.size());
    for (const auto& p : r.predictions)
      if (p.held_out && p.status == "predicted") {
        ++n;
        covered += p.covered;
        err.add(std::fabs(p.error));
        reg.add(p.regret);
        for (size_t i = 0; i < p.baselines.size() && i < bnames.size(); ++i)
          berr[i].add(std::fabs(p.baselines[i].error)), breg[i].add(p.baselines[i].regret);
      }
    if (n > 0) {
      s += fmt::format("| mean | {} cells | | | {} | {}/{} | {} | |", n, err.text(n, false), covered, n, reg.text(n, true));
      for (size_t i = 0; i < bnames.size(); ++i) s += fmt::format(" {}, {} |", berr[i].text(n, false), breg[i].text(n, true));
      s += "\n\n(baselines held out: error, measured regret; the mean row: mean |error|, mean regret)\n";
    }
  }
  for (const auto& n : r.notes) s += "\n" + n + "\n";
  return s;
}

nlohmann::json joint_law_to_json(const JointLawResult& r) {
  const auto n = json_number;
  nlohmann::json fits = nlohmann::json::array(), preds = nlohmann::json::array();
  for (const auto& f : r.fits) {
    nlohmann::json coef = nlohmann::json::array();
    for (size_t j = 0; j < f.coef.size(); ++j)
      coef.push_back({{"name", j == 0 ? std::string("a") : "b_" + f.axes[j - 1]}, {"value", n(f.coef[j])},
                      {"interval", {n(f.coef_lo[j]), n(f.coef_hi[j])}}});
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : f.cells)
      cells.push_back({{"x", c.x}, {"optimum_log2", n(c.optimum)}, {"best_loss", n(c.best_loss)}, {"at_edge", c.at_edge}, {"rows", c.rows}});
    fits.push_back({{"param", f.param}, {"axes", f.axes}, {"coefficients", coef}, {"residual_sd", n(f.residual_sd)},
                    {"cells", cells}, {"n_rows", f.n_rows}, {"dof", f.dof}, {"t", n(f.t)}, {"curvature_pct", n(f.curvature)},
                    {"loss_axes", f.loss_axes}, {"loss_coefficients", f.loss_coef}, {"loss_sd_log2", n(f.loss_sd)}, {"retuned", f.retuned}, {"pooled", f.pooled}});
  }
  for (const auto& p : r.predictions) {
    nlohmann::json bl = nlohmann::json::array();
    for (const auto& b : p.baselines)
      bl.push_back({{"name", b.name}, {"value_log2", n(b.value)}, {"expected_regret_pct", n(b.expected_regret)},
                    {"error_doublings", n(b.error)}, {"regret_pct", n(b.regret)}});
    nlohmann::json j = {{"param", p.param}, {"x", p.x}, {"status", p.status}, {"extrapolation_doublings", n(p.extrapolation)},
                        {"value_log2", n(p.value)}, {"interval_log2", {n(p.lo), n(p.hi)}}, {"value", n(std::exp2(p.value))},
                        {"sd_log2", n(p.sd)}, {"expected_regret_pct", n(p.expected_regret)},
                        {"loss", n(p.loss)}, {"loss_interval", {n(p.loss_lo), n(p.loss_hi)}}, {"baselines", bl},
                        {"held_out", p.held_out}};
    if (p.held_out)
      j["holdout"] = {{"measured_log2", n(p.measured)}, {"error_doublings", n(p.error)}, {"regret_pct", n(p.regret)},
                      {"covered", p.covered}, {"measured_at_edge", p.measured_at_edge}, {"measured_loss", n(p.measured_loss)}};
    preds.push_back(std::move(j));
  }
  const JointLawOptions& o = r.opts;
  return {{"law", "log2 h* = a + sum_i b_i log2 x_i"},
          {"hparam", is_lr(o.hparam) ? std::string("lr") : o.hparam},
          {"axes", o.axes},
          {"estimator", o.near_optimal_pct > 0 ? fmt::format("near-optimal runs, {:g}%", o.near_optimal_pct) : std::string("argmin")},
          {"level", o.level},
          {"bootstrap", o.bootstrap},
          {"fits", fits},
          {"predictions", preds},
          {"notes", r.notes}};
}

}  // namespace scaleinv
