// Seed-averaged loss curves and the seed bootstrap (see seed_curves.h).
#include "brain/report/seed_curves.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <ranges>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/nonfinite.h"

namespace scaleinv::seed_curves {

namespace {

// splitmix64: a fixed, platform-independent generator for the bootstrap.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};
}  // namespace

int64_t lr_key(double lr_log2) { return std::llround(lr_log2 * 1e6); }

std::vector<int64_t> lr_keys(const SeedTable& t) {
  std::set<int64_t> s;
  for (const auto& [seed, by_lr] : t)
    for (const auto& [k, l] : by_lr) s.insert(k);
  return std::vector<int64_t>(s.begin(), s.end());
}

std::vector<LrPoint> mean_curve(const SeedTable& t, const std::vector<int64_t>& seeds, const std::vector<int64_t>& lrs) {
  std::vector<LrPoint> out;
  for (int64_t k : lrs) {
    LrPoint p;
    p.lr_log2 = static_cast<double>(k) / 1e6;
    double s = 0;
    for (int64_t seed : seeds) {
      auto it = t.find(seed);
      if (it == t.end()) continue;
      auto jt = it->second.find(k);
      if (jt == it->second.end()) continue;
      ++p.seeds;
      if (!std::isfinite(jt->second)) ++p.diverged;
      else s += jt->second;
    }
    if (p.seeds == 0) continue;  // never run here
    p.mean_loss = p.diverged > 0 ? kInf : s / p.seeds;
    out.push_back(p);
  }
  return out;
}

const LrPoint* best_point(const std::vector<LrPoint>& pts) {
  const LrPoint* b = nullptr;
  for (const auto& p : pts)
    if (std::isfinite(p.mean_loss) && (!b || p.mean_loss < b->mean_loss)) b = &p;
  return b;
}

const LrPoint* nearest_point(const std::vector<LrPoint>& pts, double lr) {
  const LrPoint* n = nullptr;
  for (const auto& p : pts)
    if (!n || std::fabs(p.lr_log2 - lr) < std::fabs(n->lr_log2 - lr) - 1e-9) n = &p;
  return n;
}

double regret_pct(double loss, double best) {
  if (std::isnan(best) || std::isnan(loss)) return std::nan("");
  return std::isfinite(loss) ? 100.0 * (loss - best) / std::fabs(best) : kInf;
}

std::pair<double, int> worst_of(const std::vector<double>& v) {
  std::pair<double, int> w{std::nan(""), -1};
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(v[i]) && (w.second < 0 || v[i] > w.first)) w = {v[i], static_cast<int>(i)};
  return w;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(v.size() - 1, i + 1);
  return v[i] + (pos - static_cast<double>(i)) * (v[j] - v[i]);
}

std::vector<std::vector<int64_t>> seed_draws(const std::vector<int64_t>& all_seeds, int bootstrap, uint64_t rng_seed) {
  std::vector<std::vector<int64_t>> draws = {all_seeds};
  if (all_seeds.size() > 1) {
    Rng rng{rng_seed};
    for (int b = 0; b < bootstrap; ++b) {
      std::vector<int64_t> d;
      for (size_t i = 0; i < all_seeds.size(); ++i) d.push_back(all_seeds[rng.next() % all_seeds.size()]);
      draws.push_back(std::move(d));
    }
  }
  return draws;
}

std::set<int64_t> seeds_of(const SeedTable& t) {
  std::set<int64_t> s;
  for (const auto& [seed, by_lr] : t) s.insert(seed);
  return s;
}

std::set<int64_t> seeds_also_in(std::set<int64_t> from, const std::vector<const SeedTable*>& tables) {
  for (const SeedTable* t : tables)
    for (auto it = from.begin(); it != from.end();) it = t->count(*it) ? std::next(it) : from.erase(it);
  return from;
}

std::vector<int64_t> draw_within(const std::vector<int64_t>& draw, const std::set<int64_t>& keep) {
  std::vector<int64_t> out;
  for (int64_t seed : draw)
    if (keep.count(seed)) out.push_back(seed);
  return out;
}

bool is_number(const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0' && std::isfinite(x);
}

double row_loss(const SweepRow& r) { return (r.diverged || !std::isfinite(r.final_loss)) ? kInf : r.final_loss; }

double axis_value(const SweepRow& r, const std::string& axis) {
  if (axis == "width") return static_cast<double>(r.width);
  if (axis == "depth") return static_cast<double>(r.depth);
  return std::strtod(r.axes.at(axis).c_str(), nullptr);
}

std::string fixed_scales(const SweepRow& r, const std::string& axis) {
  std::string s;  // a scale of 0 (a user model's sweep that does not set it) is left out
  auto add = [&](const char* name, int64_t v) {
    if (v > 0) s += (s.empty() ? "" : ", ") + fmt::format("{} {}", name, v);
  };
  if (axis != "width") add("width", r.width);
  if (axis != "depth") add("depth", r.depth);
  return s;
}

std::string other_axes(const SweepRow& r, const std::string& axis) {
  auto others = r.axes | std::views::filter([&](const auto& kv) { return kv.first != axis; }) |
                std::views::transform([](const auto& kv) { return kv.first + "=" + kv.second; });
  return fmt::format("{}", fmt::join(others, ", "));
}

std::string held_text(const std::string& fixed, const std::string& context) {
  std::string extra = fixed;
  if (!context.empty()) extra += (extra.empty() ? "" : ", ") + context;
  return extra.empty() ? "" : " (" + extra + ")";
}

bool Part::operator<(const Part& o) const { return std::tie(fixed, context) < std::tie(o.fixed, o.context); }

std::vector<int64_t> seeds_of(const GroupData& data) {
  std::set<int64_t> s;
  for (const auto& [param, by_value] : data)
    for (const auto& [value, t] : by_value)
      for (const auto& [seed, by_lr] : t) s.insert(seed);
  return std::vector<int64_t>(s.begin(), s.end());
}

bool on_axis(const SweepRow& r, const std::string& axis) {
  return axis == "width" || axis == "depth" || r.axes.count(axis) > 0;
}

std::map<Part, PartRows> partition_rows(const SweepTable& table, const std::string& axis) {
  std::map<Part, PartRows> parts;
  for (const auto& r : table.rows) {
    if (!on_axis(r, axis)) continue;
    const Part key{fixed_scales(r, axis), other_axes(r, axis)};
    PartRows& part = parts[key];
    part.data[r.param][axis_value(r, axis)][r.seed][lr_key(r.lr_log2)] = row_loss(r);
    part.sample[r.param].emplace(axis_value(r, axis), &r);
  }
  return parts;
}

}  // namespace scaleinv::seed_curves
