// A hyperparameter's optimum read as the LR's (see hparam_profile.h).
#include "brain/report/hparam_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

namespace {

// Grid keys that are not hyperparameters: the model's and the run's scales and the data (what
// predict reads a target on), a search's rung and trial, and the step budget a rung sets.
bool structural(const std::string& key) {
  for (const char* prefix : {"model.", "train.", "data.", "search."})
    if (key.rfind(prefix, 0) == 0) return true;
  return key == "optim.total_steps";
}

// A curve of `key`: everything but the LR, the seed and `key` itself held fixed.
using CurveKey = std::tuple<std::string, int64_t, int64_t, std::map<std::string, std::string>, double>;

// One curve's losses (seed -> LR -> loss, as the transfer analyses read them) and its runs per LR.
struct Curve {
  seed_curves::SeedTable losses;
  std::map<int64_t, std::vector<const SweepRow*>> runs;
};

}  // namespace

std::vector<std::string> swept_hparams(const SweepTable& t) {
  std::map<std::string, std::set<std::string>> values;
  std::set<std::string> non_numeric;
  for (const auto& r : t.rows)
    for (const auto& [k, v] : r.axes) {
      values[k].insert(v);
      if (!seed_curves::is_number(v)) non_numeric.insert(k);
    }
  std::vector<std::string> out;
  for (const auto& [k, vs] : values)
    if (vs.size() >= 2 && !non_numeric.count(k) && !structural(k)) out.push_back(k);
  return out;
}

HparamProfile profile_over_lr(const SweepTable& t, const std::string& key) {
  const std::vector<std::string> swept = swept_hparams(t);
  if (std::find(swept.begin(), swept.end(), key) == swept.end()) {
    const std::string known = fmt::format("{}", fmt::join(swept, ", "));
    throw UserError("command line", "--hparam",
                    fmt::format("'{}' is no swept hyperparameter of {} ({})", key, t.db,
                                known.empty() ? "it sweeps none beside the LR" : "it sweeps " + known),
                    fmt::format("{}, or leave {} out for the LR",
                                known.empty() ? "sweep one in the grid beside the LR and a scale" : "name one of them",
                                input_name("--hparam")));
  }
  HparamProfile p;
  p.key = key;
  p.table.db = t.db;
  p.table.name = t.name;
  p.table.duplicates = t.duplicates;
  std::map<CurveKey, Curve> curves;
  for (const auto& r : t.rows) {
    const auto it = r.axes.find(key);
    if (it == r.axes.end()) continue;
    const double v = std::strtod(it->second.c_str(), nullptr);
    if (!(v > 0)) {
      ++p.left_out;
      continue;
    }
    auto others = r.axes;
    others.erase(key);
    Curve& c = curves[{r.param, r.width, r.depth, others, v}];
    const int64_t lr = seed_curves::lr_key(r.lr_log2);
    c.losses[r.seed][lr] = seed_curves::row_loss(r);
    c.runs[lr].push_back(&r);
  }
  if (curves.empty())
    throw UserError(t.db, key, "no value is positive, so none has a log2 to fit", "sweep positive values of it");
  for (const auto& [ck, c] : curves) {
    p.lr_values = std::max<int64_t>(p.lr_values, static_cast<int64_t>(c.runs.size()));
    // The LR of least seed-mean loss (+inf where a seed diverged; the first, smallest, on a tie).
    const std::set<int64_t> seeds = seed_curves::seeds_of(c.losses);
    const std::vector<LrPoint> mean =
        seed_curves::mean_curve(c.losses, {seeds.begin(), seeds.end()}, seed_curves::lr_keys(c.losses));
    const LrPoint* best = seed_curves::best_point(mean);
    const bool all_diverged = best == nullptr;
    for (const SweepRow* r : all_diverged ? c.runs.begin()->second : c.runs.at(seed_curves::lr_key(best->lr_log2))) {
      SweepRow row = *r;
      row.lr_log2 = std::log2(std::get<4>(ck));
      row.axes = std::get<3>(ck);
      if (all_diverged) row.diverged = true;
      p.table.rows.push_back(std::move(row));
    }
  }
  return p;
}

}  // namespace scaleinv
