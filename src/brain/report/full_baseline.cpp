// The base LR against standard re-tuned in every swept hyperparameter (see FullBaseline in
// transfer.h): the stronger depth baseline of docs/results/transfer_depth_resmlp.md and transfer_depth_gpt.md,
// read from the sweep databases with intervals instead of a hand-written query.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ranges>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/report/seed_curves.h"
#include "brain/util/nonfinite.h"
#include "brain/report/transfer.h"

namespace scaleinv {

namespace {

using seed_curves::SeedTable;

// A grid axis that is a hyperparameter to re-tune (not a condition of the run such as its length,
// batch size, data or model): hp.* and optim.* but the schedule's length.
bool tunable(const std::string& key) {
  return key.rfind("hp.", 0) == 0 || (key.rfind("optim.", 0) == 0 && key != "optim.total_steps");
}

// What a baseline row must share with the parameterization's: train.steps and every axis that is
// not a hyperparameter.
std::string condition(const SweepRow& r) {
  std::string s = fmt::format("steps={}", r.steps);
  for (const auto& [k, v] : r.axes)
    if (!tunable(k)) s += ", " + k + "=" + v;
  return s;
}

// The hyperparameter axes of a row, "k=v, k=v" ("" when none).
std::string tuned_context(const SweepRow& r) {
  auto tuned = r.axes | std::views::filter([](const auto& kv) { return tunable(kv.first); }) |
               std::views::transform([](const auto& kv) { return kv.first + "=" + kv.second; });
  return fmt::format("{}", fmt::join(tuned, ", "));
}

struct Where {
  std::string fixed, cond;
  bool operator<(const Where& o) const { return std::tie(fixed, cond) < std::tie(o.fixed, o.cond); }
};
// standard's rows at one Where: scale value -> hyperparameter context -> seed table.
using Pool = std::map<double, std::map<std::string, SeedTable>>;

struct Group {
  Where where;
  std::string param, context;
  bool operator<(const Group& o) const {
    return std::tie(where, param, context) < std::tie(o.where, o.param, o.context);
  }
};

// Seeds the parameterization shares with every curve of the pool (its own seeds when none are shared).
std::vector<int64_t> paired_seeds(const std::map<double, SeedTable>& mine, const Pool& pool) {
  std::set<int64_t> own;
  for (const auto& [v, t] : mine) own.merge(seed_curves::seeds_of(t));
  std::vector<const SeedTable*> theirs;
  for (const auto& [v, by_ctx] : pool)
    for (const auto& [ctx, t] : by_ctx) theirs.push_back(&t);
  const std::set<int64_t> common = seed_curves::seeds_also_in(own, theirs);
  const std::set<int64_t>& use = common.empty() ? own : common;
  return std::vector<int64_t>(use.begin(), use.end());
}

// One seed draw: per scale value, the loss at the base LR, standard's best and where it is.
struct Draw {
  double base_lr = kNaN;
  std::vector<double> loss, best, regret;
  std::vector<std::string> at;
};

Draw judge(const std::vector<double>& vals, const std::map<double, SeedTable>& mine, const Pool& pool,
           const std::vector<int64_t>& draw) {
  Draw d;
  std::vector<std::vector<LrPoint>> curves;
  for (double v : vals) curves.push_back(seed_curves::mean_curve(mine.at(v), draw, seed_curves::lr_keys(mine.at(v))));
  if (const LrPoint* b = seed_curves::best_point(curves.front())) d.base_lr = b->lr_log2;
  for (size_t i = 0; i < vals.size(); ++i) {
    const LrPoint* at = std::isnan(d.base_lr) ? nullptr : seed_curves::nearest_point(curves[i], d.base_lr);
    d.loss.push_back(at ? at->mean_loss : kNaN);
    double best = kNaN;
    std::string where;
    if (auto it = pool.find(vals[i]); it != pool.end())
      for (const auto& [ctx, t] : it->second)
        if (const LrPoint* b = seed_curves::best_point(seed_curves::mean_curve(t, draw, seed_curves::lr_keys(t)));
            b && (std::isnan(best) || b->mean_loss < best)) {
          best = b->mean_loss;
          where = fmt::format("{}{}log2 LR {:.2f}", ctx, ctx.empty() ? "" : ", ", b->lr_log2);
        }
    d.best.push_back(best);
    d.at.push_back(where);
    d.regret.push_back(seed_curves::regret_pct(d.loss.back(), best));
  }
  return d;
}

FullBaseline analyze_group(const std::string& axis, const Group& g, const std::map<double, SeedTable>& mine,
                           const Pool& pool, const std::set<std::string>& tuned, const TransferOptions& opts) {
  FullBaseline fb;
  fb.scale_axis = axis;
  fb.param = g.param;
  fb.fixed = g.where.fixed;
  fb.context = g.context;
  fb.tuned.assign(tuned.begin(), tuned.end());
  std::vector<double> vals;
  for (const auto& [v, t] : mine) vals.push_back(v);
  const auto draws = seed_curves::seed_draws(paired_seeds(mine, pool), opts.bootstrap, opts.rng_seed);
  std::vector<std::vector<double>> regrets(vals.size());
  std::vector<double> worsts;
  Draw point;
  for (size_t di = 0; di < draws.size(); ++di) {
    Draw d = judge(vals, mine, pool, draws[di]);
    if (di == 0) {
      point = std::move(d);
      continue;
    }
    for (size_t i = 0; i < vals.size(); ++i)
      if (!std::isnan(d.regret[i])) regrets[i].push_back(d.regret[i]);
    if (const auto w = seed_curves::worst_of(d.regret); w.second >= 0) worsts.push_back(w.first);
  }
  const bool boot = draws.size() > 1;
  auto q = [&](const std::vector<double>& v, double p) { return boot ? seed_curves::percentile(v, p) : kNaN; };
  fb.base_lr_log2 = point.base_lr;
  for (size_t i = 0; i < vals.size(); ++i) {
    FullBaselineScale s;
    s.scale = vals[i];
    s.loss = point.loss[i];
    s.standard_best = point.best[i];
    s.standard_at = point.at[i];
    s.regret = point.regret[i];
    s.regret_lo = q(regrets[i], opts.lo_q);
    s.regret_hi = q(regrets[i], opts.hi_q);
    fb.scales.push_back(std::move(s));
  }
  const auto w = seed_curves::worst_of(point.regret);
  fb.worst = w.first;
  fb.worst_at = w.second >= 0 ? vals[static_cast<size_t>(w.second)] : kNaN;
  fb.worst_lo = q(worsts, opts.lo_q);
  fb.worst_hi = q(worsts, opts.hi_q);
  fb.holds = std::isfinite(fb.worst) && fb.worst <= opts.choice_tolerance_pct;
  return fb;
}

}  // namespace

std::vector<FullBaseline> analyze_full_baseline(const SweepTable& table, const TransferOptions& opts) {
  std::vector<FullBaseline> out;
  for (const std::string axis : {"width", "depth"}) {
    std::map<Where, Pool> pools;
    std::map<Where, std::set<std::string>> contexts, tuned;
    std::map<Group, std::map<double, SeedTable>> groups;
    for (const SweepRow& r : table.rows) {
      const Where w{seed_curves::fixed_scales(r, axis), condition(r)};
      const double v = seed_curves::axis_value(r, axis);
      const double loss = seed_curves::row_loss(r);
      if (r.param == "standard") {
        const std::string ctx = tuned_context(r);
        pools[w][v][ctx][r.seed][seed_curves::lr_key(r.lr_log2)] = loss;
        contexts[w].insert(ctx);
        for (const auto& [k, val] : r.axes)
          if (tunable(k)) tuned[w].insert(k);
      } else {
        groups[Group{w, r.param, seed_curves::other_axes(r, axis)}][v][r.seed][seed_curves::lr_key(r.lr_log2)] = loss;
      }
    }
    for (const auto& [g, mine] : groups) {
      // Only where standard was swept in a hyperparameter beside its LR, and the scale varies.
      if (mine.size() < 2 || contexts[g.where].size() < 2) continue;
      out.push_back(analyze_group(axis, g, mine, pools.at(g.where), tuned.at(g.where), opts));
    }
  }
  return out;
}

}  // namespace scaleinv
