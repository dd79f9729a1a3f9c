// The space of a sweep of the user's own model (see user_space.h).
#include "brain/sweep/user_space.h"

#include <cmath>

#include <fmt/format.h>

#include "brain/util/errors.h"

namespace scaleinv {

namespace {

enum class Kind { Text, Integer, Number };

// A name with a meaning of its own: its store key, and what it takes.
struct UserName {
  const char* name;
  const char* key;
  Kind kind;
  double min;           // the smallest value it takes (-inf: any)
  bool min_open;        // > min rather than >= min
  double max = HUGE_VAL;  // the largest (width and depth: the config's int)
};

constexpr double kIntMax = 2147483647.0;

const std::vector<UserName>& names() {
  static const std::vector<UserName> t = {
      {"param", "param", Kind::Text, 0, false},
      {"width", "model.width", Kind::Integer, 1, false, kIntMax},
      {"depth", "model.depth", Kind::Integer, 1, false, kIntMax},
      {"lr", "optim.lr", Kind::Number, 0, true},
      {"lr_log2", "lr_log2", Kind::Number, -HUGE_VAL, false},
      {"seed", "seed", Kind::Integer, 0, false},
      {"steps", "train.steps", Kind::Integer, 1, false},
      {"batch_size", "train.batch_size", Kind::Integer, 1, false},
      {"weight_decay", "optim.weight_decay", Kind::Number, 0, false},
      {"warmup_steps", "optim.warmup_steps", Kind::Integer, 0, false},
  };
  return t;
}

const UserName* find_name(const std::string& n) {
  for (const UserName& u : names())
    if (n == u.name || n == u.key) return &u;
  return nullptr;
}

// Sets cfg[a][b] for a dotted key "a.b".
void set_dotted(nlohmann::json& cfg, const std::string& key, const nlohmann::json& v) {
  const auto dot = key.find('.');
  cfg[key.substr(0, dot)][key.substr(dot + 1)] = v;
}

}  // namespace

bool to_int64(nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  // [-2^63, 2^63): every double in it converts exactly (2^63 itself is past INT64_MAX).
  if (x != std::round(x) || !(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) return false;
  v = static_cast<int64_t>(x);
  return true;
}

std::string integer_problem(const nlohmann::json& v) {
  if (v.is_number() && (v.is_number_unsigned() || std::fabs(v.get<double>()) >= 9223372036854775808.0))
    return fmt::format("{} is past a 64-bit integer (from -2^63 to 2^63-1)", v.dump());
  return "every value must be an integer";
}

std::string user_store_key(const std::string& name) {
  const UserName* u = find_name(name);
  return u ? u->key : name;
}

std::string user_target(const std::string& name) {
  const std::string key = user_store_key(name);
  return key == "lr_log2" ? "optim.lr" : key == "seed" ? "train.seed" : key;
}

bool check_user_values(const std::string& name, std::vector<nlohmann::json>& values, const std::string& where,
                       const std::string& field) {
  if (name.empty() || name.rfind("search.", 0) == 0 || name.rfind("user.", 0) == 0)
    throw UserError(where, field, "'" + name + "' is not a name a sweep can set", "name the hyperparameter otherwise, e.g. init_scale");
  const UserName* u = find_name(name);
  if (!u) {
    for (const auto& v : values)
      if (!(v.is_number() || v.is_string() || v.is_boolean()))
        throw UserError(where, field, "values must be numbers, strings or booleans", "write e.g. [0.5, 1.0]");
    return false;
  }
  for (auto& v : values) {
    if (u->kind == Kind::Text) {
      if (!v.is_string() || v.get<std::string>().empty())
        throw UserError(where, field, "every value must be a preset name or a table file", "write e.g. [\"mup\", \"standard\"]");
      continue;
    }
    if (u->kind == Kind::Integer && !to_int64(v))
      throw UserError(where, field, integer_problem(v), fmt::format("write e.g. {} = [64, 128]", u->name));
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw UserError(where, field, "every value must be a finite number", fmt::format("write e.g. {} = [1, 2]", u->name));
    const double x = v.get<double>();
    if (u->min_open ? !(x > u->min) : !(x >= u->min))
      throw UserError(where, field, fmt::format("{} is below what {} takes ({} {:g})", v.dump(), u->name,
                                                u->min_open ? ">" : ">=", u->min),
                      "give values in its range");
    if (x > u->max)  // (a model dimension: a parameter or token count is an axis of its own, 64-bit)
      throw UserError(where, field, fmt::format("{} is above what {} takes (<= {:.0f}: a model dimension)", v.dump(), u->name, u->max),
                      "give values in its range; a parameter or token count is an axis of its own, e.g. "
                      "N = [2.15e9] beside width (read as a number: predict --joint N,D fits it)");
  }
  return u->kind == Kind::Integer;
}

UserPoint user_point(const nlohmann::json& assignment, const std::string& where, const std::string& field) {
  UserPoint p;
  nlohmann::json& cfg = p.config;
  cfg = {{"model", {{"kind", "user"}}}};
  PointCoords& c = p.coords;  // width and depth stay 0 (not set) unless named
  bool has_lr = false, has_steps = false, has_param = false;
  for (const auto& [name, v] : assignment.items()) {
    if (name.rfind("search.", 0) == 0 || name == "optim.total_steps") continue;  // recorded in the axes only
    const std::string key = user_store_key(name);
    if (key == "param") {
      cfg["param"]["name"] = v;
      c.param = v.get<std::string>();
      has_param = true;
    } else if (key == "lr_log2" || key == "optim.lr") {
      const double lr = key == "lr_log2" ? std::exp2(v.get<double>()) : v.get<double>();
      cfg["optim"]["lr"] = lr;
      c.lr = lr;
      has_lr = true;
    } else if (key == "seed") {
      cfg["train"]["seed"] = v;
      c.seed = v.get<int64_t>();
    } else if (find_name(name)) {
      set_dotted(cfg, key, v);
      if (key == "model.width") c.width = static_cast<int>(v.get<int64_t>());
      if (key == "model.depth") c.depth = static_cast<int>(v.get<int64_t>());
      if (key == "train.steps") {
        c.steps = v.get<int64_t>();
        has_steps = true;
      }
    } else {
      cfg["user"][name] = v;
    }
  }
  if (!has_lr) throw UserError(where, field, "no learning rate is set", "add lr_log2 (or lr) to [fixed], the grid or the search");
  if (!has_steps) throw UserError(where, field, "no training budget is set", "add steps = N to [fixed]");
  if (!has_param) throw UserError(where, field, "no parameterization is set", "add param = \"mup\" to [fixed] or the grid");
  return p;
}

nlohmann::json user_store_axes(const nlohmann::json& axes) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : axes.items()) out[user_store_key(k)] = v;
  return out;
}

nlohmann::json user_hparams(const nlohmann::json& c) {
  nlohmann::json h = nlohmann::json::object();
  h["param"] = c.at("param").at("name");
  for (const UserName& u : names()) {
    const std::string key = u.key;
    const auto dot = key.find('.');
    if (dot == std::string::npos) continue;
    const std::string sec = key.substr(0, dot), field = key.substr(dot + 1);
    if (c.contains(sec) && c[sec].contains(field)) h[u.name] = c[sec][field];
  }
  h["seed"] = c.contains("train") && c["train"].contains("seed") ? c["train"]["seed"] : nlohmann::json(0);
  if (c.contains("user"))
    for (const auto& [k, v] : c["user"].items()) h[k] = v;
  return h;
}

}  // namespace scaleinv
