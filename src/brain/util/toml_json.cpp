// TOML scalars as JSON (see toml_json.h).
#include "brain/util/toml_json.h"

#include <functional>
#include <stdexcept>
#include <string>

namespace scaleinv {

std::optional<nlohmann::json> toml_scalar_json(const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<double>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<std::string>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<bool>()) return nlohmann::json(*v);
  return std::nullopt;
}

std::optional<std::vector<nlohmann::json>> toml_scalar_array_json(const toml::array& a) {
  std::vector<nlohmann::json> out;
  for (const auto& el : a) {
    std::optional<nlohmann::json> j = toml_scalar_json(el);
    if (!j) return std::nullopt;
    out.push_back(std::move(*j));
  }
  return out;
}

namespace {

void put_json(const nlohmann::json& v, const std::string& key, const std::function<void(toml::node&&)>& put);

toml::table table_of(const nlohmann::json& obj, const std::string& prefix) {
  toml::table t;
  for (const auto& [k, v] : obj.items())
    put_json(v, prefix + k, [&](toml::node&& n) { t.insert_or_assign(k, std::move(n)); });
  return t;
}

void put_json(const nlohmann::json& v, const std::string& key, const std::function<void(toml::node&&)>& put) {
  if (v.is_object()) {
    toml::table t = table_of(v, key + ".");
    put(std::move(t));
  } else if (v.is_array()) {
    toml::array a;
    for (size_t i = 0; i < v.size(); ++i)
      put_json(v[i], key + "[" + std::to_string(i) + "]", [&](toml::node&& n) { a.push_back(std::move(n)); });
    put(std::move(a));
  } else if (v.is_boolean()) {
    toml::value<bool> b(v.get<bool>());
    put(std::move(b));
  } else if (v.is_number_integer()) {
    toml::value<int64_t> i(v.get<int64_t>());
    put(std::move(i));
  } else if (v.is_number()) {
    toml::value<double> d(v.get<double>());
    put(std::move(d));
  } else if (v.is_string()) {
    toml::value<std::string> s(v.get<std::string>());
    put(std::move(s));
  } else {
    throw std::invalid_argument(key + " is null (None), which a sweep file cannot hold");
  }
}

}  // namespace

toml::table json_to_toml_table(const nlohmann::json& obj) {
  if (!obj.is_object()) throw std::invalid_argument("the space must be a table (a dict), not " + std::string(obj.type_name()));
  return table_of(obj, "");
}

}  // namespace scaleinv
