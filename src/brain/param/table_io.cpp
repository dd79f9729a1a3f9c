// Reading and writing parameterization tables: TOML (user files), JSON (checkpoints, --json).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "brain/util/errors.h"
#include "brain/util/stable_hash.h"
#include "brain/util/toml_reader.h"
#include "brain/param/table.h"

namespace scaleinv {

namespace {

const char* kFixHint = "see examples/params/custom.toml for the format";

// { sgd = .., adam = .., adafactor = .., muon = .. }; families missing from a partial row keep *dst.
// muon is optional (tables written before it existed): returns whether it was given, so the caller
// can derive it (derive_muon_column).
bool families_at(const TomlReader& r, const char* key, std::array<double, kNumFamilies>* dst, bool required) {
  if (!r.has(key)) {
    if (required) r.fail(key, "missing", std::string("add ") + key + " = { sgd = .., adam = .., adafactor = .. }");
    return false;
  }
  TomlReader f = r.sub(key);
  f.expect_keys({"sgd", "adam", "adafactor", "muon"});
  for (int i = 0; i < kNumFamilies; ++i) {
    const auto fam = static_cast<OptFamily>(i);
    if (required && fam != OptFamily::Muon) f.require_exponent(family_name(fam), &(*dst)[i]);
    else f.get_exponent(family_name(fam), &(*dst)[i]);
  }
  return f.has(family_name(OptFamily::Muon));
}

// One role's row; `base` given: a partial row over it (the attention roles over the hidden row).
RoleExponents role_at(const TomlReader& r, const RoleExponents* base, Role role) {
  // A misspelt field is named as such, before the field it was meant to be is reported missing.
  std::vector<std::string> keys;
  for (const RoleColumn& col : role_columns()) keys.push_back(col.key);
  r.expect_keys(keys);
  RoleExponents e = base ? *base : RoleExponents{};
  const bool full = base == nullptr;
  std::vector<const RoleColumn*> muon_missing;  // per-family columns given without muon
  for (const RoleColumn& col : role_columns()) {
    if (col.families) {
      const bool given = r.has(col.key);
      if (!families_at(r, col.key, &(e.*col.families), full && col.required) && (full || given))
        muon_missing.push_back(&col);
    } else if (full && col.required) {
      r.require_exponent(col.key, &(e.*col.scalar));
    } else {
      r.get_exponent(col.key, &(e.*col.scalar));
    }
  }
  // No muon given: the convention of derive_muon_column (brain/param/table.h), from this row's adam; a
  // partial row without the column keeps its base row's muon.
  RoleExponents derived = e;
  derive_muon_column(derived, role);
  const int muon = static_cast<int>(OptFamily::Muon);
  for (const RoleColumn* col : muon_missing) (e.*col->families)[muon] = (derived.*col->families)[muon];
  if (e.unit < 0 || e.unit > 1) r.fail("unit", "must lie in [0, 1]", "0: the fan-in scale in the init; 1: in the op");
  // The embedding and the readout lie outside every residual block, where depth exponents do not
  // act (tensor_scale): a nonzero one there would be ignored, so it is refused.
  if (role == Role::Embedding || role == Role::Readout)
    for (const RoleColumn& col : role_columns()) {
      if (!col.in_block_only || !r.has(col.key)) continue;
      const bool nonzero = col.families ? std::any_of((e.*col.families).begin(), (e.*col.families).end(),
                                                      [](double v) { return v != 0; })
                                        : e.*col.scalar != 0;
      if (nonzero)
        r.fail(col.key, fmt::format("the {} lies outside the residual blocks, where depth exponents do not act", role_name(role)),
               "remove it: depth exponents scale the tensors inside residual blocks only");
    }
  return e;
}

// { sgd = .., adam = .., adafactor = .., muon = .. } as TOML text and as JSON.
std::string families_toml(const std::array<double, kNumFamilies>& v) {
  std::string s = "{ ";
  for (int f = 0; f < kNumFamilies; ++f)
    s += fmt::format("{}{} = {}", f ? ", " : "", family_name(static_cast<OptFamily>(f)), v[static_cast<size_t>(f)]);
  return s + " }";
}
bool all_zero(const std::array<double, kNumFamilies>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x == 0; });
}
nlohmann::json families_json(const std::array<double, kNumFamilies>& v) {
  nlohmann::json j;
  for (int f = 0; f < kNumFamilies; ++f) j[family_name(static_cast<OptFamily>(f))] = v[static_cast<size_t>(f)];
  return j;
}

}  // namespace

ParamTable param_from_toml_string(const std::string& text, const std::string& where) {
  const toml::table root = parse_toml(text, where);
  const TomlReader r(root, where, "");
  r.expect_keys({"name", "source", "base_width", "base_depth", "base_experts", "attn_logit", "depth", "unit", "roles"});
  ParamTable t;
  t.name = std::filesystem::path(where).stem().string();
  t.source = "custom: " + where;
  r.get("name", &t.name);
  r.get("source", &t.source);
  r.get("base_width", &t.base_width);
  r.get("base_depth", &t.base_depth);
  r.get("base_experts", &t.base_experts);
  if (t.base_experts <= 0) r.fail("base_experts", "must be a positive integer", "e.g. base_experts = 4");
  if (t.base_width <= 0) r.fail("base_width", "must be a positive integer", "e.g. base_width = 64");
  if (t.base_depth <= 0) r.fail("base_depth", "must be a positive integer", "e.g. base_depth = 4");
  r.get_exponent("attn_logit", &t.attn_logit);
  const TomlReader depth = r.sub("depth");
  depth.get_exponent("branch", &t.branch);
  depth.get_exponent("shortcut", &t.shortcut);
  depth.reject_unknown();
  const TomlReader unit = r.sub("unit");  // unit-scaled ops (table.h UnitScaling); all false when absent
  unit.get("backward", &t.unit.backward);
  unit.get("nonlin", &t.unit.nonlin);
  unit.get("residual", &t.unit.residual);
  unit.get("loss", &t.unit.loss);
  unit.reject_unknown();
  if (!r.has("roles")) r.fail("roles", "missing table [roles.<role>]", kFixHint);
  const TomlReader roles = r.sub("roles");
  std::vector<std::string> role_keys;
  for (Role x : all_roles()) role_keys.push_back(role_name(x));
  roles.expect_keys(role_keys);  // a misspelt role is named before a missing one
  for (int i = 0; i < kCoreRoles; ++i) {
    const char* key = role_name(static_cast<Role>(i));
    if (!roles.has(key)) roles.fail(key, "missing", std::string("add a [roles.") + key + "] table with a, b, lr");
    t.row(static_cast<Role>(i)) = role_at(roles.sub(key), nullptr, static_cast<Role>(i));
  }
  // Attention and expert roles default to the hidden row, the router to the readout row
  // (default_row); a partial table overrides single fields.
  for (int i = kCoreRoles; i < kNumRoles; ++i) {
    const Role a = static_cast<Role>(i);
    const char* key = role_name(a);
    const RoleExponents base = default_row(t, a);
    t.row(a) = roles.has(key) ? role_at(roles.sub(key), &base, a) : base;
  }
  return t;
}

ParamTable param_from_toml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path, "", "is a directory, not a parameterization file", "give the path of a .toml file, or a preset name");
  std::ifstream in(path);
  if (!in) throw UserError(path, "", "cannot open parameterization file", "check the path (a relative one is read from the directory scaleinv runs in), or use a preset name");
  std::stringstream ss;
  ss << in.rdbuf();
  return param_from_toml_string(ss.str(), path);
}

ParamTable load_param(const std::string& name_or_file) {
  const bool looks_like_file = name_or_file.find('/') != std::string::npos ||
                               name_or_file.find(".toml") != std::string::npos;
  // A bare preset name is the preset even when the working directory holds something of that name
  // (a clone of microsoft/mup is a folder called "mup"); write ./mup for the file.
  const auto names = preset_names();
  const bool is_preset = std::find(names.begin(), names.end(), name_or_file) != names.end();
  if (looks_like_file || (!is_preset && std::filesystem::exists(name_or_file))) return param_from_toml_file(name_or_file);
  return preset(name_or_file);
}

std::string param_to_toml(const ParamTable& t) {
  std::string s;
  s += fmt::format("name = \"{}\"\nsource = \"{}\"\nbase_width = {}\nbase_depth = {}\n", t.name, t.source,
                   t.base_width, t.base_depth);
  if (t.base_experts != ParamTable{}.base_experts) s += fmt::format("base_experts = {}\n", t.base_experts);
  s += fmt::format("attn_logit = {}\n\n", t.attn_logit);
  s += fmt::format("[depth]\nbranch = {}\nshortcut = {}\n", t.branch, t.shortcut);
  s += fmt::format("\n[unit]\nbackward = {}\nnonlin = {}\nresidual = {}\nloss = {}\n", t.unit.backward, t.unit.nonlin,
                   t.unit.residual, t.unit.loss);
  for (Role r : all_roles()) {
    if (role_is_default(t, r)) continue;  // the default_row: implied
    const RoleExponents& e = t.row(r);
    s += fmt::format("\n[roles.{}]\n", role_name(r));
    for (const RoleColumn& col : role_columns()) {
      if (col.families && col.omitted_when_zero && all_zero(e.*col.families)) continue;
      s += fmt::format("{} = {}\n", col.key, col.families ? families_toml(e.*col.families) : fmt::format("{}", e.*col.scalar));
    }
  }
  return s;
}

nlohmann::json param_to_json(const ParamTable& t) {
  nlohmann::json j;
  j["name"] = t.name;
  j["source"] = t.source;
  j["base_width"] = t.base_width;
  j["base_depth"] = t.base_depth;
  j["attn_logit"] = t.attn_logit;
  j["depth"] = {{"branch", t.branch}, {"shortcut", t.shortcut}};
  if (t.base_experts != ParamTable{}.base_experts) j["base_experts"] = t.base_experts;
  for (Role r : all_roles()) {
    // The router and expert rows only where they differ from their default_row, the expert-count
    // column only where nonzero: every table from before them keeps its JSON and fingerprint.
    if (role_is_default(t, r)) continue;
    const RoleExponents& e = t.row(r);
    nlohmann::json& jr = j["roles"][role_name(r)];
    for (const RoleColumn& col : role_columns()) {
      if (col.families) {
        if (!(col.omitted_when_zero && all_zero(e.*col.families))) jr[col.key] = families_json(e.*col.families);
      } else if (!(col.omitted_when_zero && e.*col.scalar == 0)) {
        jr[col.key] = e.*col.scalar;  // unit: only where set, so older tables keep their JSON and fingerprint
      }
    }
  }
  if (t.unit.any())
    j["unit"] = {{"backward", t.unit.backward}, {"nonlin", t.unit.nonlin}, {"residual", t.unit.residual},
                 {"loss", t.unit.loss}};
  return j;
}

ParamTable param_from_json(const nlohmann::json& j) {
  // The JSON form is written by scaleinv itself (checkpoints); reuse the TOML validator on it by
  // reading the fields directly.
  ParamTable t;
  t.name = j.at("name").get<std::string>();
  t.source = j.at("source").get<std::string>();
  t.base_width = j.at("base_width").get<int>();
  t.base_depth = j.at("base_depth").get<int>();
  t.attn_logit = j.at("attn_logit").get<double>();
  t.branch = j.at("depth").at("branch").get<double>();
  t.shortcut = j.at("depth").at("shortcut").get<double>();
  t.base_experts = j.value("base_experts", ParamTable{}.base_experts);
  for (Role r : all_roles()) {
    if (!j.at("roles").contains(role_name(r)) && r >= Role::Router) {
      t.row(r) = default_row(t, r);  // written only where it differs (param_to_json)
      continue;
    }
    const auto& jr = j.at("roles").at(role_name(r));
    RoleExponents& e = t.row(r);
    const char* muon = family_name(OptFamily::Muon);
    // A file from before the muon column: derived (derive_muon_column) after the rest is read.
    const bool older = !jr.at("lr").contains(muon);
    for (const RoleColumn& col : role_columns()) {
      if (col.families) {
        if (col.omitted_when_zero && !jr.contains(col.key)) continue;
        const auto& jf = jr.at(col.key);
        for (int f = 0; f < kNumFamilies; ++f) {
          const char* fam = family_name(static_cast<OptFamily>(f));
          if (static_cast<OptFamily>(f) == OptFamily::Muon && !jf.contains(fam)) continue;
          (e.*col.families)[static_cast<size_t>(f)] = jf.at(fam).get<double>();
        }
      } else {
        e.*col.scalar = col.omitted_when_zero ? jr.value(col.key, 0.0) : jr.at(col.key).get<double>();
      }
    }
    if (older) derive_muon_column(e, r);
  }
  if (j.contains("unit")) {
    const auto& ju = j.at("unit");
    t.unit.backward = ju.value("backward", false);
    t.unit.nonlin = ju.value("nonlin", false);
    t.unit.residual = ju.value("residual", false);
    t.unit.loss = ju.value("loss", false);
  }
  return t;
}

std::string param_fingerprint(const ParamTable& t) {
  nlohmann::json j = param_to_json(t);
  j.erase("name");
  j.erase("source");
  return stable_hash(j.dump());
}

}  // namespace scaleinv
