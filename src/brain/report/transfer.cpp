// Hyperparameter-transfer analysis (see transfer.h).
#include "brain/util/json_number.h"
#include "brain/util/nonfinite.h"
#include "brain/util/ols.h"
#include "brain/report/transfer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/errors.h"
#include "brain/util/sqlite_db.h"
#include "brain/optim/optimizer_kinds.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

namespace {


// Axes that are the analysis' own coordinates; any other varying axis splits the data.
bool is_coordinate_axis(const std::string& k) {
  static const std::set<std::string> s = {"param", "param.name", "model.width", "model.depth", "lr_log2",
                                          "optim.lr", "seed", "train.seed", "data.seed"};
  return s.count(k) > 0;
}

// seed -> (lr key -> loss, +inf when diverged), for one (param, scale).
using seed_curves::SeedTable;
using seed_curves::on_axis;
using seed_curves::Part;
using seed_curves::PartRows;
using seed_curves::partition_rows;
using seed_curves::axis_value;
using seed_curves::best_point;
using seed_curves::lr_key;
using seed_curves::mean_curve;
using seed_curves::nearest_point;
using seed_curves::percentile;
using seed_curves::regret_pct;
using seed_curves::worst_of;

Optimum curve_optimum(const std::vector<LrPoint>& pts) {
  std::vector<double> x, y;
  for (const auto& p : pts) {
    x.push_back(p.lr_log2);
    y.push_back(p.mean_loss);
  }
  return locate_optimum(x, y);
}

// The first config field (a JSON pointer such as /train/steps) whose value differs between two
// resolved configs, with both values; "" when they agree or cannot be read.
std::string first_config_difference(const std::string& a, const std::string& b) {
  const nlohmann::json ja = nlohmann::json::parse(a, nullptr, false), jb = nlohmann::json::parse(b, nullptr, false);
  if (ja.is_discarded() || jb.is_discarded()) return "their configs differ";
  const nlohmann::json fa = ja.flatten(), fb = jb.flatten();
  for (const auto& [k, v] : fa.items()) {
    const auto it = fb.find(k);
    if (it == fb.end()) return fmt::format("first difference: {} is {} there, absent here", k, v.dump());
    if (*it != v) return fmt::format("first difference: {} is {} there, {} here", k, v.dump(), it->dump());
  }
  for (const auto& [k, v] : fb.items())
    if (!fa.contains(k)) return fmt::format("first difference: {} is absent there, {} here", k, v.dump());
  return "their configs differ";
}

std::string fmt_signed(double v) { return std::isfinite(v) ? fmt::format("{:+.2f}", v) : "n/a"; }

// How a fix names the sweep command that writes (or reruns) a store: its command line, or, for a
// caller from Python (an InputNames scope, brain/util/errors.h), scaleinv.sweep's keywords and the CLI
// command by name (a store the CLI wrote is rerun there).
std::string sweep_fix(const std::string& cli_args, const std::string& py_args) {
  if (input_caller() == "command line") return "scaleinv sweep " + cli_args;
  return fmt::format("scaleinv.sweep({}), or the scaleinv sweep command for a store it wrote", py_args);
}

// ---- Stores that belong together (read_sweep_rows of several files) -------------------------------
// A store's base: the config fields (JSON pointers) that hold one value at every one of its points,
// over all of them and per parameterization. Fields a grid sets (the coordinates, any grid axis)
// and where a run's files go are no part of it.
struct StoreBase {
  std::map<std::string, std::string> all;
  std::map<std::string, std::map<std::string, std::string>> by_param;
};

// Fields no comparison of two stores looks at: the coordinates every point carries, and where and
// how often a run writes (as run_altering_differences in brain/train/config.cpp leaves them out).
bool is_free_field(const std::string& ptr) {
  static const std::set<std::string> s = {
      "/model/width", "/model/depth", "/optim/lr", "/train/seed", "/data/seed", "/param/name", "/train/out_dir",
      "/train/log_every", "/train/eval_every", "/train/eval_batches", "/train/checkpoint_every",
      "/train/dist_timeout_s", "/train/cuda_graph"};
  return s.count(ptr) > 0;
}

// "hp.branch_mult" -> "/hp/branch_mult".
std::string pointer_of(const std::string& key) {
  std::string p = "/" + key;
  std::replace(p.begin(), p.end(), '.', '/');
  return p;
}

// The fields holding one value at every row of `rows` (dumped JSON), leaving out `skip`.
std::map<std::string, std::string> constant_fields(const std::vector<const SweepRow*>& rows,
                                                   const std::set<std::string>& skip) {
  std::map<std::string, std::string> out;
  std::set<std::string> varies;
  bool first = true;
  for (const SweepRow* r : rows) {
    const nlohmann::json cfg = nlohmann::json::parse(r->config, nullptr, false);
    if (!cfg.is_object()) continue;
    std::map<std::string, std::string> mine;
    const nlohmann::json flat = cfg.flatten();
    for (const auto& [k, v] : flat.items())
      if (!is_free_field(k) && !skip.count(k)) mine[k] = v.dump();
    if (first) {
      out = std::move(mine);
      first = false;
      continue;
    }
    for (auto it = out.begin(); it != out.end();) {
      const auto m = mine.find(it->first);
      it = (m == mine.end() || m->second != it->second) ? out.erase(it) : std::next(it);
    }
  }
  return out;
}

StoreBase store_base(const SweepTable& t, const std::set<std::string>& skip) {
  StoreBase b;
  std::vector<const SweepRow*> all;
  std::map<std::string, std::vector<const SweepRow*>> by_param;
  for (const auto& r : t.rows) all.push_back(&r), by_param[r.param].push_back(&r);
  b.all = constant_fields(all, skip);
  for (const auto& [p, rows] : by_param) b.by_param[p] = constant_fields(rows, skip);
  return b;
}

// The first field both bases fix to different values ("" when none); `scoped` false leaves out the
// fields a parameterization may set for itself (its table, its tuned multipliers).
std::string first_base_difference(const std::map<std::string, std::string>& there,
                                  const std::map<std::string, std::string>& here, bool scoped) {
  for (const auto& [k, v] : there) {
    if (!scoped && (k.rfind("/hp/", 0) == 0 || k.rfind("/param/", 0) == 0)) continue;
    const auto it = here.find(k);
    if (it != here.end() && it->second != v) return fmt::format("{} is {} there, {} here", k, v, it->second);
  }
  return "";
}

// UserError unless `b` belongs with `a`: every config field that each store holds at one value
// (over all its points, and over each parameterization both stores hold) has the same value in
// both, the grid's axes aside. Two sweeps of other configs would otherwise be fitted as one law
// (widths 32..256 of one and 512..1024 of the other, say) without any point in common.
void check_same_base(const SweepTable& a, const SweepTable& b) {
  std::set<std::string> skip;
  for (const SweepTable* t : {&a, &b})
    for (const auto& r : t->rows)
      for (const auto& [k, v] : r.axes) skip.insert(pointer_of(k));
  const StoreBase ba = store_base(a, skip), bb = store_base(b, skip);
  std::string diff = first_base_difference(ba.all, bb.all, false), scope = "";
  for (const auto& [param, fields] : ba.by_param) {
    if (!diff.empty()) break;
    if (const auto it = bb.by_param.find(param); it != bb.by_param.end()) {
      diff = first_base_difference(fields, it->second, true);
      scope = " " + param;
    }
  }
  if (diff.empty()) return;
  throw UserError(b.db, "--db",
                  fmt::format("is another sweep than {}: every{} point of each holds one value and they differ ({}); "
                              "read as one, their points would be fitted as one law",
                              a.db, scope, diff),
                  "read each store on its own, or run both from the same base config (only the grid's axes may differ)");
}

}  // namespace

std::string TransferGroup::title() const {
  return (info.scale ? axis + " transfer" : info.label) + seed_curves::held_text(fixed, context);
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
  if (db_path.empty())
    throw UserError("command line", "--db", "an empty path", "give the file written by " + sweep_fix("--out", "db=..."));
  if (!std::filesystem::exists(db_path))
    throw UserError(db_path, "--db", "no such database", "give the file written by " + sweep_fix("--out", "db=..."));
  SweepTable t;
  t.db = db_path;
  std::vector<std::vector<SqlValue>> rows;
  bool imported = false;  // a store of results imported from elsewhere (brain/sweep/import_results.h)
  try {
    SqliteDb db(db_path, SqliteDb::Mode::ReadOnly);  // a report never modifies its input
    db.check_integrity();
    if (!db.has_table("points"))
      throw UserError(db_path, "--db", "not a sweep database (no points table)", "give the file written by scaleinv sweep");
    auto name = db.query("SELECT value FROM meta WHERE key = 'name'");
    if (!name.empty()) t.name = sql_text(name[0][0], db_path, "meta.name");
    imported = !db.query("SELECT 1 FROM meta WHERE key = 'imported'").empty();
    // The axes an imported store declares hyperparameters (meta.hparams, a JSON list): a joint law
    // re-tunes them in every cell (brain/report/joint_law.h).
    if (auto h = db.query("SELECT value FROM meta WHERE key = 'hparams'"); imported && !h.empty()) {
      const nlohmann::json list = nlohmann::json::parse(sql_text(h[0][0], db_path, "meta.hparams"), nullptr, false);
      if (list.is_array())
        for (const auto& k : list)
          if (k.is_string()) t.hparam_axes.insert(k.get<std::string>());
    }
    rows = db.query(
        "SELECT id, param, width, depth, lr_log2, seed, final_loss, diverged, axes, config FROM points ORDER BY rowid");
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(db_path, "--db", std::string("cannot read the sweep database: ") + e.what(),
                    "give the file written by scaleinv sweep");
  }
  if (rows.empty())
    throw UserError(db_path, "--db", "the database holds no finished points",
                    "run the sweep first (" + sweep_fix("--config ... --out " + db_path, "..., db='" + db_path + "'") + ")");
  auto num = [](const SqlValue& v) {
    if (auto d = std::get_if<double>(&v)) return *d;
    if (auto i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    return kNaN;
  };
  for (const auto& r : rows) {
    SweepRow s;
    s.id = sql_text(r[0], db_path, "points.id");
    s.param = std::holds_alternative<std::string>(r[1]) ? std::get<std::string>(r[1]) : "?";
    // No fit can use a width that is not a positive whole number, or a log2 LR that is missing or
    // not finite (a NULL became a predicted log2 LR of -4.6e12; 1e30 read back as -9.2e18). An
    // imported store holds width 0 where the results have no width (their scales are axes, N and
    // D say): no width axis, as a Python sweep's depth 0 (seed_curves' titles leave out a scale of 0).
    const double width = num(r[2]), lr_log2 = num(r[4]);
    if (!(imported && width == 0) && !(width >= 1 && width <= 9.007199254740992e15 && width == std::floor(width)))
      throw UserError(db_path, "points.width",
                      fmt::format("point '{}' has width {}, not a whole number from 1 to 2^53", s.id,
                                  std::isfinite(width) ? fmt::format("{:g}", width) : std::string("NULL or not finite")),
                      fmt::format("delete the point (DELETE FROM points WHERE id = '{}'), then rerun it with {}", s.id,
                                  sweep_fix("--resume", "..., resume=True")));
    if (!std::isfinite(lr_log2))
      throw UserError(db_path, "points.lr_log2",
                      fmt::format("point '{}' has no finite log2 LR (NULL or not finite)", s.id),
                      fmt::format("delete the point (DELETE FROM points WHERE id = '{}'), then rerun it with {}", s.id,
                                  sweep_fix("--resume", "..., resume=True")));
    s.width = static_cast<int64_t>(width);
    s.depth = static_cast<int64_t>(num(r[3]));
    s.lr_log2 = lr_log2;
    s.seed = static_cast<int64_t>(num(r[5]));
    s.final_loss = num(r[6]);
    s.diverged = num(r[7]) != 0;
    if (auto a = std::get_if<std::string>(&r[8])) {
      nlohmann::json axes = nlohmann::json::parse(*a, nullptr, false);
      if (axes.is_object())
        for (auto& [k, v] : axes.items())
          if (!is_coordinate_axis(k)) s.axes[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    if (auto c = std::get_if<std::string>(&r[9])) {  // the resolved config: the run's length and decay
      s.config = *c;
      nlohmann::json cfg = nlohmann::json::parse(*c, nullptr, false);
      if (cfg.is_object()) {
        const nlohmann::json train = cfg.value("train", nlohmann::json::object());
        const nlohmann::json optim = cfg.value("optim", nlohmann::json::object());
        if (train.is_object() && train.contains("steps") && train["steps"].is_number())
          s.steps = train["steps"].get<int64_t>();
        if (optim.is_object() && optim.contains("weight_decay") && optim["weight_decay"].is_number())
          s.weight_decay = optim["weight_decay"].get<double>();
        if (optim.is_object() && optim.value("wd_mode", std::string()) == "independent") s.wd_independent = true;
        if (optim.is_object()) {  // decoupled decay (a timescale); adam and sgd add wd p to the gradient (L2)
          const OptimizerKind* kind = find_optimizer_kind(optim.value("kind", std::string()));
          s.wd_decoupled = kind && kind->decay == DecayMode::Decoupled;
        }
      }
    }
    if (s.axes.count("search.trial"))
      throw UserError(db_path, "--db", "holds a hyperparameter search (its points carry search.trial), not a grid",
                      input_caller() == "command line"
                          ? "rank it with scaleinv sweep rank --config SEARCH.toml --db " + db_path
                          : "rank it with scaleinv.search's result (.ranking), or the scaleinv sweep rank command for "
                            "a store it wrote");
    t.rows.push_back(std::move(s));
  }
  return t;
}

SweepTable read_sweep_rows(const std::vector<std::string>& db_paths) {
  if (db_paths.empty())
    throw UserError("command line", "--db", "no database given", "give one or more files written by scaleinv sweep");
  SweepTable all;
  std::set<std::string> ids;
  // Where each point sits (param, width, depth, LR, seed and the other grid axes) and which file and
  // config put it there: two stores read as one may add points (more seeds, more widths), but a
  // point at the same coordinates with another config means two different sweeps, whose rows would
  // silently stand in for each other.
  std::map<std::string, std::pair<std::string, const SweepRow*>> at;
  std::vector<SweepTable> tables;
  for (const std::string& path : db_paths) tables.push_back(read_sweep_rows(path));
  for (size_t j = 1; j < tables.size(); ++j)
    for (size_t i = 0; i < j; ++i) check_same_base(tables[i], tables[j]);
  for (const SweepTable& t : tables) {
    all.db += (all.db.empty() ? "" : " + ") + t.db;
    if (all.name.find(t.name) == std::string::npos) all.name += (all.name.empty() ? "" : " + ") + t.name;
    all.hparam_axes.insert(t.hparam_axes.begin(), t.hparam_axes.end());
    for (const auto& r : t.rows) {
      if (!ids.insert(r.id).second) {
        ++all.duplicates;
        continue;
      }
      nlohmann::json axes(r.axes);
      const std::string key = fmt::format("{}|{}|{}|{}|{}|{}", r.param, r.width, r.depth, lr_key(r.lr_log2), r.seed, axes.dump());
      const auto [it, fresh] = at.emplace(key, std::make_pair(t.db, &r));
      if (!fresh)
        throw UserError(t.db, "--db",
                        fmt::format("a point at {} {} width {} depth {} log2 LR {:g} seed {} has another config in {}: "
                                    "the two are different sweeps ({})",
                                    r.param, r.axes.empty() ? "" : axes.dump(), r.width, r.depth, r.lr_log2, r.seed,
                                    it->second.first, first_config_difference(it->second.second->config, r.config)),
                        "read each sweep on its own, or run both from the same base config");
      all.rows.push_back(r);
    }
  }
  return all;
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

namespace {

// The analysis axes: a new axis with a reference rule is a new row (transfer.h).
const std::vector<AxisInfo>& axis_table() {
  static const std::vector<AxisInfo> t = {
      {"width", "width", true, "", kNaN},
      {"depth", "depth", true, "", kNaN},
      {"train.batch_size", "batch size", false,
       "square-root rule for Adam [sqrt-rule] +0.50 (linear rule for SGD +1); the surge [surge]: rises, then falls "
       "past the noise scale",
       0.5},
      {"train.steps", "training steps", false, "Bjorck et al. [horizon]: LR* ~ D^-beta, beta > 0 (a negative exponent)",
       kNaN},
      {"optim.weight_decay", "weight decay", false,
       "a fixed AdamW timescale tau = 1/(lr wd) [wd-tau]: LR* ~ 1/wd, -1.00", -1.0},
      {"optim.warmup_steps", "warmup steps", false, "", kNaN},
  };
  return t;
}

using seed_curves::GroupData;

// What one seed draw gives for one parameterization: the curve per axis value.
struct DrawFit {
  std::vector<std::vector<LrPoint>> points;  // per value, as in the group's value order
  std::vector<Optimum> opt;
};

DrawFit fit_draw(const std::map<double, SeedTable>& by_value, const std::vector<int64_t>& draw) {
  DrawFit f;
  for (const auto& [value, seeds_tab] : by_value) {
    f.points.push_back(mean_curve(seeds_tab, draw, seed_curves::lr_keys(seeds_tab)));
    f.opt.push_back(curve_optimum(f.points.back()));
  }
  return f;
}

// OLS slope of the located optima against log2 of the positive axis values.
double optimum_slope(const std::vector<double>& values, const std::vector<Optimum>& opt) {
  std::vector<double> xs, ys;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] > 0 && std::isfinite(opt[i].lr_log2)) {
      xs.push_back(std::log2(values[i]));
      ys.push_back(opt[i].lr_log2);
    }
  if (xs.size() < 2) return kNaN;
  return ols_fit(xs, ys).slope;  // NaN with fewer than 2 distinct values
}

// Per value: the regret of the base LR against the parameterization re-tuned and against standard
// re-tuned (`standard`: its fit under the same draw, or nullptr).
std::vector<ScaleRegret> regrets_of(const std::vector<double>& values, const DrawFit& f, const DrawFit* standard) {
  std::vector<ScaleRegret> out;
  const LrPoint* base = f.points.empty() ? nullptr : best_point(f.points.front());
  for (size_t i = 0; i < values.size(); ++i) {
    ScaleRegret r;
    r.scale = values[i];
    r.lr_log2_used = r.loss = r.self_best = r.standard_best = r.vs_self = r.vs_standard = kNaN;
    r.vs_self_lo = r.vs_self_hi = r.vs_standard_lo = r.vs_standard_hi = kNaN;
    const LrPoint* used = base ? nearest_point(f.points[i], base->lr_log2) : nullptr;
    if (used) {
      r.lr_log2_used = used->lr_log2;
      r.loss = used->mean_loss;
    }
    if (const LrPoint* b = best_point(f.points[i])) r.self_best = b->mean_loss;
    if (standard && i < standard->points.size())
      if (const LrPoint* b = best_point(standard->points[i])) r.standard_best = b->mean_loss;
    r.vs_self = regret_pct(r.loss, r.self_best);
    r.vs_standard = regret_pct(r.loss, r.standard_best);
    out.push_back(r);
  }
  return out;
}

std::string value_text(double v) { return fmt::format("{:g}", v); }

// Hyperparameter axes: the shape of the optimum over the axis. A peak inside the range whose
// interval lies above both ends' is the surge; otherwise the exponent's interval decides.
std::string optimum_shape(const ParamTransfer& pt) {
  const auto& c = pt.curves;
  int k = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (std::isfinite(c[i].opt.lr_log2) && (k < 0 || c[i].opt.lr_log2 > c[static_cast<size_t>(k)].opt.lr_log2))
      k = static_cast<int>(i);
  if (k < 0) return "undetermined";
  const auto& peak = c[static_cast<size_t>(k)];
  if (k > 0 && k + 1 < static_cast<int>(c.size()) && peak.lo > c.front().hi && peak.lo > c.back().hi)
    return fmt::format("rises, then falls: peaks at {} (the surge shape)", value_text(peak.scale));
  if (std::isnan(pt.slope)) return "undetermined";
  if (std::isnan(pt.slope_lo))  // one seed: no interval, the sign alone
    return pt.slope > 0 ? "rises (one seed: no interval)" : pt.slope < 0 ? "falls (one seed: no interval)" : "flat";
  if (pt.slope_lo > 0) return "rises";
  if (pt.slope_hi < 0) return "falls";
  return "flat within its interval";
}

}  // namespace

AxisInfo axis_info(const std::string& key) {
  for (const AxisInfo& a : axis_table())
    if (a.key == key) return a;
  return {key, key, false, "", kNaN};
}

namespace {

// The analysis axes present: width and depth, then every numeric grid axis with two values or
// more (the table's rows first, in its order).
std::vector<std::string> analysis_axes_of(const SweepTable& table) {
  std::vector<std::string> axes = {"width", "depth"};
  std::map<std::string, std::set<double>> numeric;
  std::set<std::string> non_numeric;
  for (const auto& r : table.rows)
    for (const auto& [k, v] : r.axes) {
      if (!seed_curves::is_number(v)) non_numeric.insert(k);
      else numeric[k].insert(std::strtod(v.c_str(), nullptr));
    }
  for (const AxisInfo& a : axis_table())
    if (!a.scale && numeric.count(a.key) && !non_numeric.count(a.key)) axes.push_back(a.key);
  for (const auto& [k, vals] : numeric)
    if (!non_numeric.count(k) && std::find(axes.begin(), axes.end(), k) == axes.end()) axes.push_back(k);
  return axes;
}

// How many distinct values of `axis` the table holds.
size_t distinct_values(const SweepTable& table, const std::string& axis) {
  std::set<double> values;
  for (const auto& r : table.rows)
    if (on_axis(r, axis)) values.insert(axis_value(r, axis));
  return values.size();
}

// Per param: per draw, its fit (draw 0: the point estimate).
using GroupFits = std::map<std::string, std::vector<DrawFit>>;

GroupFits fit_draws(const GroupData& data, const std::vector<std::vector<int64_t>>& draws) {
  GroupFits fits;
  for (const auto& [param, by_value] : data)
    for (const auto& d : draws) fits[param].push_back(fit_draw(by_value, d));
  return fits;
}

// The standard baseline needs the same values: its index for each of this param's values
// (-1 where standard lacks it), the same for every draw.
std::vector<int> standard_index(const std::vector<double>& vals, const std::map<double, SeedTable>& standard) {
  std::vector<int> std_index;
  std::vector<double> svals;
  for (const auto& [value, t] : standard) svals.push_back(value);
  for (double v : vals) {
    const auto it = std::find(svals.begin(), svals.end(), v);
    std_index.push_back(it == svals.end() ? -1 : static_cast<int>(it - svals.begin()));
  }
  return std_index;
}

// Standard's fit under draw `di`, at this param's values (empty where standard lacks one);
// nullopt when the group has no standard (`st` null).
std::optional<DrawFit> aligned_standard(const std::vector<DrawFit>* st, const std::vector<int>& std_index, size_t di) {
  if (!st) return std::nullopt;
  DrawFit aligned;
  for (const int si : std_index) {
    if (si < 0) {
      aligned.points.emplace_back();
      aligned.opt.emplace_back();
    } else {
      aligned.points.push_back((*st)[di].points[static_cast<size_t>(si)]);
      aligned.opt.push_back((*st)[di].opt[static_cast<size_t>(si)]);
    }
  }
  return aligned;
}

// One param over the draws: the regrets of the point estimate (draw 0) and, over the
// resamples, the statistics whose percentiles are the intervals.
struct ParamDraws {
  std::vector<ScaleRegret> point_regrets;
  std::vector<std::vector<double>> opt, vs_self, vs_standard;  // per value
  std::vector<double> slope, worst_self, worst_standard;
};

ParamDraws collect_draws(const std::vector<double>& vals, const std::vector<DrawFit>& fs,
                         const std::vector<DrawFit>* st, const std::vector<int>& std_index) {
  ParamDraws b;
  b.opt.resize(vals.size());
  b.vs_self.resize(vals.size());
  b.vs_standard.resize(vals.size());
  for (size_t di = 0; di < fs.size(); ++di) {
    const auto sf = aligned_standard(st, std_index, di);
    std::vector<ScaleRegret> rg = regrets_of(vals, fs[di], sf ? &*sf : nullptr);
    if (di == 0) {
      b.point_regrets = rg;
      continue;
    }
    for (size_t i = 0; i < vals.size(); ++i) {
      if (std::isfinite(fs[di].opt[i].lr_log2)) b.opt[i].push_back(fs[di].opt[i].lr_log2);
      if (!std::isnan(rg[i].vs_self)) b.vs_self[i].push_back(rg[i].vs_self);
      if (!std::isnan(rg[i].vs_standard)) b.vs_standard[i].push_back(rg[i].vs_standard);
    }
    const double sl = optimum_slope(vals, fs[di].opt);
    if (std::isfinite(sl)) b.slope.push_back(sl);
    std::vector<double> vs, vd;
    for (const auto& r : rg) vs.push_back(r.vs_self), vd.push_back(r.vs_standard);
    if (const auto w = worst_of(vs); w.second >= 0) b.worst_self.push_back(w.first);
    if (const auto w = worst_of(vd); w.second >= 0) b.worst_standard.push_back(w.first);
  }
  return b;
}

// A bootstrap percentile; NaN without resamples (one seed).
struct BootQuantile {
  bool boot;
  double operator()(const std::vector<double>& v, double p) const { return boot ? percentile(v, p) : kNaN; }
};

// The AdamW timescale at the curve's optimum, from one of its rows (`any`); needs c.steps.
void set_wd_timescale(ScaleCurve& c, const SweepRow& any) {
  c.tau_steps = c.tau_fraction = kNaN;
  if (any.weight_decay > 0 && any.wd_decoupled && std::isfinite(c.opt.lr_log2)) {
    c.tau_steps = any.wd_independent ? 1.0 / any.weight_decay : 1.0 / (std::exp2(c.opt.lr_log2) * any.weight_decay);
    if (c.steps > 0) c.tau_fraction = c.tau_steps / static_cast<double>(c.steps);
  }
}

// Per value: the point estimate's curve and optimum with its interval, and its regrets with theirs.
void add_curves(ParamTransfer& pt, const std::vector<double>& vals, const DrawFit& point,
                const std::map<double, SeedTable>& by_value, const std::map<double, const SweepRow*>& rows,
                const ParamDraws& b, const BootQuantile& q, const TransferOptions& opts) {
  for (size_t i = 0; i < vals.size(); ++i) {
    ScaleCurve c;
    c.scale = vals[i];
    c.points = point.points[i];
    c.opt = point.opt[i];
    c.n_seeds = static_cast<int>(by_value.at(vals[i]).size());
    c.lo = q(b.opt[i], opts.lo_q);
    c.hi = q(b.opt[i], opts.hi_q);
    const SweepRow* any = rows.at(vals[i]);
    c.steps = any->steps;
    set_wd_timescale(c, *any);
    pt.any_edge = pt.any_edge || c.opt.at_edge;
    ScaleRegret r = b.point_regrets[i];
    r.vs_self_lo = q(b.vs_self[i], opts.lo_q);
    r.vs_self_hi = q(b.vs_self[i], opts.hi_q);
    r.vs_standard_lo = q(b.vs_standard[i], opts.lo_q);
    r.vs_standard_hi = q(b.vs_standard[i], opts.hi_q);
    pt.curves.push_back(std::move(c));
    pt.regrets.push_back(r);
  }
}

// The worst regrets over the values (pt.regrets), where, and their intervals.
void set_worst_regrets(ParamTransfer& pt, const std::vector<double>& vals, const ParamDraws& b,
                       const BootQuantile& q, const TransferOptions& opts) {
  std::vector<double> vs, vd;
  for (const auto& r : pt.regrets) vs.push_back(r.vs_self), vd.push_back(r.vs_standard);
  const auto ws = worst_of(vs), wd = worst_of(vd);
  pt.worst_vs_self = ws.first;
  pt.worst_vs_self_at = ws.second >= 0 ? vals[static_cast<size_t>(ws.second)] : kNaN;
  pt.worst_vs_standard = wd.first;
  pt.worst_vs_standard_at = wd.second >= 0 ? vals[static_cast<size_t>(wd.second)] : kNaN;
  pt.worst_vs_self_lo = q(b.worst_self, opts.lo_q);
  pt.worst_vs_self_hi = q(b.worst_self, opts.hi_q);
  pt.worst_vs_standard_lo = q(b.worst_standard, opts.lo_q);
  pt.worst_vs_standard_hi = q(b.worst_standard, opts.hi_q);
}

// The shift from the smallest value to the largest, whether transfer holds, the verdict and
// (hyperparameter axes) the optimum's shape; two curves or more.
void judge_shift(ParamTransfer& pt, const AxisInfo& info, const std::string& axis, const TransferOptions& opts) {
  const ScaleCurve& lo = pt.curves.front();
  const ScaleCurve& hi = pt.curves.back();
  pt.shift = hi.opt.lr_log2 - lo.opt.lr_log2;
  // Transfer must hold at every scale, not only at the largest: the largest deviation of any
  // scale's optimum from the smallest scale's (+inf where every LR diverged at some scale).
  pt.max_deviation = 0;
  pt.max_deviation_at = lo.scale;
  for (const ScaleCurve& c : pt.curves) {
    const double dev = std::isfinite(c.opt.lr_log2) ? std::fabs(c.opt.lr_log2 - lo.opt.lr_log2) : kInf;
    if (dev > pt.max_deviation) {
      pt.max_deviation = dev;
      pt.max_deviation_at = c.scale;
    }
  }
  pt.holds = std::isfinite(pt.shift) && pt.max_deviation <= opts.shift_tolerance;
  const bool inner = std::isfinite(pt.shift) && std::fabs(pt.shift) <= opts.shift_tolerance && !pt.holds;
  if (!std::isfinite(pt.shift)) {
    pt.verdict = fmt::format("{} undetermined: every LR diverged at {} {}", info.scale ? "transfer" : "optimum",
                             info.label, value_text(std::isfinite(lo.opt.lr_log2) ? hi.scale : lo.scale));
  } else if (info.scale && inner && !std::isfinite(pt.max_deviation)) {
    pt.verdict = fmt::format("transfer fails: every LR diverged at {} {} (optimum moved {} doublings from {} {} to {})",
                             axis, value_text(pt.max_deviation_at), fmt_signed(pt.shift), axis, value_text(lo.scale),
                             value_text(hi.scale));
  } else if (info.scale && inner) {
    pt.verdict = fmt::format("transfer fails: optimum moved {} doublings from {} {} to {}, but {:.2f} at {}",
                             fmt_signed(pt.shift), axis, value_text(lo.scale), value_text(hi.scale),
                             pt.max_deviation, value_text(pt.max_deviation_at));
  } else if (info.scale) {
    pt.verdict = fmt::format("transfer {}: optimum moved {} doublings from {} {} to {}", pt.holds ? "holds" : "fails",
                             fmt_signed(pt.shift), axis, value_text(lo.scale), value_text(hi.scale));
  } else {
    pt.verdict = fmt::format("optimal LR moves {} doublings per doubling of {} ({} to {})", fmt_signed(pt.slope),
                             info.label, value_text(lo.scale), value_text(hi.scale));
  }
  if (pt.any_edge && std::isfinite(pt.shift))
    pt.verdict += " (an optimum is at the LR grid edge: the true shift may be larger)";
  pt.shape = info.scale ? "" : optimum_shape(pt);
}

// Better with scale at the base LR.
// (The base LR: the smallest scale's best grid point, best_point as in regrets_of.)
void judge_base_lr(ParamTransfer& pt, const TransferOptions& opts) {
  if (const LrPoint* base = best_point(pt.curves.front().points)) {
    pt.shared_lr_log2 = base->lr_log2;
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
}

// One param of group `g`: its curves with intervals, drift, regrets and verdict.
ParamTransfer analyze_param(const TransferGroup& g, const PartRows& part, const GroupFits& fits,
                            const std::vector<std::vector<int64_t>>& draws, const std::string& param,
                            const std::map<double, SeedTable>& by_value, const TransferOptions& opts) {
  ParamTransfer pt;
  pt.param = param;
  std::vector<double> vals;
  for (const auto& [value, seeds_tab] : by_value) vals.push_back(value);
  const std::vector<DrawFit>& fs = fits.at(param);
  const std::vector<DrawFit>* st = fits.count("standard") > 0 ? &fits.at("standard") : nullptr;
  const std::vector<int> std_index = st ? standard_index(vals, part.data.at("standard")) : std::vector<int>();
  // Paired seeds: where standard ran seeds this param did not (two databases, one with more
  // seeds), standard is re-fitted on this param's seeds at each value, so that a regret compares
  // the same seeds' networks (equal networks, e.g. every param at the base scale, give 0).
  std::vector<DrawFit> paired;
  if (st && param != "standard") {
    std::map<double, SeedTable> restricted = part.data.at("standard");
    bool changed = false;
    for (auto& [value, seeds_tab] : restricted) {
      const auto own = by_value.find(value);
      if (own == by_value.end()) continue;
      for (auto it = seeds_tab.begin(); it != seeds_tab.end();)
        if (own->second.count(it->first) == 0) it = seeds_tab.erase(it), changed = true;
        else ++it;
    }
    if (changed) {
      for (const auto& d : draws) paired.push_back(fit_draw(restricted, d));
      st = &paired;
    }
  }
  const ParamDraws b = collect_draws(vals, fs, st, std_index);
  const BootQuantile q{fs.size() > 1};
  add_curves(pt, vals, fs[0], by_value, part.sample.at(param), b, q, opts);
  pt.slope = optimum_slope(vals, fs[0].opt);
  pt.slope_lo = q(b.slope, opts.lo_q);
  pt.slope_hi = q(b.slope, opts.hi_q);
  set_worst_regrets(pt, vals, b, q, opts);
  pt.shift = pt.shared_lr_log2 = kNaN;
  if (pt.curves.size() < 2) {
    pt.verdict = fmt::format("only one {} ({}): no transfer to judge", g.info.label, value_text(pt.curves.front().scale));
    pt.shape = "undetermined";
    return pt;
  }
  judge_shift(pt, g.info, g.axis, opts);
  judge_base_lr(pt, opts);
  return pt;
}

// One group, an axis with what `key` holds fixed; nullopt when no param has two values there.
std::optional<TransferGroup> analyze_group(const std::string& axis, const AxisInfo& info, const Part& key,
                                           const PartRows& part, const TransferOptions& opts) {
  TransferGroup g;
  g.axis = axis;
  g.info = info;
  g.fixed = key.fixed;
  g.context = key.context;
  const auto draws = seed_curves::seed_draws(seed_curves::seeds_of(part.data), opts.bootstrap, opts.rng_seed);
  const GroupFits fits = fit_draws(part.data, draws);
  bool any_scaled = false;
  for (const auto& [param, by_value] : part.data) {
    g.params.push_back(analyze_param(g, part, fits, draws, param, by_value, opts));
    any_scaled = any_scaled || g.params.back().curves.size() >= 2;
  }
  if (!any_scaled) return std::nullopt;
  return g;
}

}  // namespace

std::vector<std::string> analysis_axes(const SweepTable& table) { return analysis_axes_of(table); }

void check_bootstrap(int64_t n, const std::string& where, const std::string& field, const std::string& example) {
  if (n < 0 || n > kMaxBootstrap)
    throw UserError(where, field, fmt::format("{} resamples: must be from 0 to {}", n, kMaxBootstrap),
                    fmt::format("e.g. {} (the default; 2000 for tighter intervals)", example));
}

TransferAnalysis analyze_transfer(const SweepTable& table, const TransferOptions& opts) {
  TransferAnalysis A;
  A.db = table.db;
  A.name = table.name;
  A.opts = opts;
  A.rows = static_cast<int64_t>(table.rows.size());
  for (const auto& r : table.rows) A.diverged_rows += r.diverged ? 1 : 0;
  for (const std::string& axis : analysis_axes(table)) {
    const AxisInfo info = axis_info(axis);
    if (distinct_values(table, axis) < 2) continue;
    for (const auto& [key, part] : partition_rows(table, axis))
      if (auto g = analyze_group(axis, info, key, part, opts)) A.groups.push_back(std::move(*g));
  }
  A.choices = analyze_choices(table, opts);
  A.full_baseline = analyze_full_baseline(table, opts);
  return A;
}

namespace {

// A non-finite number is written as null: a diverged point's mean loss ("diverged" counts its seeds).
nlohmann::json json_num(double v) { return json_number(v); }

// The regret of one curve's scale at the smallest value's best LR.
nlohmann::json regret_json(const ScaleRegret& r) {
  return {{"lr_log2_used", json_num(r.lr_log2_used)},
          {"loss", json_num(r.loss)},
          {"self_best_loss", json_num(r.self_best)},
          {"standard_best_loss", json_num(r.standard_best)},
          {"vs_self_percent", json_num(r.vs_self)},
          {"vs_self_interval", {json_num(r.vs_self_lo), json_num(r.vs_self_hi)}},
          {"vs_standard_percent", json_num(r.vs_standard)},
          {"vs_standard_interval", {json_num(r.vs_standard_lo), json_num(r.vs_standard_hi)}}};
}

// One scale's LR curve (its value keyed by the group's axis), its optimum and its regret.
nlohmann::json curve_json(const std::string& axis, const ScaleCurve& c, const ScaleRegret& r) {
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& q : c.points)
    pts.push_back({{"lr_log2", q.lr_log2}, {"mean_loss", json_num(q.mean_loss)}, {"seeds", q.seeds}, {"diverged", q.diverged}});
  return {{axis, c.scale},
          {"seeds", c.n_seeds},
          {"steps", c.steps},
          {"optimum_lr_log2", json_num(c.opt.lr_log2)},
          {"optimum_loss", json_num(c.opt.loss)},
          {"fitted", c.opt.fitted},
          {"at_grid_edge", c.opt.at_edge},
          {"interval_lr_log2", {json_num(c.lo), json_num(c.hi)}},
          {"wd_timescale_steps", json_num(c.tau_steps)},
          {"wd_timescale_fraction_of_run", json_num(c.tau_fraction)},
          {"regret", regret_json(r)},
          {"points", pts}};
}

// One parameterization of a group: its verdict, slope, shift, worst regret and curves.
nlohmann::json param_json(const TransferGroup& g, const ParamTransfer& p) {
  nlohmann::json curves = nlohmann::json::array();
  for (size_t i = 0; i < p.curves.size(); ++i) curves.push_back(curve_json(g.axis, p.curves[i], p.regrets[i]));
  nlohmann::json shared = nlohmann::json::array();
  for (double l : p.loss_at_shared) shared.push_back(json_num(l));
  nlohmann::json j = {{"param", p.param},
                      {"verdict", p.verdict},
                      {"transfer_holds", p.holds},
                      {"slope_doublings_per_doubling", json_num(p.slope)},
                      {"slope_interval", {json_num(p.slope_lo), json_num(p.slope_hi)}},
                      {"shift_doublings", json_num(p.shift)},
                      {"max_deviation_doublings", json_num(p.max_deviation)},
                      {"max_deviation_at", json_num(p.max_deviation_at)},
                      {"any_optimum_at_grid_edge", p.any_edge},
                      {"shared_lr_log2", json_num(p.shared_lr_log2)},
                      {"loss_at_shared_lr", shared},
                      {"worst_regret",
                       {{"lr_choice", "the smallest value's best LR grid point (nearest grid point where not run)"},
                        {"vs_standard_percent", json_num(p.worst_vs_standard)},
                        {"vs_standard_interval", {json_num(p.worst_vs_standard_lo), json_num(p.worst_vs_standard_hi)}},
                        {"vs_standard_at", json_num(p.worst_vs_standard_at)},
                        {"vs_self_percent", json_num(p.worst_vs_self)},
                        {"vs_self_interval", {json_num(p.worst_vs_self_lo), json_num(p.worst_vs_self_hi)}},
                        {"vs_self_at", json_num(p.worst_vs_self_at)}}},
                      {"curves", curves}};
  if (g.info.scale)
    j[std::string(g.axis == "width" ? "wider" : "deeper") + "_is_better"] =
        p.better_with_scale ? nlohmann::json(*p.better_with_scale) : nlohmann::json();
  else
    j["optimum_shape"] = p.shape;
  return j;
}

nlohmann::json group_json(const TransferGroup& g) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : g.params) params.push_back(param_json(g, p));
  return {{"title", g.title()},
          {"axis", g.axis},
          {"label", g.info.label},
          {"model_scale", g.info.scale},
          {"reference_rule", g.info.rule},
          {"reference_exponent", json_num(g.info.rule_exponent)},
          {"fixed", g.fixed},
          {"context", g.context},
          {"params", params}};
}

// A grid axis crossed with a scale: the base choice's regret at each scale, re-tuned and at its base LR.
nlohmann::json choice_json(const ChoiceTransfer& c) {
  nlohmann::json scales = nlohmann::json::array();
  for (const auto& s : c.scales) {
    nlohmann::json best = nlohmann::json::object();
    for (size_t j = 0; j < c.choices.size(); ++j) best[c.choices[j]] = json_num(s.best_loss[j]);
    scales.push_back({{c.scale_axis, s.scale},
                      {"best_loss_per_choice", best},
                      {"best_choice", s.best_choice},
                      {"regret_percent", json_num(s.regret)},
                      {"regret_interval", {json_num(s.regret_lo), json_num(s.regret_hi)}},
                      {"regret_at_base_lr_percent", json_num(s.regret_base_lr)},
                      {"regret_at_base_lr_interval", {json_num(s.regret_base_lr_lo), json_num(s.regret_base_lr_hi)}}});
  }
  return {{"title", c.title()},
          {"choice_axis", c.choice_axis},
          {"scale_axis", c.scale_axis},
          {"param", c.param},
          {"fixed", c.fixed},
          {"context", c.context},
          {"choices", c.choices},
          {"base_choice", c.base_choice},
          {"base_lr_log2", json_num(c.base_lr_log2)},
          {"holds", c.holds},
          {"worst_regret_percent", json_num(c.worst)},
          {"worst_regret_interval", {json_num(c.worst_lo), json_num(c.worst_hi)}},
          {"worst_regret_at", json_num(c.worst_at)},
          {"worst_regret_at_base_lr_percent", json_num(c.worst_base_lr)},
          {"worst_regret_at_base_lr_interval", {json_num(c.worst_base_lr_lo), json_num(c.worst_base_lr_hi)}},
          {"worst_regret_at_base_lr_at", json_num(c.worst_base_lr_at)},
          {"scales", scales}};
}

// A parameterization at the base LR against standard re-tuned in every swept hyperparameter.
nlohmann::json full_baseline_json(const FullBaseline& f) {
  nlohmann::json scales = nlohmann::json::array();
  for (const auto& s : f.scales)
    scales.push_back({{f.scale_axis, s.scale},
                      {"loss_at_base_lr", json_num(s.loss)},
                      {"standard_best_loss", json_num(s.standard_best)},
                      {"standard_best_at", s.standard_at},
                      {"regret_percent", json_num(s.regret)},
                      {"regret_interval", {json_num(s.regret_lo), json_num(s.regret_hi)}}});
  return {{"scale_axis", f.scale_axis},
          {"param", f.param},
          {"fixed", f.fixed},
          {"context", f.context},
          {"standard_tuned_in", f.tuned},
          {"base_lr_log2", json_num(f.base_lr_log2)},
          {"holds", f.holds},
          {"worst_regret_percent", json_num(f.worst)},
          {"worst_regret_interval", {json_num(f.worst_lo), json_num(f.worst_hi)}},
          {"worst_regret_at", json_num(f.worst_at)},
          {"scales", scales}};
}

// How each number of the JSON was computed, with the options the analysis ran under.
nlohmann::json method_json(const TransferOptions& opts) {
  return {{"mean_loss", "mean final_loss over seeds; a grid point where any seed diverged counts as +inf"},
          {"optimum", "parabola through the best grid point and its neighbours in log2 LR, vertex clamped to "
                      "their interval; the grid point itself at the edge (flagged)"},
          {"interval", fmt::format("bootstrap over seeds, jointly for a group's curves, {} resamples, {}-{}%",
                                   opts.bootstrap, opts.lo_q * 100, opts.hi_q * 100)},
          {"slope", "OLS of the optimum (log2 LR) against log2 of the axis value (values <= 0 left out)"},
          {"regret", "at each value, the loss at the smallest value's best LR grid point against the best grid-point "
                     "loss there of the same parameterization re-tuned and of standard re-tuned; worst over values"},
          {"wd_timescale", "AdamW: tau = 1/(lr wd) steps (wd_mode coupled, lr the base LR at the optimum), 1/wd "
                           "(independent)"},
          {"verdict", fmt::format("transfer holds when |shift| <= {} doubling", opts.shift_tolerance)},
          {"choice", fmt::format("for a grid axis crossed with width or depth: the base choice is the value whose "
                                 "best grid-point loss is least at the smallest scale; its regret at each scale "
                                 "against the best value there, with its LR re-tuned and at its base LR; it holds "
                                 "when the worst regret (LR re-tuned) is at most {}%",
                                 opts.choice_tolerance_pct)},
          {"full_baseline",
           fmt::format("where standard was swept in hyperparameters (hp.*, optim.*) beside its LR: at each scale its "
                       "best grid-point loss over all of them, from rows that match in the fixed model scale, "
                       "train.steps and every other axis, on the seeds both sides ran, against the loss at the "
                       "base LR; it holds when the worst regret is at most {}%",
                       opts.choice_tolerance_pct)}};
}

}  // namespace

nlohmann::json transfer_to_json(const TransferAnalysis& a) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : a.groups) groups.push_back(group_json(g));
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& c : a.choices) choices.push_back(choice_json(c));
  nlohmann::json full = nlohmann::json::array();
  for (const auto& f : a.full_baseline) full.push_back(full_baseline_json(f));
  return {{"db", a.db},
          {"sweep", a.name},
          {"rows", a.rows},
          {"diverged_rows", a.diverged_rows},
          {"method", method_json(a.opts)},
          {"groups", groups},
          {"choices", choices},
          {"full_baseline", full}};
}

}  // namespace scaleinv
