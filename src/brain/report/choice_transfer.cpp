// Choices kept from the base scale (see ChoiceTransfer in transfer.h): does the value of a grid
// axis (a schedule's decay shape, the warmup, an activation) that is best at the smallest width or
// depth stay the best at every larger one?
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "brain/report/seed_curves.h"
#include "brain/util/nonfinite.h"
#include "brain/report/transfer.h"

namespace scaleinv {

namespace {

using seed_curves::SeedTable;
using seed_curves::worst_of;

// What one choice analysis holds fixed, and its data: choice value -> scale -> seed -> LR -> loss.
struct ChoiceKey {
  std::string choice_axis, scale_axis, param, fixed, context;
  bool operator<(const ChoiceKey& o) const {
    return std::tie(choice_axis, scale_axis, param, fixed, context) <
           std::tie(o.choice_axis, o.scale_axis, o.param, o.fixed, o.context);
  }
};
using ChoiceData = std::map<std::string, std::map<double, SeedTable>>;

// Every row that has `choice_axis`, keyed by what is held fixed for `scale_axis`.
std::map<ChoiceKey, ChoiceData> partition(const SweepTable& table, const std::string& choice_axis,
                                          const std::string& scale_axis) {
  std::map<ChoiceKey, ChoiceData> parts;
  for (const auto& r : table.rows) {
    auto it = r.axes.find(choice_axis);
    if (it == r.axes.end()) continue;
    const ChoiceKey key{choice_axis, scale_axis, r.param, seed_curves::fixed_scales(r, scale_axis),
                        seed_curves::other_axes(r, choice_axis)};
    parts[key][it->second][seed_curves::axis_value(r, scale_axis)][r.seed][seed_curves::lr_key(r.lr_log2)] =
        seed_curves::row_loss(r);
  }
  return parts;
}

// The axis' values in order: numerically when every one is a number, else as text.
std::vector<std::string> ordered_choices(const ChoiceData& data) {
  std::vector<std::string> v;
  bool numeric = true;
  for (const auto& [c, by_scale] : data) {
    v.push_back(c);
    numeric = numeric && seed_curves::is_number(c);
  }
  if (numeric)
    std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      return std::strtod(a.c_str(), nullptr) < std::strtod(b.c_str(), nullptr);
    });
  return v;
}

// One seed draw: per scale, per choice, the seed-averaged curve.
using DrawCurves = std::vector<std::vector<std::vector<LrPoint>>>;

// Paired seeds: at each scale the choices are compared on the seeds every one of them ran there
// (two databases with different seed counts; all of the draw when they share none).
DrawCurves curves_of(const ChoiceData& data, const std::vector<std::string>& choices, const std::vector<double>& scales,
                     const std::vector<int64_t>& draw) {
  DrawCurves out(scales.size(), std::vector<std::vector<LrPoint>>(choices.size()));
  for (size_t i = 0; i < scales.size(); ++i) {
    std::vector<const SeedTable*> here(choices.size(), nullptr);  // each choice's table at this scale
    std::vector<const SeedTable*> ran;
    for (size_t j = 0; j < choices.size(); ++j)
      if (auto it = data.at(choices[j]).find(scales[i]); it != data.at(choices[j]).end()) ran.push_back(here[j] = &it->second);
    if (ran.empty()) continue;
    const std::set<int64_t> common = seed_curves::seeds_also_in(seed_curves::seeds_of(*ran.front()), ran);
    const std::vector<int64_t> d = common.empty() ? draw : seed_curves::draw_within(draw, common);
    for (size_t j = 0; j < choices.size(); ++j)
      if (here[j]) out[i][j] = seed_curves::mean_curve(*here[j], d, seed_curves::lr_keys(*here[j]));
  }
  return out;
}

// The best grid-point loss of a curve: NaN when never run, +inf when every point diverged.
double best_loss(const std::vector<LrPoint>& pts) {
  if (pts.empty()) return kNaN;
  const LrPoint* b = seed_curves::best_point(pts);
  return b ? b->mean_loss : kInf;
}

// What one draw gives: the base choice, its base LR, and per scale the best losses and regrets.
struct ChoiceDraw {
  int base = -1;
  double base_lr = kNaN;
  std::vector<ChoiceScale> scales;
};

ChoiceDraw judge_draw(const DrawCurves& c, const std::vector<std::string>& choices, const std::vector<double>& scales) {
  ChoiceDraw d;
  for (size_t j = 0; j < choices.size(); ++j) {
    const double l = best_loss(c[0][j]);
    if (std::isfinite(l) && (d.base < 0 || l < best_loss(c[0][static_cast<size_t>(d.base)]))) d.base = static_cast<int>(j);
  }
  if (d.base >= 0) d.base_lr = seed_curves::best_point(c[0][static_cast<size_t>(d.base)])->lr_log2;
  for (size_t i = 0; i < scales.size(); ++i) {
    ChoiceScale s;
    s.scale = scales[i];
    s.regret = s.regret_base_lr = kNaN;
    s.regret_lo = s.regret_hi = s.regret_base_lr_lo = s.regret_base_lr_hi = kNaN;
    double best = kInf;
    for (size_t j = 0; j < choices.size(); ++j) {
      s.best_loss.push_back(best_loss(c[i][j]));
      if (std::isfinite(s.best_loss.back()) && s.best_loss.back() < best) {
        best = s.best_loss.back();
        s.best_choice = choices[j];
      }
    }
    if (d.base >= 0 && std::isfinite(best)) {
      const auto& mine = c[i][static_cast<size_t>(d.base)];
      s.regret = seed_curves::regret_pct(s.best_loss[static_cast<size_t>(d.base)], best);
      if (const LrPoint* at = seed_curves::nearest_point(mine, d.base_lr))
        s.regret_base_lr = seed_curves::regret_pct(at->mean_loss, best);
    }
    d.scales.push_back(std::move(s));
  }
  return d;
}

std::vector<double> regrets(const ChoiceDraw& d, bool base_lr) {
  std::vector<double> v;
  for (const auto& s : d.scales) v.push_back(base_lr ? s.regret_base_lr : s.regret);
  return v;
}

// The point estimate (draw 0) with every interval from the resamples.
ChoiceTransfer summarize(const ChoiceKey& key, const std::vector<std::string>& choices, const std::vector<ChoiceDraw>& draws,
                         const TransferOptions& opts) {
  ChoiceTransfer t;
  t.choice_axis = key.choice_axis;
  t.scale_axis = key.scale_axis;
  t.param = key.param;
  t.fixed = key.fixed;
  t.context = key.context;
  t.choices = choices;
  const ChoiceDraw& point = draws.front();
  t.base_choice = point.base >= 0 ? choices[static_cast<size_t>(point.base)] : "";
  t.base_lr_log2 = point.base_lr;
  t.scales = point.scales;
  const bool boot = draws.size() > 1;
  auto q = [&](const std::vector<double>& v, double p) { return boot ? seed_curves::percentile(v, p) : kNaN; };
  for (size_t i = 0; i < t.scales.size(); ++i) {
    std::vector<double> a, b;
    for (size_t di = 1; di < draws.size(); ++di) {
      if (!std::isnan(draws[di].scales[i].regret)) a.push_back(draws[di].scales[i].regret);
      if (!std::isnan(draws[di].scales[i].regret_base_lr)) b.push_back(draws[di].scales[i].regret_base_lr);
    }
    t.scales[i].regret_lo = q(a, opts.lo_q);
    t.scales[i].regret_hi = q(a, opts.hi_q);
    t.scales[i].regret_base_lr_lo = q(b, opts.lo_q);
    t.scales[i].regret_base_lr_hi = q(b, opts.hi_q);
  }
  std::vector<double> wa, wb;
  for (size_t di = 1; di < draws.size(); ++di) {
    if (const auto w = worst_of(regrets(draws[di], false)); w.second >= 0) wa.push_back(w.first);
    if (const auto w = worst_of(regrets(draws[di], true)); w.second >= 0) wb.push_back(w.first);
  }
  const auto w = worst_of(regrets(point, false));
  t.worst = w.first;
  t.worst_at = w.second >= 0 ? t.scales[static_cast<size_t>(w.second)].scale : kNaN;
  t.worst_lo = q(wa, opts.lo_q);
  t.worst_hi = q(wa, opts.hi_q);
  const auto wl = worst_of(regrets(point, true));
  t.worst_base_lr = wl.first;
  t.worst_base_lr_at = wl.second >= 0 ? t.scales[static_cast<size_t>(wl.second)].scale : kNaN;
  t.worst_base_lr_lo = q(wb, opts.lo_q);
  t.worst_base_lr_hi = q(wb, opts.hi_q);
  t.holds = !std::isnan(t.worst) && t.worst <= opts.choice_tolerance_pct;
  return t;
}

std::optional<ChoiceTransfer> analyze_choice(const ChoiceKey& key, const ChoiceData& data, const TransferOptions& opts) {
  std::set<double> scale_set;
  std::set<int64_t> seed_set;
  for (const auto& [c, by_scale] : data)
    for (const auto& [s, seeds] : by_scale) {
      scale_set.insert(s);
      for (const auto& [seed, by_lr] : seeds) seed_set.insert(seed);
    }
  if (data.size() < 2 || scale_set.size() < 2) return std::nullopt;
  const std::vector<std::string> choices = ordered_choices(data);
  const std::vector<double> scales(scale_set.begin(), scale_set.end());
  std::vector<ChoiceDraw> draws;
  for (const auto& d : seed_curves::seed_draws(std::vector<int64_t>(seed_set.begin(), seed_set.end()), opts.bootstrap,
                                               opts.rng_seed))
    draws.push_back(judge_draw(curves_of(data, choices, scales, d), choices, scales));
  return summarize(key, choices, draws, opts);
}

}  // namespace

std::string ChoiceTransfer::title() const {
  return choice_axis + " across " + scale_axis + seed_curves::held_text(fixed, context);
}

std::vector<ChoiceTransfer> analyze_choices(const SweepTable& table, const TransferOptions& opts) {
  std::set<std::string> axes;
  for (const auto& r : table.rows)
    for (const auto& [k, v] : r.axes) axes.insert(k);
  std::vector<ChoiceTransfer> out;
  for (const std::string& choice_axis : axes)
    for (const std::string scale_axis : {"width", "depth"})
      for (const auto& [key, data] : partition(table, choice_axis, scale_axis))
        if (auto t = analyze_choice(key, data, opts)) out.push_back(std::move(*t));
  return out;
}

}  // namespace scaleinv
