// Sweep files: parsing, grid expansion and validation (see sweep_spec.h).
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_spec_table.h"

#include <cmath>
#include <limits>
#include <filesystem>
#include <functional>
#include <optional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"
#include "brain/util/stable_hash.h"
#include "brain/models/model_kinds.h"
#include "brain/param/table.h"
#include "brain/sweep/search_space.h"
#include "brain/sweep/user_space.h"

namespace scaleinv {

namespace {

const std::vector<std::string> kConfigSections = {"model", "param", "hp", "optim", "data", "train"};
const char* kGridFix =
    "use a config key as --set takes it (e.g. \"optim.lr\", \"model.width\", \"hp.init_scale\") or one of "
    "param, lr_log2, seed";

// The config keys a grid may vary: every field of the training config (its JSON mirrors the TOML).
const nlohmann::json& default_config_json() {
  // Every field a grid may set: the defaults, plus the fields a config writes only under some
  // settings (brain/train/config.cpp: Muon's under optim.kind = "muon", wsd's under schedule = "wsd", the
  // Llama and mixture fields under their kinds, a mixture's bias_rate and hp.router_mult when they
  // are not at their defaults), each with a value of its type (only the types are read).
  static const nlohmann::json j = [] {
    nlohmann::json d = train_config_to_json(TrainConfig{});
    std::vector<TrainConfig> variants(1);
    variants[0].optim.kind = "muon";
    variants[0].optim.schedule = "wsd";
    for (const ModelKind& k : model_kinds()) {
      TrainConfig m;
      m.model.kind = k.name;
      m.model.bias_rate = 1;
      m.hp.router_mult = 2;
      variants.push_back(m);
    }
    for (const TrainConfig& c : variants) {
      const nlohmann::json x = train_config_to_json(c);  // named: items() must not outlive it
      for (const auto& [section, fields] : x.items())
        for (const auto& [key, value] : fields.items())
          if (!d[section].contains(key)) d[section][key] = value;
    }
    return d;
  }();
  return j;
}


// Inserts `value` at the dotted `path`, creating tables on the way.
template <class T>
void set_path(toml::table& root, const std::string& path, T value) {
  toml::table* t = &root;
  size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      t->insert_or_assign(part, value);
      return;
    }
    if (!t->contains(part) || !(*t)[part].is_table()) t->insert_or_assign(part, toml::table{});
    t = (*t)[part].as_table();
    start = dot + 1;
  }
}

void set_json_scalar(toml::table& root, const std::string& path, const nlohmann::json& v) {
  if (v.is_number_integer()) set_path(root, path, v.get<int64_t>());
  else if (v.is_number()) set_path(root, path, v.get<double>());
  else if (v.is_boolean()) set_path(root, path, v.get<bool>());
  else set_path(root, path, v.get<std::string>());
}

void merge_into(toml::table& dst, const toml::table& src) {
  for (auto&& [k, v] : src) {
    const std::string key(k.str());
    if (v.is_table() && dst.contains(key) && dst[key].is_table()) {
      merge_into(*dst[key].as_table(), *v.as_table());
    } else {
      dst.insert_or_assign(key, v);
    }
  }
}

bool is_range_table(const toml::table& t) {
  if (!t.contains("from") || !t.contains("to")) return false;
  for (auto&& [k, v] : t)
    if (k.str() != "from" && k.str() != "to" && k.str() != "step") return false;
  return true;
}

// {from, to, step} -> values (integers when every value is one).
std::vector<nlohmann::json> expand_range(const toml::table& t, const std::string& where, const std::string& field) {
  auto num = [&](const char* k, double def) {
    if (!t.contains(k)) return def;
    auto v = t.get(k)->value<double>();
    if (!v) throw UserError(where, field + "." + k, "expected a number", "write e.g. {from = -12, to = -6, step = 1}");
    return *v;
  };
  const double from = num("from", 0), to = num("to", 0), step = num("step", 1);
  if (step <= 0 || !std::isfinite(step))
    throw UserError(where, field + ".step", "must be a positive number", "write e.g. step = 1 (or 0.5)");
  if (to < from) throw UserError(where, field, "'to' is below 'from'", "write {from = LOW, to = HIGH, step = S}");
  // Counted in doubles before the cast: {from = 1, to = 1e300} (or a span past double's range) was
  // cast to int64 out of its range and reported as "the axis has no values".
  const double count = std::floor((to - from) / step + 1e-9) + 1;
  if (!(count <= 100000)) throw UserError(where, field, fmt::format("{:.3g} values", count), "use a larger step");
  const auto n = static_cast<int64_t>(count);
  std::vector<nlohmann::json> out;
  for (int64_t i = 0; i < n; ++i) {
    const double v = from + static_cast<double>(i) * step;
    if (v == std::round(v) && std::fabs(v) < 1e15) out.emplace_back(static_cast<int64_t>(std::llround(v)));
    else out.emplace_back(v);
  }
  return out;
}

// Flattens [grid] into axes; nested tables are dotted keys ("model.width"), {from,to,step} a range.
void flatten_grid(const toml::table& t, const std::string& prefix, const std::string& where,
                  std::vector<GridAxis>& axes) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix + std::string(k.str());
    const std::string field = "grid." + key;
    if (const toml::table* sub = v.as_table()) {
      if (is_range_table(*sub)) axes.push_back({key, expand_range(*sub, where, field)});
      else flatten_grid(*sub, key + ".", where, axes);
      continue;
    }
    const toml::array* arr = v.as_array();
    if (!arr)
      throw UserError(where, field, "expected an array of values", fmt::format("write {} = [value1, value2]", key));
    auto values = toml_scalar_array_json(*arr);
    if (!values)
      throw UserError(where, field, "values must be numbers, strings or booleans",
                      fmt::format("write {} = [value1, value2]", key));
    axes.push_back(GridAxis{key, std::move(*values)});
  }
}

// The config paths one axis sets, and a check of its values' types.
std::vector<std::string> axis_targets(GridAxis& axis, const std::string& where, bool user,
                                      const std::string& prefix = "grid.") {
  const std::string field = prefix + axis.key;
  if (user) {  // a user model's name (user_space.h): the key the store keeps it under
    check_user_values(axis.key, axis.values, where, field);
    return {user_target(axis.key)};
  }
  auto type_error = [&](const std::string& want, const std::string& eg) {
    throw UserError(where, field, "every value must be " + want, fmt::format("write e.g. {} = {}", axis.key, eg));
  };
  if (axis.key == "lr_log2") {
    for (const auto& v : axis.values)
      if (!v.is_number()) type_error("a number (the LR is 2^value)", "[-12, -11, -10]");
    return {"optim.lr"};
  }
  if (axis.key == "seed") {
    for (auto& v : axis.values)
      if (!to_int64(v)) {
        if (v.is_number()) throw UserError(where, field, integer_problem(v), "write e.g. seed = [0, 1]");
        type_error("an integer", "[0, 1]");
      }
    return {"train.seed", "data.seed"};
  }
  const std::string path = axis.key == "param" ? "param.name" : axis.key;
  const auto dot = path.find('.');
  const nlohmann::json& def = default_config_json();
  if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos ||
      !def.contains(path.substr(0, dot)) || !def[path.substr(0, dot)].contains(path.substr(dot + 1)) ||
      path == "train.out_dir")
    throw UserError(where, field, "unknown grid key", kGridFix);
  const nlohmann::json& d = def[path.substr(0, dot)][path.substr(dot + 1)];
  for (auto& v : axis.values) {
    if (d.is_number_integer()) {
      if (!to_int64(v)) {
        if (v.is_number()) throw UserError(where, field, integer_problem(v), fmt::format("write e.g. {} = [64, 128, 256]", axis.key));
        type_error("an integer", "[64, 128, 256]");
      }
    } else if (d.is_number()) {
      if (!v.is_number()) type_error("a number", "[0.5, 1.0, 2.0]");
    } else if (d.is_boolean()) {
      if (!v.is_boolean()) type_error("true or false", "[true, false]");
    } else if (!v.is_string()) {
      type_error("a string", "[\"standard\", \"mup\"]");
    }
  }
  return {path};
}

std::string axis_value_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// [sweep]: the name, ensemble size, averaging window and default db.
void read_sweep_section(const TomlReader& r, const std::string& where, SweepSpec& spec) {
  TomlReader s = r.sub("sweep");
  spec.name = std::filesystem::path(where).stem().string();
  s.get("name", &spec.name);
  s.get("ensemble", &spec.ensemble);
  s.get("window", &spec.window);
  s.get("db", &spec.db_path);
  std::string target = "zoo";
  s.get("target", &target);
  if (target != "zoo" && target != "python")
    s.fail("target", "'" + target + "' is not a target", "write target = \"python\" for a model trained from Python, or leave it out");
  spec.user_model = target == "python";
  s.reject_unknown();
  if (spec.name.empty()) s.fail("name", "must not be empty", "name = \"my-sweep\"");
  if (spec.ensemble < 1) s.fail("ensemble", "must be at least 1", "ensemble = 8");
  if (!(spec.window > 0 && spec.window <= 1)) s.fail("window", "must be in (0, 1]", "window = 0.1");
}

// The base config as it is built, and how errors name it.
struct BaseConfig {
  toml::table root;
  std::string label;
};

// The base file (`base`, relative to `base_dir`); an empty table when the sweep names none.
BaseConfig read_base_file(const TomlReader& r, const std::string& where, const std::string& base_dir) {
  BaseConfig b;
  b.label = where;
  if (r.has("base")) {
    std::string base;
    r.get("base", &base);
    std::filesystem::path p(base);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    std::string base_text;
    try {
      base_text = read_file(p.string());
    } catch (const UserError&) {
      throw UserError(where, "base", "cannot read '" + p.string() + "'", "give a path relative to the sweep file");
    }
    b.root = parse_toml(base_text, p.string());
    b.label = where + " (base " + p.string() + ")";
  }
  return b;
}

// The sweep file's inline config sections ([model] ... [train]), merged over the base.
void merge_inline_sections(const TomlReader& r, const toml::table& root, const std::string& where,
                           toml::table& cfg_root) {
  for (const auto& sec : kConfigSections) {
    if (!r.has(sec.c_str())) continue;
    const toml::table* t = root[sec].as_table();
    if (!t) throw UserError(where, sec, "expected a table", "write it as a [" + sec + "] section");
    toml::table copy;
    copy.insert(sec, *t);
    merge_into(cfg_root, copy);
  }
}

// `set = ["section.key=value", ...]`, applied in order, as --set does.
void apply_set_lines(const TomlReader& r, const toml::table& root, const std::string& where, toml::table& cfg_root) {
  if (!r.has("set")) return;
  const toml::array* arr = root["set"].as_array();
  if (!arr) throw UserError(where, "set", "expected an array of strings", "set = [\"train.steps=100\"]");
  for (const auto& el : *arr) {
    auto s = el.value_exact<std::string>();
    if (!s) throw UserError(where, "set", "expected an array of strings", "set = [\"train.steps=100\"]");
    try {
      apply_override(cfg_root, *s);
    } catch (const UserError& e) {
      throw UserError(where, "set", e.what(), "write \"section.key=value\"");
    }
  }
}

// [grid] flattened into axes, in file order (none when only [search] is given).
std::vector<GridAxis> read_grid(const TomlReader& r, const toml::table& root, const std::string& where) {
  if (!r.has("grid") && !r.has("search"))
    throw UserError(where, "grid", "missing", "add a [grid] table, e.g. lr_log2 = [-10, -8, -6]");
  std::vector<GridAxis> axes;
  if (r.has("grid")) {
    const toml::table* grid = root["grid"].as_table();
    if (!grid) throw UserError(where, "grid", "expected a table", "write it as a [grid] section");
    flatten_grid(*grid, "", where, axes);
  }
  if (axes.empty() && !r.has("search"))
    throw UserError(where, "grid", "the grid is empty", "add an axis, e.g. lr_log2 = [-10, -8, -6]");
  return axes;
}

// Every axis has values, each once, of the type its config key takes (normalised in place, e.g.
// 2.0 -> 2 for an integer key), and no two axes set the same config key.
void check_grid_axes(std::vector<GridAxis>& axes, const std::string& where, bool user) {
  std::map<std::string, std::string> target_owner;
  for (auto& a : axes) {
    if (a.values.empty())
      throw UserError(where, "grid." + a.key, "the axis has no values", "give at least one value, e.g. [1, 2]");
    std::set<std::string> seen;
    for (const auto& v : a.values)
      if (!seen.insert(v.dump()).second)
        throw UserError(where, "grid." + a.key, "value " + v.dump() + " appears twice", "list each value once");
    for (const auto& t : axis_targets(a, where, user)) {
      auto [it, fresh] = target_owner.emplace(t, a.key);
      if (!fresh)
        throw UserError(where, "grid." + a.key, "sets " + t + " like grid." + it->second, "keep only one of the two");
    }
  }
}

// Expansion order: structural axes (param first, then alphabetical), the LR, then the seed.
std::vector<GridAxis> in_expansion_order(const std::vector<GridAxis>& axes) {
  auto rank = [](const std::string& k) {
    if (k == "param" || k == "param.name") return 0;
    if (k == "lr_log2" || k == "optim.lr" || k == "lr") return 2;
    if (k == "seed" || k == "train.seed" || k == "data.seed") return 3;
    return 1;
  };
  std::vector<size_t> order(axes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rank(axes[a].key) != rank(axes[b].key)) return rank(axes[a].key) < rank(axes[b].key);
    return axes[a].key < axes[b].key;
  });
  std::vector<GridAxis> out;
  for (size_t i : order) out.push_back(axes[i]);
  return out;
}

// The Cartesian product, last axis fastest; every point loaded through the config loader.
// Bounded before expanding: a grid of 10^8 points would otherwise expand for hours, silently.
constexpr double kMaxPoints = 100000;

// The number of grid points (spec.axes), at most kMaxPoints.
double bounded_grid_size(const SweepSpec& spec) {
  double product = 1;
  for (const auto& ax : spec.axes) product *= static_cast<double>(ax.values.size());
  if (product > kMaxPoints)
    throw UserError(spec.path.empty() ? std::string("sweep") : spec.path, "grid",
                    fmt::format("the grid has {:.0f} points, more than {:.0f}", product, kMaxPoints),
                    "use fewer values per axis, or split it into several sweep files");
  return product;
}

// [search]: its trials (each key checked like a grid axis, and not one), bounded with the grid's
// `product` points; spec.points become its first rung's.
void expand_search(const toml::table& root, const std::string& where, double product, SweepSpec& spec) {
  const toml::table* st = root["search"].as_table();
  if (!st) throw UserError(where, "search", "expected a table", "write it as a [search] section");
  auto check = [&](const std::string& key, const std::string& field, bool* integer, std::vector<nlohmann::json>& probe) {
    for (const auto& a : spec.axes)
      if (a.key == key || (spec.user_model && user_target(a.key) == user_target(key)))  // (a user's lr and lr_log2: one)
        throw UserError(where, field, "is also a [grid] axis", "keep it in one of the two");
    if (spec.user_model)
      for (const auto& [name, v] : spec.fixed.items())
        if (user_target(name) == user_target(key))
          throw UserError(where, field, "sets what fixed." + name + " sets", "keep it in one of the two");
    GridAxis ax{key, probe};
    const std::string target = axis_targets(ax, where, spec.user_model, "search.space.").front();  // errors name search.space.KEY
    if (spec.user_model && target == "train.steps")
      throw UserError(where, field, "the search's rungs set the steps", "put steps = N in [fixed]");
    if (spec.user_model) {
      probe = ax.values;
      *integer = check_user_values(key, probe, where, field);
    }
    // The LR's range ends (or every choice): a draw past float32's largest would overflow deep in
    // libtorch in the middle of the search; the grid's values are checked by the config loader.
    if (key == "lr_log2" || key == "optim.lr" || (spec.user_model && target == "optim.lr"))  // (a user's "lr")
      for (const auto& v : ax.values) {
        const double lr = key == "lr_log2" ? std::exp2(v.get<double>()) : v.get<double>();
        if (!(lr > 0) || !(lr <= std::numeric_limits<float>::max()))
          throw UserError(where, field, fmt::format("reaches an LR of {:g}, which float32 does not hold (<= 3.4e38)", lr),
                          "keep the LR below 2^128, e.g. lr_log2 = {from = -12, to = -4}");
      }
    if (key != "lr_log2" && !spec.user_model) {
      const nlohmann::json& def = default_config_json();
      const std::string path = key == "param" ? "param.name" : key;
      const auto dot = path.find('.');
      *integer = def[path.substr(0, dot)][path.substr(dot + 1)].is_number_integer();
    }
    probe = ax.values;
  };
  spec.search = parse_search(*st, where, check, spec.full_steps);
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  const int total = total_trials(br);
  if (product * total > kMaxPoints)
    throw UserError(where, "search.trials",
                    fmt::format("{} trials x {:.0f} grid points is more than {:.0f} points", total, product, kMaxPoints),
                    "sample fewer trials");
  // Every bracket's trials expanded once here (at the first rung's budget; the rungs differ only
  // in steps), so that a repeated config is named now, not rungs into the search.
  std::vector<int> all(static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<SweepPoint> every = expand_points(spec, rung_assignments(*spec.search, 0, all, spec.full_steps));
  // The first rung holds the first bracket's trials (hyperband's other brackets start later).
  for (SweepPoint& p : every)
    if (p.axes.at("search.trial").get<int>() < br.front().trials) spec.points.push_back(std::move(p));
}

// A user model's [fixed]: name -> value (nested tables are dotted names), each checked as a grid
// axis's values are.
nlohmann::json read_user_fixed(const toml::table& root, const std::string& where) {
  nlohmann::json fixed = nlohmann::json::object();
  const toml::node* node = root.get("fixed");
  if (!node) return fixed;
  const toml::table* t = node->as_table();
  if (!t) throw UserError(where, "fixed", "expected a table", "write it as a [fixed] section (name = value)");
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& tt, const std::string& prefix) {
    for (auto&& [k, v] : tt) {
      const std::string name = prefix + std::string(k.str());
      if (const toml::table* sub = v.as_table()) {
        walk(*sub, name + ".");
        continue;
      }
      const std::optional<nlohmann::json> j = toml_scalar_json(v);
      if (!j) throw UserError(where, "fixed." + name, "expected one value", fmt::format("write {} = value (a list of values goes in [grid])", name));
      std::vector<nlohmann::json> one = {*j};
      check_user_values(name, one, where, "fixed." + name);
      for (const auto& [other, ov] : fixed.items())
        if (user_target(other) == user_target(name))
          throw UserError(where, "fixed." + name, "sets what fixed." + other + " sets", "keep only one of the two");
      fixed[name] = one.front();
    }
  };
  walk(*t, "");
  return fixed;
}

// The hash of every point id, the window and [search].
std::string sweep_fingerprint(const SweepSpec& spec) {
  std::string all = fmt::format("window={}\n", spec.window);
  if (spec.search) all += "search=" + spec.search->text + "\n";
  for (const auto& p : spec.points) all += p.id + "\n";
  return stable_hash(all);
}


// A user model's sweep ([sweep] target = "python"): [fixed] instead of a base config, the user's
// names as keys (user_space.h).
SweepSpec user_sweep_spec(const toml::table& root, const TomlReader& r, const std::string& where, SweepSpec spec) {
  r.expect_keys({"sweep", "fixed", "grid", "search"});
  spec.fixed = read_user_fixed(root, where);
  std::vector<GridAxis> axes = read_grid(r, root, where);
  check_grid_axes(axes, where, true);
  for (const GridAxis& a : axes)
    for (const auto& [name, v] : spec.fixed.items())
      if (user_target(name) == user_target(a.key))
        throw UserError(where, "grid." + a.key, "sets what fixed." + name + " sets", "keep it in one of the two");
  spec.axes = in_expansion_order(axes);
  const double product = bounded_grid_size(spec);
  spec.label = where;
  if (r.has("search")) {
    for (const GridAxis& a : spec.axes)
      if (user_store_key(a.key) == "train.steps")
        throw UserError(where, "grid." + a.key, "the search's rungs set the steps", "put steps = N in [fixed]");
    for (const auto& [name, v] : spec.fixed.items())
      if (user_store_key(name) == "train.steps") spec.full_steps = v.get<int64_t>();
    if (spec.full_steps == 0) throw UserError(where, "fixed.steps", "missing", "a search needs its full budget: add steps = N to [fixed]");
    expand_search(root, where, product, spec);
  } else {
    spec.points = expand_points(spec, {nlohmann::json::object()});
  }
  spec.fingerprint = sweep_fingerprint(spec);
  return spec;
}

}  // namespace

std::string to_toml_text(const toml::table& t) {
  std::ostringstream os;
  os << toml::toml_formatter(t);
  return os.str();
}

nlohmann::json SweepSpec::grid_json() const {
  nlohmann::json axes_j = nlohmann::json::array();
  for (const auto& a : axes) axes_j.push_back({{"key", a.key}, {"values", a.values}});
  return {{"axes", axes_j}, {"points", points.size()}};
}

SweepSpec sweep_from_toml_text(const std::string& text, const std::string& where, const std::string& base_dir) {
  return sweep_from_toml_table(parse_toml(text, where), text, where, base_dir);
}

SweepSpec sweep_from_toml_table(const toml::table& root, const std::string& stored_text, const std::string& where,
                                const std::string& base_dir) {
  SweepSpec spec;
  spec.toml_text = stored_text;
  spec.path = where;
  TomlReader r(root, where, "");
  read_sweep_section(r, where, spec);
  if (spec.user_model) return user_sweep_spec(root, r, where, std::move(spec));
  std::vector<std::string> top = {"base", "set", "sweep", "grid", "search"};
  top.insert(top.end(), kConfigSections.begin(), kConfigSections.end());
  r.expect_keys(top);

  // The base config: file, then inline sections, then `set`.
  BaseConfig base = read_base_file(r, where, base_dir);
  merge_inline_sections(r, root, where, base.root);
  apply_set_lines(r, root, where, base.root);
  train_config_from_toml_text(to_toml_text(base.root), base.label);  // the base alone must load

  std::vector<GridAxis> axes = read_grid(r, root, where);
  check_grid_axes(axes, where, false);
  spec.axes = in_expansion_order(axes);
  const double product = bounded_grid_size(spec);
  spec.base_toml = to_toml_text(base.root);
  spec.label = base.label;
  if (r.has("search")) {
    spec.full_steps = train_config_from_toml_text(spec.base_toml, spec.label).train.steps;
    expand_search(root, where, product, spec);
  }
  else spec.points = expand_points(spec, {nlohmann::json::object()});
  spec.fingerprint = sweep_fingerprint(spec);
  return spec;
}

std::vector<SweepPoint> expand_points(const SweepSpec& spec, const std::vector<nlohmann::json>& extra) {
  const std::string& where = spec.path;
  const toml::table cfg_root = spec.user_model ? toml::table{} : parse_toml(spec.base_toml, spec.label);
  std::vector<SweepPoint> out;
  std::set<std::string> ids, checked_params;
  std::vector<std::vector<std::string>> targets;
  for (GridAxis a : spec.axes) targets.push_back(axis_targets(a, where, spec.user_model));
  for (const nlohmann::json& add : extra) {
    std::vector<size_t> idx(spec.axes.size(), 0);
    bool done = false;
    while (!done) {
      toml::table pt = cfg_root;
      nlohmann::json axes_j = nlohmann::json::object();
      for (size_t a = 0; a < spec.axes.size(); ++a) {
        const nlohmann::json& v = spec.axes[a].values[idx[a]];
        axes_j[spec.axes[a].key] = v;
        if (spec.user_model) continue;  // a user model's point is built from its names below
        for (const auto& t : targets[a]) {
          if (spec.axes[a].key == "lr_log2") set_path(pt, t, std::exp2(v.get<double>()));
          else set_json_scalar(pt, t, v);
        }
      }
      // The assignment on top: config keys as grid keys; "search.*" keys are recorded, not set.
      for (const auto& [k, v] : add.items()) {
        axes_j[k] = v;
        if (k.rfind("search.", 0) == 0 || spec.user_model) continue;
        if (k == "lr_log2") set_path(pt, "optim.lr", std::exp2(v.get<double>()));
        else set_json_scalar(pt, k, v);
      }
      std::string desc;
      for (auto& [k, v] : axes_j.items()) desc += (desc.empty() ? "" : ", ") + k + "=" + axis_value_text(v);
      SweepPoint p;
      try {
        if (spec.user_model) {  // [fixed], then the grid and the assignment over it (user_space.h)
          nlohmann::json assignment = spec.fixed;
          for (const auto& [k, v] : axes_j.items()) assignment[k] = v;
          p.user = user_point(assignment, where, spec.search ? "search" : "grid");
          const std::string& param = p.user->coords.param;
          if (checked_params.insert(param).second) load_param(param);  // an unknown preset: named now
          p.axes = axes_j;
          p.id = stable_hash(p.user->config.dump());
        } else {
          p.config = train_config_from_toml_text(to_toml_text(pt), spec.label);
          if (checked_params.insert(p.config.param).second) {  // unknown preset, bad file: named in this file
            const ConfigSource source(p.config.source);
            resolve_param(p.config);
          }
        }
      } catch (const UserError& e) {
        throw UserError(where, spec.search ? "search" : "grid",
                        fmt::format("the point ({}) is not a valid config: {}", desc, e.what()),
                        "change the grid value or the base config");
      }
      if (!spec.user_model) {
        p.axes = axes_j;
        nlohmann::json cj = train_config_to_json(p.config);
        cj["train"]["out_dir"] = "";
        cj["train"].erase("cuda_graph");  // a speed switch: the same arithmetic, the same point
        p.id = stable_hash(cj.dump());
      }
      if (!ids.insert(p.id).second)
        throw UserError(where, spec.search ? "search" : "grid",
                        fmt::format("the point ({}) repeats an earlier point's config", desc),
                        spec.search ? "widen the search range or use fewer trials of a choice-only space"
                                    : "remove the axis value that has no effect");
      out.push_back(std::move(p));
      size_t a = spec.axes.size();  // advance the odometer
      for (;;) {
        if (a == 0) {
          done = true;
          break;
        }
        --a;
        if (++idx[a] < spec.axes[a].values.size()) break;
        idx[a] = 0;
      }
    }
  }
  return out;
}

SweepSpec load_sweep(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const UserError&) {
    throw UserError(path, "", "cannot open sweep file", "check the path (examples/sweeps/ has examples)");
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  SweepSpec s = sweep_from_toml_text(text, path, dir);
  s.path = path;
  return s;
}

}  // namespace scaleinv
