// Hyperparameter-transfer analysis (see transfer.h).
#include "report/transfer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/sqlite_db.h"

namespace scaleinv {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

// Axes that are the analysis' own coordinates; any other varying axis splits the data.
bool is_coordinate_axis(const std::string& k) {
  static const std::set<std::string> s = {"param", "param.name", "model.width", "model.depth", "lr_log2",
                                          "optim.lr", "seed", "train.seed", "data.seed"};
  return s.count(k) > 0;
}

int64_t lr_key(double lr_log2) { return std::llround(lr_log2 * 1e6); }

// seed -> (lr key -> loss, +inf when diverged), for one (param, scale).
using SeedTable = std::map<int64_t, std::map<int64_t, double>>;

// Mean over `seeds` per LR grid point (+inf when any of them diverged there).
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
    if (p.seeds == 0) continue;  // never run at this scale
    p.mean_loss = p.diverged > 0 ? kInf : s / p.seeds;
    out.push_back(p);
  }
  return out;
}

Optimum curve_optimum(const std::vector<LrPoint>& pts) {
  std::vector<double> x, y;
  for (const auto& p : pts) {
    x.push_back(p.lr_log2);
    y.push_back(p.mean_loss);
  }
  return locate_optimum(x, y);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(v.size() - 1, i + 1);
  return v[i] + (pos - static_cast<double>(i)) * (v[j] - v[i]);
}

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

std::string fmt_signed(double v) { return std::isfinite(v) ? fmt::format("{:+.2f}", v) : "n/a"; }

}  // namespace

std::string TransferGroup::title() const {
  std::string t = axis + " transfer";
  std::string extra = fixed;
  if (!context.empty()) extra += (extra.empty() ? "" : ", ") + context;
  if (!extra.empty()) t += " (" + extra + ")";
  return t;
}

std::string TransferGroup::slug() const {
  std::string s;
  for (char c : title()) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') s += c;
    else if (!s.empty() && s.back() != '_') s += '_';
  }
  while (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

SweepTable read_sweep_rows(const std::string& db_path) {
  if (!std::filesystem::exists(db_path))
    throw UserError(db_path, "--db", "no such database", "give the file written by scaleinv sweep (--out)");
  SweepTable t;
  t.db = db_path;
  std::vector<std::vector<SqlValue>> rows;
  try {
    SqliteDb db(db_path, SqliteDb::Mode::ReadOnly);  // a report never modifies its input
    db.check_integrity();
    if (!db.has_table("points"))
      throw UserError(db_path, "--db", "not a sweep database (no points table)", "give the file written by scaleinv sweep");
    auto name = db.query("SELECT value FROM meta WHERE key = 'name'");
    if (!name.empty()) t.name = sql_text(name[0][0], db_path, "meta.name");
    rows = db.query("SELECT id, param, width, depth, lr_log2, seed, final_loss, diverged, axes FROM points ORDER BY rowid");
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(db_path, "--db", std::string("cannot read the sweep database: ") + e.what(),
                    "give the file written by scaleinv sweep");
  }
  if (rows.empty())
    throw UserError(db_path, "--db", "the database holds no finished points",
                    "run the sweep first (scaleinv sweep --config ... --out " + db_path + ")");
  auto num = [](const SqlValue& v) {
    if (auto d = std::get_if<double>(&v)) return *d;
    if (auto i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    return kNaN;
  };
  for (const auto& r : rows) {
    SweepRow s;
    s.id = sql_text(r[0], db_path, "points.id");
    s.param = std::holds_alternative<std::string>(r[1]) ? std::get<std::string>(r[1]) : "?";
    s.width = static_cast<int64_t>(num(r[2]));
    s.depth = static_cast<int64_t>(num(r[3]));
    s.lr_log2 = num(r[4]);
    s.seed = static_cast<int64_t>(num(r[5]));
    s.final_loss = num(r[6]);
    s.diverged = num(r[7]) != 0;
    if (auto a = std::get_if<std::string>(&r[8])) {
      nlohmann::json axes = nlohmann::json::parse(*a, nullptr, false);
      if (axes.is_object()) {
        std::map<std::string, std::string> ctx;
        for (auto& [k, v] : axes.items())
          if (!is_coordinate_axis(k)) ctx[k] = v.is_string() ? v.get<std::string>() : v.dump();
        for (auto& [k, v] : ctx) s.context += (s.context.empty() ? "" : ", ") + k + "=" + v;
      }
    }
    t.rows.push_back(std::move(s));
  }
  return t;
}

Optimum locate_optimum(const std::vector<double>& x, const std::vector<double>& y) {
  Optimum o;
  o.lr_log2 = kNaN;
  o.loss = kNaN;
  const int n = static_cast<int>(y.size());
  for (int i = 0; i < n; ++i)
    if (std::isfinite(y[i]) && (o.best_index < 0 || y[i] < y[o.best_index])) o.best_index = i;
  if (o.best_index < 0) return o;
  const int b = o.best_index;
  o.lr_log2 = x[b];
  o.loss = y[b];
  if (b == 0 || b == n - 1) {
    o.at_edge = true;
    return o;
  }
  const double x1 = x[b - 1], x2 = x[b], x3 = x[b + 1], y1 = y[b - 1], y2 = y[b], y3 = y[b + 1];
  if (!std::isfinite(y1) || !std::isfinite(y3)) return o;  // a diverged neighbour: no parabola
  // The parabola through the three points (divided differences); its vertex, clamped to [x1, x3].
  const double d12 = (y2 - y1) / (x2 - x1), d23 = (y3 - y2) / (x3 - x2);
  const double a = (d23 - d12) / (x3 - x1);
  if (!(a > 0)) return o;  // flat: the grid point
  const double bcoef = d12 - a * (x1 + x2);
  const double v = std::clamp(-bcoef / (2 * a), x1, x3);
  o.lr_log2 = v;
  o.loss = y2 + d12 * (v - x2) + a * (v - x2) * (v - x1);
  o.fitted = true;
  return o;
}

TransferAnalysis analyze_transfer(const SweepTable& table, const TransferOptions& opts) {
  TransferAnalysis A;
  A.db = table.db;
  A.name = table.name;
  A.opts = opts;
  A.rows = static_cast<int64_t>(table.rows.size());
  for (const auto& r : table.rows) A.diverged_rows += r.diverged ? 1 : 0;

  for (const std::string axis : {"width", "depth"}) {
    auto scale_of = [&](const SweepRow& r) { return axis == "width" ? r.width : r.depth; };
    auto other_of = [&](const SweepRow& r) { return axis == "width" ? r.depth : r.width; };
    std::set<int64_t> scales;
    for (const auto& r : table.rows) scales.insert(scale_of(r));
    if (scales.size() < 2) continue;
    // Partition by (other axis, context); inside, by param -> scale -> seed -> lr.
    std::map<std::pair<int64_t, std::string>, std::map<std::string, std::map<int64_t, SeedTable>>> parts;
    for (const auto& r : table.rows) {
      const double loss = (r.diverged || !std::isfinite(r.final_loss)) ? kInf : r.final_loss;
      parts[{other_of(r), r.context}][r.param][scale_of(r)][r.seed][lr_key(r.lr_log2)] = loss;
    }
    for (const auto& [part_key, by_param] : parts) {
      TransferGroup g;
      g.axis = axis;
      g.fixed = fmt::format("{} {}", axis == "width" ? "depth" : "width", part_key.first);
      g.context = part_key.second;
      // The best grid-point loss per scale over every parameterization (for the regret).
      std::map<int64_t, std::pair<double, std::string>> best_at;
      std::vector<ParamTransfer> params;
      for (const auto& [param, by_scale] : by_param) {
        ParamTransfer pt;
        pt.param = param;
        for (const auto& [scale, seeds_tab] : by_scale) {
          std::vector<int64_t> seeds, lrs;
          std::set<int64_t> lrset;
          for (const auto& [seed, by_lr] : seeds_tab) {
            seeds.push_back(seed);
            for (const auto& [k, l] : by_lr) lrset.insert(k);
          }
          lrs.assign(lrset.begin(), lrset.end());
          ScaleCurve c;
          c.scale = scale;
          c.n_seeds = static_cast<int>(seeds.size());
          c.points = mean_curve(seeds_tab, seeds, lrs);
          c.opt = curve_optimum(c.points);
          c.lo = c.hi = kNaN;
          if (seeds.size() > 1 && opts.bootstrap > 0) {
            Rng rng{opts.rng_seed};
            std::vector<double> opts_found;
            for (int b = 0; b < opts.bootstrap; ++b) {
              std::vector<int64_t> draw;
              for (size_t i = 0; i < seeds.size(); ++i) draw.push_back(seeds[rng.next() % seeds.size()]);
              Optimum o = curve_optimum(mean_curve(seeds_tab, draw, lrs));
              if (std::isfinite(o.lr_log2)) opts_found.push_back(o.lr_log2);
            }
            c.lo = percentile(opts_found, opts.lo_q);
            c.hi = percentile(opts_found, opts.hi_q);
          }
          for (const auto& p : c.points) {
            auto& b = best_at[scale];
            if (std::isfinite(p.mean_loss) && (b.second.empty() || p.mean_loss < b.first)) b = {p.mean_loss, param};
          }
          pt.any_edge = pt.any_edge || c.opt.at_edge;
          pt.curves.push_back(std::move(c));
        }
        params.push_back(std::move(pt));
      }
      bool any_scaled = false;
      for (auto& pt : params) {
        pt.slope = pt.shift = pt.shared_lr_log2 = pt.transfer_lr_log2 = pt.transfer_loss = kNaN;
        pt.tuned_best_loss = pt.regret_pct = kNaN;
        if (pt.curves.size() < 2) {
          pt.verdict = fmt::format("only one {} ({}): no transfer to judge", axis, pt.curves.front().scale);
          continue;
        }
        any_scaled = true;
        const ScaleCurve& lo = pt.curves.front();
        const ScaleCurve& hi = pt.curves.back();
        // Drift: OLS of the optimum against log2 scale.
        std::vector<double> xs, ys;
        for (const auto& c : pt.curves)
          if (std::isfinite(c.opt.lr_log2)) {
            xs.push_back(std::log2(static_cast<double>(c.scale)));
            ys.push_back(c.opt.lr_log2);
          }
        if (xs.size() >= 2) {
          double mx = 0, my = 0;
          for (size_t i = 0; i < xs.size(); ++i) mx += xs[i], my += ys[i];
          mx /= xs.size();
          my /= ys.size();
          double sxy = 0, sxx = 0;
          for (size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
          pt.slope = sxx > 0 ? sxy / sxx : kNaN;
        }
        pt.shift = hi.opt.lr_log2 - lo.opt.lr_log2;
        pt.holds = std::isfinite(pt.shift) && std::fabs(pt.shift) <= opts.shift_tolerance;
        if (!std::isfinite(pt.shift)) {
          pt.verdict = fmt::format("transfer undetermined: every LR diverged at {} {}", axis,
                                   std::isfinite(lo.opt.lr_log2) ? hi.scale : lo.scale);
        } else {
          pt.verdict = fmt::format("transfer {}: optimum moved {} doublings from {} {} to {}", pt.holds ? "holds" : "fails",
                                   fmt_signed(pt.shift), axis, lo.scale, hi.scale);
          if (pt.any_edge) pt.verdict += " (an optimum is at the LR grid edge: the true shift may be larger)";
        }
        // Better with scale at the smallest scale's best grid point.
        if (lo.opt.best_index >= 0) {
          pt.shared_lr_log2 = lo.points[lo.opt.best_index].lr_log2;
          bool missing = false, better = true;
          double prev = kNaN;
          for (const auto& c : pt.curves) {
            double l = kNaN;
            for (const auto& p : c.points)
              if (lr_key(p.lr_log2) == lr_key(pt.shared_lr_log2)) l = p.mean_loss;
            pt.loss_at_shared.push_back(l);
            if (std::isnan(l)) missing = true;
            else if (!std::isnan(prev) && !(l <= prev + opts.better_tolerance * std::fabs(prev))) better = false;
            if (!std::isnan(l)) prev = l;
          }
          if (!missing) pt.better_with_scale = better;
        }
        // Regret at the largest scale.
        if (std::isfinite(lo.opt.lr_log2) && !hi.points.empty()) {
          const LrPoint* near = &hi.points.front();
          for (const auto& p : hi.points)
            if (std::fabs(p.lr_log2 - lo.opt.lr_log2) < std::fabs(near->lr_log2 - lo.opt.lr_log2) - 1e-9) near = &p;
          pt.transfer_lr_log2 = near->lr_log2;
          pt.transfer_loss = near->mean_loss;
          auto b = best_at.find(hi.scale);
          if (b != best_at.end() && !b->second.second.empty()) {
            pt.tuned_best_loss = b->second.first;
            pt.tuned_best_param = b->second.second;
            pt.regret_pct = std::isfinite(pt.transfer_loss)
                                ? 100.0 * (pt.transfer_loss - pt.tuned_best_loss) / std::fabs(pt.tuned_best_loss)
                                : kInf;
          }
        }
      }
      if (!any_scaled) continue;
      g.params = std::move(params);
      A.groups.push_back(std::move(g));
    }
  }
  return A;
}

nlohmann::json transfer_to_json(const TransferAnalysis& a) {
  auto num = [](double v) -> nlohmann::json {
    if (std::isnan(v)) return nullptr;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
  };
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : a.groups) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : g.params) {
      nlohmann::json curves = nlohmann::json::array();
      for (const auto& c : p.curves) {
        nlohmann::json pts = nlohmann::json::array();
        for (const auto& q : c.points)
          pts.push_back({{"lr_log2", q.lr_log2}, {"mean_loss", num(q.mean_loss)}, {"seeds", q.seeds}, {"diverged", q.diverged}});
        curves.push_back({{g.axis, c.scale},
                          {"seeds", c.n_seeds},
                          {"optimum_lr_log2", num(c.opt.lr_log2)},
                          {"optimum_loss", num(c.opt.loss)},
                          {"fitted", c.opt.fitted},
                          {"at_grid_edge", c.opt.at_edge},
                          {"interval_lr_log2", {num(c.lo), num(c.hi)}},
                          {"points", pts}});
      }
      nlohmann::json shared = nlohmann::json::array();
      for (double l : p.loss_at_shared) shared.push_back(num(l));
      params.push_back({{"param", p.param},
                        {"verdict", p.verdict},
                        {"transfer_holds", p.holds},
                        {"slope_doublings_per_doubling", num(p.slope)},
                        {"shift_doublings", num(p.shift)},
                        {"any_optimum_at_grid_edge", p.any_edge},
                        {"shared_lr_log2", num(p.shared_lr_log2)},
                        {"loss_at_shared_lr", shared},
                        {std::string(g.axis == "width" ? "wider" : "deeper") + "_is_better",
                         p.better_with_scale ? nlohmann::json(*p.better_with_scale) : nlohmann::json()},
                        {"regret",
                         {{"lr_log2_used", num(p.transfer_lr_log2)},
                          {"lr_choice", "LR grid point nearest the smallest scale's optimum"},
                          {"loss", num(p.transfer_loss)},
                          {"best_tuned_loss", num(p.tuned_best_loss)},
                          {"best_tuned_param", p.tuned_best_param},
                          {"percent", num(p.regret_pct)}}},
                        {"curves", curves}});
    }
    groups.push_back({{"title", g.title()}, {"axis", g.axis}, {"fixed", g.fixed}, {"context", g.context}, {"params", params}});
  }
  return {{"db", a.db},
          {"sweep", a.name},
          {"rows", a.rows},
          {"diverged_rows", a.diverged_rows},
          {"method",
           {{"mean_loss", "mean final_loss over seeds; a grid point where any seed diverged counts as +inf"},
            {"optimum", "parabola through the best grid point and its neighbours in log2 LR, vertex clamped to "
                        "their interval; the grid point itself at the edge (flagged)"},
            {"interval", fmt::format("bootstrap over seeds, {} resamples, {}-{}%", a.opts.bootstrap,
                                     a.opts.lo_q * 100, a.opts.hi_q * 100)},
            {"verdict", fmt::format("transfer holds when |shift| <= {} doubling", a.opts.shift_tolerance)}}},
          {"groups", groups}};
}

}  // namespace scaleinv
