// Each cell's best runs in an imported grid (see cell_ranking.h).
#include "brain/report/cell_ranking.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

namespace {

struct Point {
  double lr_log2 = 0;
  std::string hparams;  // "batch_size=736, ..." ("" when the LR alone is tuned)
  double sum = 0;
  int seeds = 0;
  bool diverged = false;
  double mean() const { return diverged ? std::numeric_limits<double>::infinity() : sum / seeds; }
};

// The cell's name: the parameterization, then every non-hyperparameter axis (width and depth when set).
std::string cell_of(const SweepRow& r, const std::set<std::string>& hparams) {
  std::string s = r.param;
  if (r.width > 0) s += fmt::format(", width {}", r.width);
  if (r.depth > 0) s += fmt::format(", depth {}", r.depth);
  for (const auto& [k, v] : r.axes)
    if (!hparams.count(k)) s += fmt::format(", {}={}", k, v);
  return s;
}

}  // namespace

std::string rank_cells_markdown(const SweepTable& table, int top) {
  if (top < 1) throw UserError("command line", "--top", fmt::format("{} runs per cell", top), "e.g. --top 3");
  // Cells in numeric order: the parameterization, then each axis' value (width, depth, then the
  // others by name); the name is what the table shows.
  using CellKey = std::pair<std::string, std::vector<double>>;
  std::map<CellKey, std::map<std::pair<int64_t, std::string>, Point>> cells;
  std::map<CellKey, std::string> names;
  for (const SweepRow& r : table.rows) {
    CellKey key{r.param, {static_cast<double>(r.width), static_cast<double>(r.depth)}};
    for (const auto& [k, v] : r.axes)
      if (!table.hparam_axes.count(k)) key.second.push_back(seed_curves::is_number(v) ? std::strtod(v.c_str(), nullptr) : 0.0);
    names.emplace(key, cell_of(r, table.hparam_axes));
    std::string hp;
    for (const auto& [k, v] : r.axes)
      if (table.hparam_axes.count(k)) hp += fmt::format("{}{}={}", hp.empty() ? "" : ", ", k, v);
    Point& p = cells[key][{seed_curves::lr_key(r.lr_log2), hp}];
    p.lr_log2 = r.lr_log2;
    p.hparams = hp;
    p.diverged = p.diverged || r.diverged || !std::isfinite(r.final_loss);
    if (std::isfinite(r.final_loss)) p.sum += r.final_loss;
    p.seeds += 1;
  }
  std::string s = fmt::format("Each cell's best {} runs by seed-mean final loss (regret against the cell's best):\n\n"
                              "| cell | rank | LR | log2 LR | other hyperparameters | loss | regret |\n"
                              "|---|---|---|---|---|---|---|\n",
                              top);
  for (const auto& [key, points] : cells) {
    const std::string& cell = names.at(key);
    std::vector<const Point*> order;
    for (const auto& [key, p] : points) order.push_back(&p);
    std::stable_sort(order.begin(), order.end(), [](const Point* a, const Point* b) { return a->mean() < b->mean(); });
    const double best = order.front()->mean();
    for (int i = 0; i < top && i < static_cast<int>(order.size()); ++i) {
      const Point& p = *order[i];
      const double regret = seed_curves::regret_pct(p.mean(), best);
      s += fmt::format("| {} | {} | {:.4g} | {:+.2f} | {} | {} | {} |\n", i == 0 ? cell : "", i + 1, std::exp2(p.lr_log2),
                       p.lr_log2, p.hparams.empty() ? "-" : p.hparams,
                       std::isfinite(p.mean()) ? fmt::format("{:.4f}", p.mean()) : std::string("diverged"),
                       std::isfinite(regret) ? fmt::format("{:+.3f}%", regret) : std::string("n/a"));
    }
  }
  s += fmt::format("\n{}: {} points in {} cells\n", table.db, table.rows.size(), cells.size());
  return s;
}

}  // namespace scaleinv
